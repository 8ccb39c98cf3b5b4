#!/usr/bin/env bash
# Runs the order-timeout demo (examples/demo.rs).
# Uses REDIS_URL when set, else a Redis on 127.0.0.1:6379 when one answers,
# else starts a throwaway redis-server on a free port and removes it after.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if [ -z "${REDIS_URL:-}" ]; then
    if port_open 6379; then
        export REDIS_URL="redis://127.0.0.1:6379"
    else
        port=16379
        while port_open "$port"; do port=$((port + 1)); done
        dir=$(mktemp -d)
        "${REDIS_SERVER_BIN:-redis-server}" --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" \
            --appendonly no --daemonize no >"$dir/redis.log" 2>&1 &
        pid=$!
        trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
        for _ in $(seq 100); do port_open "$port" && break; sleep 0.05; done
        export REDIS_URL="redis://127.0.0.1:$port"
        echo "started a throwaway redis-server at $REDIS_URL"
    fi
fi
cargo run --release --quiet --example demo
