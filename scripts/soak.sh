#!/usr/bin/env bash
# Long soaks.
#
# scripts/soak.sh [args]: the fault soak (tests/faults_process.rs, test
# `soak`): producers and worker processes run for SOAK_SECS seconds (default
# 120) while workers are SIGKILLed, scripts flushed and Redis crash-restarted
# at random; then it prints what was sent, the faults by kind, lost (must be
# 0) and duplicates. FAULT_SEED=<n> replays a run's random choices. Extra
# args go to the test binary.
#
# scripts/soak.sh history: the history checker (tests/history.rs) again and
# again, each run with a fresh seed, for SOAK_SECS seconds in all (default
# 600) and at most SOAK_RUNS runs (default 1000); stops at the first failing
# run and prints its seed and its output. Each run lasts HISTORY_SECS
# (default 45); the HISTORY_* knobs (faults, handlers, features, ...; see
# tests/history.rs and docs/reliability.md) pass through, e.g.
#   HISTORY_FAULTS=pause HISTORY_HANDLERS=ok,slow HISTORY_RENEW=on scripts/soak.sh history
#   HISTORY_FEATURES=schedules HISTORY_FAULTS=slow scripts/soak.sh history
# SOAK_PROFILE picks the cargo profile of the history runs (default release).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh

if [[ "${1:-}" != history ]]; then
    export SOAK_SECS="${SOAK_SECS:-120}"
    exec cargo test --release --test faults_process -- --ignored --exact soak --nocapture "$@"
fi

shift
secs="${SOAK_SECS:-600}"
runs="${SOAK_RUNS:-1000}"
cargo=(cargo test --profile "${SOAK_PROFILE:-release}" --features cli,tls --test history)
"${cargo[@]}" --no-run
log="$(mktemp -t history-soak.XXXXXX)"
trap 'rm -f "$log"' EXIT
end=$((SECONDS + secs))
for ((run = 1; run <= runs && SECONDS < end; run++)); do
    seed="$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')"
    if HISTORY_SEED="$seed" "${cargo[@]}" -- --nocapture "$@" >"$log" 2>&1; then
        echo "run $run: seed $seed ok ($(grep -o 'sends=.*' "$log" | head -1))"
    else
        cat "$log"
        echo "run $run FAILED: replay with HISTORY_SEED=$seed (and the same HISTORY_* knobs)"
        exit 1
    fi
done
echo "history soak: $((run - 1)) runs, no failure"
