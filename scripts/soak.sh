#!/usr/bin/env bash
# Long fault soak (tests/faults_process.rs, test `soak`): producers and
# worker processes run for SOAK_SECS seconds (default 120) while workers are
# SIGKILLed, scripts flushed and Redis crash-restarted at random; then it
# prints what was sent, the faults by kind, lost (must be 0) and duplicates.
# FAULT_SEED=<n> replays a run's random choices. Extra args go to the test binary.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ensure-redis.sh
export SOAK_SECS="${SOAK_SECS:-120}"
cargo test --release --test faults_process -- --ignored --exact soak --nocapture "$@"
