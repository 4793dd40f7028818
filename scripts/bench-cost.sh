#!/usr/bin/env bash
# Before/after in work done, for machines too noisy to time: two builds of
# examples/bench (BASE and NEW) run the uncontended throughput workload
# (`--profile N quorlock SECS`: 64 tasks, lock and unlock). The client runs
# under callgrind, which counts its instructions; a run of 2 s and one of
# 6 s cancel start-up out, so each figure is instructions per lock/unlock
# cycle (N = 1, 3, 5, per round, and the median of NEW / BASE). The
# servers' side is counted in commands per cycle (INFO commandstats).
# Kernel work is not counted: compare syscalls per cycle (`perf stat -e
# raw_syscalls:sys_enter`) where it may differ.
#
#   scripts/bench-cost.sh BASE_BENCH NEW_BENCH [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
[ $# -ge 2 ] || { echo "usage: $0 BASE_BENCH NEW_BENCH [ROUNDS]" >&2; exit 2; }
base=$1 new=$2 rounds=${3:-2}
command -v valgrind > /dev/null || {
    echo "valgrind is missing: apt-get install -y valgrind" >&2
    exit 1
}
ensure_redis_server
redis_setup
urls=()
for _ in 1 2 3 4 5; do urls+=("$(redis_start_on 1)"); done
out=$(mktemp)

# Prints "<cycles> <instructions>" of one run of BIN with N nodes for SECS,
# the client under callgrind.
client_run() {
    local bin=$1 n=$2 secs=$3 report
    report=$(taskset -c 0 valgrind --tool=callgrind --cache-sim=no \
        --callgrind-out-file=/dev/null "$bin" --profile "$n" quorlock "$secs" "${urls[@]}" 2>&1)
    awk -v secs="$secs" '/^throughput/ && !tp {tp = $4} /Collected/ {ir = $4}
        END {print tp * secs, ir}' <<<"$report"
}

# What the server ran per cycle of BIN with N nodes: each command's calls
# per lock/unlock cycle, from INFO commandstats (exact, where instructions
# under callgrind are not: a server slowed down that much makes calls time
# out).
server_commands() {
    local bin=$1 n=$2 tp url report
    for url in "${urls[@]}"; do redis-cli -u "$url" config resetstat > /dev/null; done
    tp=$(taskset -c 0 "$bin" --profile "$n" quorlock 3 "${urls[@]}" | awk '/^throughput/ {print $4; exit}')
    report=$(for url in "${urls[@]:0:$n}"; do redis-cli -u "$url" info commandstats; done)
    awk -v cycles="$(awk -v tp="$tp" 'BEGIN {print tp * 3}')" -F'[_:=,]' '
        /^cmdstat_/ {calls[$2] += $4}
        END {for (c in calls) if (calls[c] / cycles >= 0.0005) printf "%s %.3f  ", c, calls[c] / cycles}
    ' <<<"$report"
}

# Instructions per cycle: the 6 s run less the 2 s run.
per_cycle() {
    local bin=$2 n=$3
    read -r c2 i2 < <(client_run "$bin" "$n" 2)
    read -r c6 i6 < <(client_run "$bin" "$n" 6)
    awk -v c2="$c2" -v i2="$i2" -v c6="$c6" -v i6="$i6" 'BEGIN {printf "%.0f", (i6 - i2) / (c6 - c2)}'
}

for round in $(seq "$rounds"); do
    for n in 1 3 5; do
        b=$(per_cycle client "$base" "$n")
        w=$(per_cycle client "$new" "$n")
        echo "round $round: client, N = $n: base $b, new $w instructions per cycle"
        echo "client $n $b $w" >> "$out"
    done
done
python3 - "$out" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
print("== new / base, median of rounds (instructions per lock/unlock cycle)")
for key in dict.fromkeys((side, n) for side, n, _, _ in rows):
    ratios = [int(w) / int(b) for side, n, b, w in rows if (side, n) == key]
    print(f"{key[0]}, N = {key[1]}: {statistics.median(ratios):.3f} "
          f"(rounds: {', '.join(f'{r:.3f}' for r in ratios)})")
PY
rm -f "$out"
echo "== server commands per lock/unlock cycle, summed over the nodes (N = 1, 3, 5)"
for n in 1 3 5; do
    echo "N = $n: base: $(server_commands "$base" "$n")"
    echo "N = $n: new:  $(server_commands "$new" "$n")"
done
