#!/usr/bin/env bash
# Side by side with bullmq-rs 2.2 (the Rust port of BullMQ, its newest
# release in the registry) on one awaited send at a time and a backlog of
# 50,000 consumed at concurrency 16 (scripts/bullmq-rs: one binary, both
# sides): sides alternate A B B A, each run on a fresh redis-server; every
# JSON line is printed with the load average before its run.
#   scripts/bullmq-rs-bench.sh [rounds, default 1]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-1}
PORT=${PEERS_PORT:-6492}
TARGET=${CARGO_TARGET_DIR:-$PWD/target}/bullmq-rs
cargo build --release --manifest-path scripts/bullmq-rs/Cargo.toml --target-dir "$TARGET" >&2
BIN=$TARGET/release/bullmq-rs-side
fresh() {
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 || break; sleep 0.1; done
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes >/dev/null
  for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
}
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true' EXIT
for _ in $(seq "$ROUNDS"); do
  for workload in send consume; do
    for side in delayqueue bullmq-rs bullmq-rs delayqueue; do
      fresh
      echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
      REDIS_URL="redis://127.0.0.1:$PORT" "$BIN" "$workload" "$side"
    done
  done
done
