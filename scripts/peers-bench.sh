#!/usr/bin/env bash
# Side by side with BullMQ 6.7 on the feature workloads (examples/peers.rs
# and ../shared/bench/bullmq-wave3/wave3.js, the same counts and payloads):
# sides alternate A B B A, each on a fresh redis-server; every JSON line is
# printed with the load average before its run.
#   scripts/peers-bench.sh [workloads, default w5big,w5small,w6,w6race,w7]
# Needs node/npm and a copy of the BullMQ side in $BULLMQ_DIR
# (default /tmp/bullmq-wave3, copied from ../shared/bench/bullmq-wave3).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-w5big,w5small,w6,w6race,w7}
PORT=${PEERS_PORT:-6491}
BULLMQ_DIR=${BULLMQ_DIR:-/tmp/bullmq-wave3}
if [ ! -d "$BULLMQ_DIR/node_modules" ]; then
  mkdir -p "$BULLMQ_DIR" && cp -r ../shared/bench/bullmq-wave3/. "$BULLMQ_DIR"
  (cd "$BULLMQ_DIR" && (npm ci || npm install)) >&2
fi
cargo build --release --example peers >&2
OURS=${CARGO_TARGET_DIR:-target}/release/examples/peers
fresh() {
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 || break; sleep 0.1; done
  redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes >/dev/null
  for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
}
side() {
  fresh
  echo "# $1, load $(cut -d' ' -f1-3 /proc/loadavg)"
  case $1 in
    bullmq) (cd "$BULLMQ_DIR" && node wave3.js --port "$PORT" --runs "$RUNS" 2>/dev/null) ;;
    delayqueue) REDIS_URL="redis://127.0.0.1:$PORT" "$OURS" --runs "$RUNS" ;;
  esac
}
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true' EXIT
for s in bullmq delayqueue delayqueue bullmq; do side "$s"; done
