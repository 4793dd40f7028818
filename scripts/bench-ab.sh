#!/usr/bin/env bash
# Before/after: two builds of examples/bench (BASE and NEW, e.g. built in a
# `git worktree` of the base commit and in this checkout) on the same 5
# servers (pinned to CPU 1), alternating run by run (pinned to CPU 0), RUNS
# runs each; prints both builds' medians with their spread.
#
#   scripts/bench-ab.sh BASE_BENCH NEW_BENCH [RUNS] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
[ $# -ge 2 ] || { echo "usage: $0 BASE_BENCH NEW_BENCH [RUNS] [OUT_DIR]" >&2; exit 2; }
base=$1 new=$2 runs=${3:-3} out=${4:-bench-ab}
ensure_redis_server
redis_setup
mkdir -p "$out"
urls=()
for _ in 1 2 3 4 5; do
    urls+=("$(redis_start_on 1)")
done
echo "== nodes ${urls[*]}"
for run in $(seq "$runs"); do
    if [ $((run % 2)) -eq 1 ]; then order="base new"; else order="new base"; fi
    for which in $order; do
        bin=$base
        [ "$which" = new ] && bin=$new
        BENCH_REDIS_DIR="$REDIS_TMP" taskset -c 0 "$bin" --layout split \
            --json "$out/$which-$run.jsonl" "${urls[@]}" >"$out/$which-$run.txt"
        echo "== $which, run $run"
        grep -E '^throughput ' "$out/$which-$run.txt" | head -3 || true
    done
done
for which in base new; do
    echo "== $which: medians of $runs runs"
    "$new" --summarize --json "$out/$which.jsonl" "$out/$which"-*.jsonl |
        grep -E '^(workload|latency |throughput )'
done
