#!/usr/bin/env bash
# Before/after in time, paired: two builds of examples/bench (BASE and NEW)
# run the uncontended throughput workload (`--profile N quorlock SECS`: 64
# tasks, lock and unlock, one client) one right after the other on the same
# 5 servers (CPU 1; the client on CPU 0), the order swapped each round, at
# N = 1, 3, 5. Prints each pair's NEW / BASE and the median ratio per N:
# pairs taken minutes apart on a shared machine differ by 7-16 %, pairs
# taken seconds apart much less. With /usr/bin/time (Debian's `time`
# package) it also prints where the client's time went, per cycle and
# median per N: user and system CPU, and its voluntary context switches
# (its worker parked with nothing to run): a client that does less work
# per cycle but parks more often is not faster.
#
#   scripts/bench-paired.sh BASE_BENCH NEW_BENCH [ROUNDS] [SECS]
#
# NODES="1" (or "3 5", ...) times only those N, each round; with many short
# rounds (NODES=1 ... 16 2) the pairs are seconds apart, which on a noisy
# host is what keeps a pair's two runs in the same weather.
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

times=$(mktemp)
# Cycles per second of BIN with N nodes, then (with /usr/bin/time) the
# client's user and system µs and voluntary context switches per cycle.
rate() {
    local cycles
    if [ -x /usr/bin/time ]; then
        cycles=$(/usr/bin/time -f "%U %S %w" -o "$times" taskset -c 0 "$1" --profile "$2" \
            quorlock "$secs" "${urls[@]}" | awk '/^throughput/ {print $4; exit}')
        awk -v r="$cycles" -v s="$secs" 'END {n = r * s;
            printf "%s %.3f %.3f %.4f\n", r, 1e6 * $1 / n, 1e6 * $2 / n, $3 / n}' "$times"
    else
        taskset -c 0 "$1" --profile "$2" quorlock "$secs" "${urls[@]}" |
            awk '/^throughput/ {print $4; exit}'
    fi
}

for round in $(seq "$rounds"); do
    for n in ${NODES:-1 3 5}; do
        if [ $((round % 2)) -eq 1 ]; then
            b=$(rate "$base" "$n"); w=$(rate "$new" "$n")
        else
            w=$(rate "$new" "$n"); b=$(rate "$base" "$n")
        fi
        echo "round $round, N = $n: base ${b%% *}, new ${w%% *} cycles/s"
        echo "$n $b | $w" >> "$out"
    done
done
python3 - "$out" <<'PY'
import statistics, sys
rows = []
for line in open(sys.argv[1]):
    left, right = line.split("|")
    n, *base = left.split()
    rows.append((n, [float(x) for x in base], [float(x) for x in right.split()]))
med = statistics.median
print("== new / base, median of the pairs (cycles per second)")
for n in dict.fromkeys(r[0] for r in rows):
    pairs = [(b, w) for m, b, w in rows if m == n]
    ratios = [w[0] / b[0] for b, w in pairs]
    print(f"N = {n}: {med(ratios):.3f} (pairs: {', '.join(f'{r:.3f}' for r in ratios)}); "
          f"medians base {med(b[0] for b, _ in pairs):.0f}, new {med(w[0] for _, w in pairs):.0f}")
if all(len(b) == 4 and len(w) == 4 for _, b, w in rows):
    print("== the client per cycle, medians: user µs, system µs, voluntary context switches")
    for n in dict.fromkeys(r[0] for r in rows):
        pairs = [(b, w) for m, b, w in rows if m == n]
        show = lambda runs: " / ".join(
            f"{med(run[k] for run in runs):.{p}f}" for k, p in ((1, 3), (2, 3), (3, 4)))
        print(f"N = {n}: base {show([b for b, _ in pairs])}, new {show([w for _, w in pairs])}")
PY
rm -f "$out" "$times"
