#!/usr/bin/env bash
# The control for w4's growth round (docs/performance.md, "Scale"): plain
# SETs of new keys, no delayqueue involved, into an empty database and into
# one holding 1,000,000 keys, 150,000 per round (as many keys as a round of
# w1 adds). The first rounds on the full database take it past 2^20 keys,
# and Redis doubles its keyspace table while they run. Uses a throwaway
# redis-server on a free loopback port, pinned to CPU 0 (redis-benchmark
# to CPU 1) when the machine has two.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh

port=17400
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
# "taskset -c N" when there are two CPUs to pin to (taskset execs its
# command, so $! below is the server's own pid).
pin() { if [ "$(nproc)" -ge 2 ]; then echo "taskset -c $1"; fi; }
dir=$(mktemp -d)
$(pin 0) redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no \
    --enable-debug-command local >"$dir/log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 50); do cli ping >/dev/null 2>&1 && break; sleep 0.1; done

# SETs per second of 150,000 new random keys into database $1.
sets() {
    $(pin 1) redis-benchmark -p "$port" --dbnum "$1" -t set -n 150000 -r 1000000000 -c 16 -P 16 --csv |
        tail -1 | cut -d, -f2 | tr -d '"' | cut -d. -f1
}
empty() { echo "empty:  $(sets 1) SET/s"; cli -n 1 flushdb >/dev/null; sleep 2; }

empty
empty
cli debug populate 1000000 >/dev/null
sleep 5
for round in 1 2 3 4; do
    echo "loaded: $(sets 0) SET/s (keys before: $(( 1000000 + (round - 1) * 150000 )))"
    sleep 2
    empty
done
