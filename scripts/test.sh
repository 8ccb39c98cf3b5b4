#!/usr/bin/env bash
# Runs the whole test suite: unit, per-script, end-to-end and doc tests.
# Each test starts its own redis-server on a free loopback port and kills it
# afterwards, so nothing else needs to run and no shared server is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh
cargo test "$@"
