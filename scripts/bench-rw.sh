#!/usr/bin/env bash
# The read-write lock's cost beside the plain lock's, for one or more builds
# of examples/bench: each round runs, in turns on the same five servers
# (pinned to core 1; the client to core 0), the uncontended throughput
# workload (`--profile N CLIENT SECS`: 64 tasks, lock and unlock) of the
# plain lock, the read hold and the write hold, at N = 3 and 5. Printed per
# build and N: the median over rounds of read / plain and write / plain
# throughput in the same round (with the spread of the ratios), and the
# servers' CPU per hold (user + system time of the N servers from INFO cpu,
# over the holds made; the I/O is counted, as it is work per request).
#
#   scripts/bench-rw.sh ROUNDS SECS BENCH...
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS SECS BENCH..." >&2; exit 2; }
rounds=$1 secs=$2
shift 2
ensure_redis_server
redis_setup
urls=()
for _ in 1 2 3 4 5; do urls+=("$(redis_start_on 1)"); done
out=$(mktemp)

# The CPU time, in µs, the first N servers have used so far (user + system).
servers_cpu() {
    local n=$1 url
    for url in "${urls[@]:0:$n}"; do redis-cli -u "$url" info cpu; done |
        awk -F: '/^used_cpu_(sys|user):/ {t += $2} END {printf "%.0f\n", t * 1e6}'
}

# Prints "<throughput> <server CPU µs per hold>" of one run of BIN with N nodes.
one_run() {
    local bin=$1 n=$2 kind=$3 tp before after
    before=$(servers_cpu "$n")
    tp=$(taskset -c 0 "$bin" --profile "$n" "$kind" "$secs" "${urls[@]}" | awk '/^throughput/ {print $4; exit}')
    after=$(servers_cpu "$n")
    # The client's connection and warm-up are counted too: a small bias alike for all.
    awk -v tp="$tp" -v u="$((after - before))" -v s="$secs" 'BEGIN {printf "%s %.2f\n", tp, (tp > 0 ? u / (tp * s) : 0)}'
}

for round in $(seq "$rounds"); do
    for bin in "$@"; do
        for n in 3 5; do
            for kind in quorlock quorlock-read quorlock-write; do
                read -r tp us < <(one_run "$bin" "$n" "$kind")
                echo "$round $bin $n $kind $tp $us" | tee -a "$out" >&2
            done
        done
    done
done

echo "== median over $rounds rounds (spread = (max - min) / median of the per-round ratios)"
for bin in "$@"; do
    for n in 3 5; do
        awk -v bin="$bin" -v n="$n" '
            function median(a, k,   i, j, t) {
                for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) {t = a[i]; a[i] = a[j]; a[j] = t}
                return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
            }
            $2 == bin && $3 == n {tp[$1, $4] = $5; us[$1, $4] = $6; if ($1 > r) r = $1}
            END {
                for (i = 1; i <= r; i++) {
                    rr[i] = tp[i, "quorlock-read"] / tp[i, "quorlock"]
                    wr[i] = tp[i, "quorlock-write"] / tp[i, "quorlock"]
                    pu[i] = us[i, "quorlock"]; ru[i] = us[i, "quorlock-read"]; wu[i] = us[i, "quorlock-write"]
                    pt[i] = tp[i, "quorlock"]
                }
                for (i = 1; i <= r; i++) {c[i] = rr[i]}; mr = median(c, r); lo = hi = rr[1]
                for (i = 1; i <= r; i++) {if (rr[i] < lo) lo = rr[i]; if (rr[i] > hi) hi = rr[i]}; sr = (hi - lo) / mr
                for (i = 1; i <= r; i++) {c[i] = wr[i]}; mw = median(c, r); lo = hi = wr[1]
                for (i = 1; i <= r; i++) {if (wr[i] < lo) lo = wr[i]; if (wr[i] > hi) hi = wr[i]}; sw = (hi - lo) / mw
                for (i = 1; i <= r; i++) {c[i] = pt[i]}; mp = median(c, r)
                for (i = 1; i <= r; i++) {c[i] = pu[i]}; mpu = median(c, r)
                for (i = 1; i <= r; i++) {c[i] = ru[i]}; mru = median(c, r)
                for (i = 1; i <= r; i++) {c[i] = wu[i]}; mwu = median(c, r)
                printf "%s N=%d: plain %.0f holds/s; read/plain %.2f ±%.0f%%, write/plain %.2f ±%.0f%%; server CPU µs per hold: plain %.1f, read %.1f, write %.1f\n",
                    bin, n, mp, mr, 100 * sr, mw, 100 * sw, mpu, mru, mwu
            }' "$out"
    done
done
