//! What a release needs, checked: the declared `rust-version` (MSRV) is at
//! least every dependency's, and the crate, the Python and the Node
//! producer and CHANGELOG.md's newest release name one version.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The platforms whose dependencies count: Linux, Windows and macOS. Only
/// the dependencies of a real target's `cfg`s, so those behind a `cfg` no
/// build sets (loom's `cfg(loom)`) are left out.
const PLATFORMS: &[&str] = &[
    "x86_64-unknown-linux-gnu",
    "x86_64-pc-windows-msvc",
    "aarch64-apple-darwin",
];

/// `1.90` or `1.90.0` as numbers, for comparing.
fn rust_version(v: &str) -> Vec<u64> {
    let mut parts: Vec<u64> = v
        .split('.')
        .map(|p| p.parse().expect("a rust-version is numbers"))
        .collect();
    parts.resize(3, 0);
    parts
}

/// `cargo metadata` of the workspace with every feature, for `PLATFORMS`.
fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["metadata", "--format-version", "1", "--all-features", "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"));
    for p in PLATFORMS {
        cmd.args(["--filter-platform", p]);
    }
    let out = cmd.output().expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// Every workspace member's declared `rust-version` is at least that of
/// each package it builds: its normal and build dependencies with every
/// feature on, followed all the way down, and its own dev-dependencies
/// (the test suite builds with the declared version too). The declared
/// version is chosen as the highest of these (README, "Minimum Rust version").
#[test]
fn declared_rust_version_is_at_least_every_dependencys() {
    let meta = metadata();
    let packages = meta["packages"].as_array().unwrap();
    let package = |id: &str| packages.iter().find(|p| p["id"] == id).unwrap();
    let nodes = meta["resolve"]["nodes"].as_array().unwrap();
    let node = |id: &str| nodes.iter().find(|n| n["id"] == id).unwrap();
    let mut above = Vec::new();
    for member in meta["workspace_members"].as_array().unwrap() {
        let member = member.as_str().unwrap();
        let declared = package(member)["rust_version"]
            .as_str()
            .expect("every member declares a rust-version");
        let (mut seen, mut todo) = (vec![member.to_string()], vec![member.to_string()]);
        while let Some(id) = todo.pop() {
            for dep in node(&id)["deps"].as_array().unwrap() {
                let dev_only = dep["dep_kinds"].as_array().unwrap().iter().all(|k| k["kind"] == "dev");
                let to = dep["pkg"].as_str().unwrap();
                if (dev_only && id != member) || seen.iter().any(|s| s == to) {
                    continue;
                }
                seen.push(to.to_string());
                todo.push(to.to_string());
                let p = package(to);
                if let Some(v) = p["rust_version"].as_str() {
                    if rust_version(v) > rust_version(declared) {
                        above.push(format!(
                            "{} declares {declared}, but {} {} needs {v}",
                            package(member)["name"].as_str().unwrap(),
                            p["name"].as_str().unwrap(),
                            p["version"].as_str().unwrap()
                        ));
                    }
                }
            }
        }
    }
    above.sort();
    assert!(above.is_empty(), "rust-version too low:\n{}", above.join("\n"));
}

/// The text of a file of the repository.
fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The crate's version is the Python package's, the Node package's (and
/// its lock file's), and that of CHANGELOG.md's newest release: its first
/// `## [x.y.z]` heading (an `## [Unreleased]` above it collects what comes
/// after that release).
#[test]
fn crate_producers_and_changelog_name_one_version() {
    let version = env!("CARGO_PKG_VERSION");
    let python = read("producers/python/pyproject.toml")
        .lines()
        .find_map(|l| l.strip_prefix("version = "))
        .map(|v| v.trim_matches('"').to_string());
    let node: Value = serde_json::from_str(&read("producers/node/package.json")).unwrap();
    let lock: Value = serde_json::from_str(&read("producers/node/package-lock.json")).unwrap();
    let release = read("CHANGELOG.md")
        .lines()
        .filter_map(|l| l.strip_prefix("## ["))
        .filter_map(|l| l.split_once(']').map(|(v, _)| v.to_string()))
        .find(|v| v != "Unreleased");
    let found = [
        ("producers/python/pyproject.toml", python),
        (
            "producers/node/package.json",
            node["version"].as_str().map(String::from),
        ),
        (
            "producers/node/package-lock.json",
            lock["version"].as_str().map(String::from),
        ),
        (
            "producers/node/package-lock.json (its own entry)",
            lock["packages"][""]["version"].as_str().map(String::from),
        ),
        ("CHANGELOG.md's newest release heading", release),
    ];
    let differ: Vec<String> = found
        .iter()
        .filter(|(_, v)| v.as_deref() != Some(version))
        .map(|(what, v)| format!("{what}: {}", v.as_deref().unwrap_or("none")))
        .collect();
    assert!(differ.is_empty(), "the crate is {version}, but\n{}", differ.join("\n"));
}
