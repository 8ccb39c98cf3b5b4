#!/usr/bin/env bash
# Throughput of 1, 3 and 6 queues on one throwaway redis-server and on a
# throwaway 3-primary Redis Cluster (examples/cluster_bench.rs; figures in
# docs/scaling.md). Everything runs on loopback ports it finds free and is
# removed afterwards. Options are passed to the example, e.g. --n 60000.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh

server="${REDIS_SERVER_BIN:-redis-server}"
cli="${REDIS_CLI_BIN:-redis-cli}"
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# Sets $port to a free port whose cluster bus port (+10000) is free too.
next_port=17100
free_port() {
    while port_open "$next_port" || port_open $((next_port + 10000)); do next_port=$((next_port + 1)); done
    port=$next_port
    next_port=$((next_port + 1))
}

dir=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT

start() { # start <port> <extra args...>
    local port=$1
    shift
    mkdir -p "$dir/$port"
    "$server" --port "$port" --bind 127.0.0.1 --dir "$dir/$port" --save "" --appendonly no \
        --daemonize no --logfile "$dir/$port/redis.log" "$@" &
    pids+=($!)
    for _ in $(seq 200); do port_open "$port" && return 0; sleep 0.05; done
    echo "redis-server on port $port did not start" >&2
    return 1
}

cargo build --release --quiet --example cluster_bench
bench="${CARGO_TARGET_DIR:-target}/release/examples/cluster_bench"

free_port
single=$port
start "$single"
echo "standalone redis-server on port $single" >&2
REDIS_URL="redis://127.0.0.1:$single" "$bench" "$@"
kill "${pids[0]}"

nodes=()
for _ in 1 2 3; do
    free_port
    start "$port" --cluster-enabled yes --cluster-config-file nodes.conf
    nodes+=("127.0.0.1:$port")
done
"$cli" --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$dir/create.log"
for _ in $(seq 200); do
    ok=1
    for node in "${nodes[@]}"; do
        "$cli" -p "${node#*:}" CLUSTER INFO | grep -q cluster_state:ok || ok=0
    done
    [ "$ok" = 1 ] && break
    sleep 0.1
done
echo "3-primary cluster on ${nodes[*]}" >&2
url="redis-cluster://${nodes[0]}?node=${nodes[1]}&node=${nodes[2]}"
REDIS_URL="$url" "$bench" "$@"
