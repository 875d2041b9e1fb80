#!/bin/sh
# A year of simulated time under a business-hours cron budget (examples/budget-year): prints the machine's load,
# the wall time and peak memory of the run, and its summary line. Target: well under 5 s.
# Usage: tools/budget_year.sh [path/to/karpenter-controller]  (default: a fresh release build)
set -eu
cd "$(dirname "$0")/.."
bin="${1:-}"
if [ -z "$bin" ]; then
    cargo build --quiet --release -p karpenter-controller
    bin=target/release/karpenter-controller
fi
uptime
/usr/bin/time -f "wall %e s, user %U s, max RSS %M KB" "$bin" simulate examples/budget-year/cluster.yaml \
    --timeline examples/budget-year/timeline.yaml | grep -E '^(Simulated time|Summary|Cost):'
