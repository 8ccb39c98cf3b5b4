//! TLS: the queue over `rediss://` (fred's rustls backend, our `tls`
//! feature) against a `redis-server --port 0 --tls-port ...` whose
//! certificates the test generates (`tests/support/tls.rs`).
//!
//! The TLS test is compiled only with the `tls` feature (`scripts/test.sh`
//! turns it on); without it, `connect()` must refuse a `rediss://` url. On
//! `scripts/test.sh --server valkey` it skips, saying so, when that Valkey
//! was built without TLS (PyPI's are); on Redis it never skips.

mod helpers;
use delayqueue_test_support as support;

#[cfg(feature = "tls")]
mod with_tls {
    use std::time::{Duration, Instant};

    use delayqueue::fred::prelude::{Builder, ClientLike, Config};
    use delayqueue::fred::rustls::pki_types::CertificateDer;
    use delayqueue::fred::rustls::{ClientConfig, RootCertStore};
    use delayqueue::fred::types::config::TlsConnector;
    use delayqueue::{Counts, DelayQueue, NewMessage};

    use super::helpers::{acking, wait_stats, Log};
    use super::support::tls::TlsRedisServer;
    use super::support::{client_with, wait_until, WAIT};

    /// A client that trusts only the system's roots does not get in; one
    /// whose rustls config trusts the test CA runs a queue (sends, a batch,
    /// consumption woken by pub/sub over TLS, stats, the integrity check);
    /// and `delayqueue::connect` works once the CA is in `SSL_CERT_FILE`.
    #[tokio::test]
    async fn a_queue_runs_over_tls_with_a_private_ca() {
        let server = match TlsRedisServer::start(&[]).await {
            Ok(server) => server,
            Err(no_tls) => {
                // Only on a Valkey pass: the Redis pass runs this test.
                super::support::skip("a_queue_runs_over_tls_with_a_private_ca", &no_tls.to_string());
                return;
            }
        };
        let url = server.url();

        // The system roots do not include the test CA.
        let refused = match Config::from_url(&url) {
            Ok(config) => {
                let client = Builder::from_config(config).build().unwrap();
                let result = tokio::time::timeout(WAIT, client.init()).await;
                let _ = client.quit().await;
                match result {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some(format!("no connection within {WAIT:?}")),
                }
            }
            Err(e) => Some(format!("no system roots: {e}")),
        };
        let refused = refused.expect("a client without the test CA connected");
        println!("without the test CA: {refused}");

        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from(server.certificates().ca_der.clone()))
            .unwrap();
        let tls = ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut config = Config::from_url(&url).unwrap();
        config.tls = Some(TlsConnector::from(tls).into());
        let client = client_with(config, &url).await;

        // Far longer than the test waits: only wake-ups bring messages in time.
        let q = DelayQueue::builder("tls", client.clone())
            .concurrency(4)
            .fetch_interval(Duration::from_secs(600))
            .build()
            .unwrap();
        let log = Log::default();
        let consumer = q.start_consume(acking(&log)).await.unwrap();
        let mut ids = q
            .send_batch((0..100).map(|i| NewMessage::new(format!("b{i}")).delay(Duration::from_millis(i * 3))))
            .await
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect::<Vec<_>>();
        assert!(wait_until(WAIT, || log.len() >= 100).await);
        // Idle consumer: woken by a wake-up, and not early. (How soon after
        // its due time is not a pass condition.)
        let sent_at = Instant::now();
        ids.push(q.send("timed").delay(Duration::from_millis(300)).await.unwrap());
        assert!(wait_until(WAIT, || log.len() >= 101).await);
        let lateness = log.snapshot().last().unwrap().2 - sent_at;
        assert!(lateness >= Duration::from_millis(295), "{lateness:?}");
        let counts = log.counts();
        assert!(ids.iter().all(|id| counts.get(id) == Some(&1)));
        assert_eq!(wait_stats(&q, WAIT, Counts::default()).await, Counts::default());
        assert!(q.check_integrity().await.unwrap().is_clean());
        consumer.shutdown().await.unwrap();

        // The crate's connect(): fred loads the system roots with
        // rustls-native-certs, which reads SSL_CERT_FILE. Set only here, in
        // the one test of this binary that reads it.
        std::env::set_var("SSL_CERT_FILE", &server.certificates().ca_file);
        let client = delayqueue::connect(&url).await.unwrap();
        let q = DelayQueue::builder("tls2", client).build().unwrap();
        let log = Log::default();
        let consumer = q.start_consume(acking(&log)).await.unwrap();
        let id = q.send("via connect").await.unwrap();
        assert!(wait_until(WAIT, || log.len() == 1).await);
        assert_eq!(log.snapshot()[0].0, id);
        consumer.shutdown().await.unwrap();
    }
}

/// Without the `tls` feature fred has no TLS backend and would talk plain
/// text to a TLS port: `connect()` says what is missing instead.
#[cfg(not(feature = "tls"))]
#[tokio::test]
async fn rediss_without_the_tls_feature_is_refused() {
    for url in [
        "rediss://127.0.0.1:1",
        "REDISS-cluster://127.0.0.1:1",
        "valkeys://127.0.0.1:1",
    ] {
        let err = delayqueue::connect(url).await.unwrap_err();
        assert!(
            matches!(&err, delayqueue::Error::InvalidArgument(m) if m.contains("tls")),
            "{url}: {err:?}"
        );
    }
}
