#!/usr/bin/env bash
# The benchmark: quorlock vs rslock vs the round-trip floor, on 5 throw-away
# redis-servers, in one run (about 2 minutes). With 2 or more cores the
# servers run on CPU 1 and the benchmark on CPU 0 (taskset). Then contention
# across processes (examples/contention.rs, its own servers, not pinned):
# P worker processes x T tasks on one resource, quorlock beside rslock,
# medians of 3 runs of 5 s (about 4 more minutes); --quick: one 2 s run of
# 4 x 4 each; --no-contention skips it.
# Usage: scripts/bench.sh [--quick] [--no-contention] [--json PATH]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh

ensure_redis_server
redis_setup

echo "== building the benchmark (release)"
bench=$(example_binary bench)
contention=$(example_binary contention)
quick=false contended=true args=()
for arg in "$@"; do
    case "$arg" in
        --quick) quick=true args+=("$arg") ;;
        --no-contention) contended=false ;;
        *) args+=("$arg") ;;
    esac
done
pin_servers=() pin_bench=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    pin_servers=(taskset -c 1) pin_bench=(taskset -c 0)
    echo "== servers pinned to CPU 1, the benchmark to CPU 0"
fi
urls=()
for _ in 1 2 3 4 5; do urls+=("$("${pin_servers[@]}" bash -c 'source scripts/redis.sh; REDIS_TMP="$1"; redis_start' _ "$REDIS_TMP")"); done
echo "== nodes: ${urls[*]}"
BENCH_REDIS_DIR="$REDIS_TMP" "${pin_bench[@]}" "$bench" "${args[@]}" "${urls[@]}"

$contended || exit 0
echo "== contention across processes"
if $quick; then
    for kind in quorlock rslock; do "$contention" 4 4 2 "$kind" | tail -1; done
else
    for setup in "4 4" "4 1" "8 8" "1 2+1"; do
        for kind in quorlock rslock; do
            # shellcheck disable=SC2086 # $setup is two arguments
            "$contention" --runs 3 $setup 5 "$kind" | tail -1
        done
    done
fi
