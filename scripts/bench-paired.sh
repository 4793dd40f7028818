#!/usr/bin/env bash
# Before/after in time, paired: two builds of examples/bench (BASE and NEW)
# run the uncontended throughput workload (`--profile N quorlock SECS`: 64
# tasks, lock and unlock, one client) one right after the other on the same
# 5 servers (CPU 1; the client on CPU 0), the order swapped each round, at
# N = 1, 3, 5. Prints each pair's NEW / BASE and the median ratio per N:
# pairs taken minutes apart on a shared machine differ by 7-16 %, pairs
# taken seconds apart much less.
#
#   scripts/bench-paired.sh BASE_BENCH NEW_BENCH [ROUNDS] [SECS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
[ $# -ge 2 ] || { echo "usage: $0 BASE_BENCH NEW_BENCH [ROUNDS] [SECS]" >&2; exit 2; }
base=$1 new=$2 rounds=${3:-4} secs=${4:-5}
ensure_redis_server
redis_setup
urls=()
for _ in 1 2 3 4 5; do urls+=("$(redis_start_on 1)"); done
out=$(mktemp)

# Cycles per second of BIN with N nodes.
rate() {
    taskset -c 0 "$1" --profile "$2" quorlock "$secs" "${urls[@]}" |
        awk '/^throughput/ {print $4; exit}'
}

for round in $(seq "$rounds"); do
    for n in 1 3 5; do
        if [ $((round % 2)) -eq 1 ]; then
            b=$(rate "$base" "$n"); w=$(rate "$new" "$n")
        else
            w=$(rate "$new" "$n"); b=$(rate "$base" "$n")
        fi
        echo "round $round, N = $n: base $b, new $w cycles/s"
        echo "$n $b $w" >> "$out"
    done
done
python3 - "$out" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print("== new / base, median of the pairs (cycles per second)")
for n in dict.fromkeys(r[0] for r in rows):
    ratios = [float(w) / float(b) for m, b, w in rows if m == n]
    base = statistics.median(float(b) for m, b, _ in rows if m == n)
    new = statistics.median(float(w) for m, _, w in rows if m == n)
    print(f"N = {n}: {statistics.median(ratios):.3f} (pairs: "
          f"{', '.join(f'{r:.3f}' for r in ratios)}); medians base {base:.0f}, new {new:.0f}")
PY
rm -f "$out"
