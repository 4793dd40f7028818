#!/usr/bin/env bash
# The benchmark: quorlock vs rslock vs the round-trip floor on 5 throw-away
# redis-servers, 3 runs in each of two layouts, then the medians of the runs
# with their spreads (`bench --summarize`); a single run here varies by 7-16 %.
#   split: the servers on CPU 1, the benchmark on CPU 0 (the client's CPU
#          per lock decides throughput until the servers' core is full);
#   same:  servers and benchmark on CPU 0 (throughput is the total CPU per
#          lock, client and servers).
# Each run takes about 3 minutes. Then contention across processes
# (examples/contention.rs, its own servers, not pinned): P worker processes x T
# tasks on one resource, quorlock beside rslock, medians of 3 runs of 5 s
# (about 4 more minutes).
# --quick: one short run per layout and one 2 s contention run of 4 x 4 each;
# --runs N: N runs per layout; --no-contention skips the contention part.
# Then examples/plots.rs draws the figures (SVG) into --figures DIR: by
# default docs/figures (docs/benchmarks.md's) after a full run, a scratch directory
# after --quick.
# Usage: scripts/bench.sh [--quick] [--runs N] [--no-contention] [--json PATH] [--figures DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh

ensure_redis_server
redis_setup
# Each layout's servers live in a directory of their own under $REDIS_TMP.
stop_layout() { [ -d "$1" ] && (REDIS_TMP="$1"; redis_stop_all); return 0; }
stop_everything() {
    local dir
    for dir in "$REDIS_TMP"/layout-*; do stop_layout "$dir"; done
    redis_stop_all
}
trap stop_everything EXIT

echo "== building the benchmark (release)"
bench=$(example_binary bench)
contention=$(example_binary contention)
plots=$(example_binary plots)
quick=false contended=true args=() runs=3 json=bench.jsonl figures=
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick=true runs=1 args+=("$1") ;;
        --no-contention) contended=false ;;
        --runs) runs=$2; shift ;;
        --json) json=$2; shift ;;
        --figures) figures=$2; shift ;;
        *) args+=("$1") ;;
    esac
    shift
done
layouts=(split same)
if [ "$(nproc)" -lt 2 ] || ! command -v taskset >/dev/null 2>&1; then
    echo "== one CPU (or no taskset): one unpinned layout"
    layouts=(unpinned)
fi
results="$REDIS_TMP/results"
mkdir -p "$results"
for layout in "${layouts[@]}"; do
    case "$layout" in
        split) pin_servers=(taskset -c 1) pin_bench=(taskset -c 0) ;;
        same) pin_servers=(taskset -c 0) pin_bench=(taskset -c 0) ;;
        *) pin_servers=() pin_bench=() ;;
    esac
    dir="$REDIS_TMP/layout-$layout"
    mkdir -p "$dir"
    urls=()
    for _ in 1 2 3 4 5; do
        urls+=("$("${pin_servers[@]}" bash -c 'source scripts/redis.sh; REDIS_TMP="$1"; redis_start' _ "$dir")")
    done
    echo "== layout $layout: nodes ${urls[*]}"
    for run in $(seq "$runs"); do
        echo "== layout $layout, run $run of $runs"
        BENCH_REDIS_DIR="$dir" "${pin_bench[@]}" "$bench" "${args[@]}" \
            --layout "$layout" --json "$results/$layout-$run.jsonl" "${urls[@]}" >"$results/$layout-$run.txt"
        tail -n +2 "$results/$layout-$run.txt" | grep -E '^throughput ' || true
    done
    # This layout's servers go before the next layout's start.
    stop_layout "$dir"
done
"$bench" --summarize --json "$json" "$results"/*.jsonl
echo "(medians as JSON lines in $json)"
# The figures: docs/benchmarks.md's (docs/figures) from a full run, a scratch
# directory's from a quick one (so that the drawing cannot rot).
if [ -z "$figures" ]; then
    if $quick; then figures="$results/figures"; else figures=docs/figures; fi
fi
machine="$(nproc) CPUs, $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
"$plots" "$figures" --bench "$json" --title "$machine"

$contended || exit 0
echo "== contention across processes"
if $quick; then
    for kind in quorlock rslock; do
        "$contention" --data "$results/contention-$kind.dat" 4 4 2 "$kind" | tail -1
    done
else
    for setup in "4 4" "4 1" "8 8" "1 2+1"; do
        for kind in quorlock rslock; do
            data=()
            [ "$setup" = "4 4" ] && data=(--data "$results/contention-$kind.dat")
            # shellcheck disable=SC2086 # $setup is two arguments
            "$contention" "${data[@]}" --runs 3 $setup 5 "$kind" | tail -1
        done
    done
fi
"$plots" "$figures" --contention "$results/contention-quorlock.dat" "$results/contention-rslock.dat" --title "$machine"
