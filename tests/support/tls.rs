//! A private TLS-only `redis-server` for tests: a CA and a server
//! certificate (for `127.0.0.1` and `localhost`) generated with `rcgen`,
//! and a server started with `--port 0 --tls-port <free port>` in its own
//! temp dir. Killed and its dir removed on drop.
//!
//! Std and rcgen only: the fred TLS types need fred's TLS feature, which
//! the test that connects enables through `delayqueue`'s `tls`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};

use super::{free_port, unique_temp_dir};

/// How long the server may take to say it is ready.
const READY_TIMEOUT: Duration = super::WAIT;
/// Attempts with a fresh port when the server exits early (port race).
const START_ATTEMPTS: usize = 5;

/// A CA and a server certificate signed by it, as PEM files in `dir`.
pub struct Certificates {
    /// DER of the CA certificate, for a client's root store.
    pub ca_der: Vec<u8>,
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

impl Certificates {
    /// Generates them into `dir`.
    pub fn generate(dir: &Path) -> Certificates {
        let mut ca_params = CertificateParams::new(Vec::new()).expect("support: CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "delayqueue test CA");
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate().expect("support: CA key");
        let ca = ca_params.self_signed(&ca_key).expect("support: CA certificate");

        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("support: server params");
        params.distinguished_name.push(DnType::CommonName, "localhost");
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate().expect("support: server key");
        let cert = params
            .signed_by(&key, &ca, &ca_key)
            .expect("support: server certificate");

        let write = |name: &str, pem: String| {
            let path = dir.join(name);
            fs::write(&path, pem).unwrap_or_else(|e| panic!("support: write {}: {e}", path.display()));
            path
        };
        Certificates {
            ca_der: ca.der().to_vec(),
            ca_file: write("ca.pem", ca.pem()),
            cert_file: write("server.pem", cert.pem()),
            key_file: write("server.key", key.serialize_pem()),
        }
    }
}

/// Why [`TlsRedisServer::start`] started nothing: the server
/// binary has no TLS. Its text names the binary and quotes its log.
#[derive(Debug)]
pub struct NoTls(pub String);

impl std::fmt::Display for NoTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How one launch attempt ended.
enum Launch {
    Ready,
    /// Exited before it was ready, most likely because the port was taken.
    Exited,
    /// Exited saying it has no TLS support: this log line.
    NoTls(String),
}

/// A `redis-server` that only speaks TLS; see the module docs.
pub struct TlsRedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    certs: Certificates,
}

impl TlsRedisServer {
    /// Generates certificates and starts the server, with `extra_args`
    /// appended to its command line; or, when the server binary was built
    /// without TLS on a run that allows it (a Valkey pass, see
    /// [`ServerKind`](super::ServerKind)), says why not. On Redis a server
    /// without TLS panics: Debian's redis-server has it.
    pub async fn start(extra_args: &[&str]) -> Result<TlsRedisServer, NoTls> {
        let dir = unique_temp_dir();
        let certs = Certificates::generate(&dir);
        let mut server = TlsRedisServer {
            child: None,
            port: 0,
            dir,
            certs,
        };
        for _ in 0..START_ATTEMPTS {
            server.port = free_port();
            server.child = Some(server.spawn(extra_args));
            match server.wait_ready().await {
                Launch::Ready => return Ok(server),
                Launch::NoTls(log) if super::server_kind() == super::ServerKind::Valkey => {
                    return Err(NoTls(format!(
                        "{} has no TLS (built without it): {log}",
                        super::server_bin().display()
                    )))
                }
                Launch::NoTls(log) => panic!(
                    "support: {} has no TLS, and this run is on Redis, where TLS is tested \
                     (Debian's redis-server has it; set DELAYQUEUE_TEST_SERVER=valkey for a \
                     Valkey without TLS, as scripts/test.sh --server valkey does): {log}",
                    super::server_bin().display()
                ),
                Launch::Exited => {}
            }
        }
        panic!(
            "support: TLS redis-server exited early on {START_ATTEMPTS} attempts: {}",
            server.log_tail()
        );
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `rediss://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    pub fn certificates(&self) -> &Certificates {
        &self.certs
    }

    fn spawn(&self, extra_args: &[&str]) -> Child {
        let bin = super::server_bin();
        let path = |p: &Path| p.to_str().expect("support: path is not UTF-8").to_string();
        let mut args: Vec<String> = vec![
            "--port".into(),
            "0".into(),
            "--tls-port".into(),
            self.port.to_string(),
            "--tls-cert-file".into(),
            path(&self.certs.cert_file),
            "--tls-key-file".into(),
            path(&self.certs.key_file),
            "--tls-ca-cert-file".into(),
            path(&self.certs.ca_file),
            "--tls-auth-clients".into(),
            "no".into(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--dir".into(),
            path(&self.dir),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--logfile".into(),
            path(&self.dir.join("redis.log")),
        ];
        args.extend(extra_args.iter().map(|a| a.to_string()));
        Command::new(&bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("support: cannot spawn {}: {e}", bin.display()))
    }

    /// Until the log says it is ready, or the process exits: most likely
    /// because the port was taken, or because the binary has no TLS.
    async fn wait_ready(&mut self) -> Launch {
        let deadline = Instant::now() + READY_TIMEOUT;
        let log = self.dir.join("redis.log");
        loop {
            let child = self.child.as_mut().expect("support: TLS server child");
            if child.try_wait().expect("support: try_wait on redis-server").is_some() {
                self.child = None;
                let text = fs::read_to_string(&log).unwrap_or_default();
                let _ = fs::remove_file(&log);
                // Redis and Valkey built without TLS both log "Failed finding TLS support".
                return match text.lines().find(|l| l.contains("TLS support")) {
                    Some(line) => Launch::NoTls(line.to_string()),
                    None => Launch::Exited,
                };
            }
            if fs::read_to_string(&log).is_ok_and(|l| l.contains("Ready to accept connections")) {
                return Launch::Ready;
            }
            assert!(
                Instant::now() < deadline,
                "support: TLS redis-server not ready within {READY_TIMEOUT:?}: {}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for TlsRedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}
