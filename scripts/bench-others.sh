#!/usr/bin/env bash
# quorlock beside the other lock clients a team would pick instead, on this
# machine, in the same minutes: rslock (Rust, in examples/bench), node-redlock
# (npm `redlock` 4.2.0 on ioredis, scripts/others/redlock.js) and ZooKeeper
# 3.8 (Debian's, a 3-server ensemble on loopback) with kazoo's lock recipe
# (PyPI `kazoo` 2.10.0, scripts/others/zk.py). Each with its defaults.
#
# Workloads, as examples/bench and examples/contention run them:
#   latency     one caller, lock + unlock of a new resource each time (p50, p99)
#   throughput  64 callers at once in one process, each on its own resources
#   contention  4 processes x 4 callers on one resource, 1 ms holds, checked
#               by INCR on a separate Redis, 5 s (acquisitions, failed calls,
#               overlaps)
# Redlock clients on 5 nodes (and latency and throughput on 1 as well); the
# servers on CPU 1 and the clients on CPU 0, as scripts/bench.sh's split
# layout. RUNS rounds (default 3), each client once per round, in turn; the
# medians and spreads (max - min over the median) at the end.
#
# Fetches what it lacks: node-redlock and kazoo into a cache directory
# ($QUORLOCK_OTHERS_CACHE, else ~/.cache/quorlock/others), ZooKeeper with
# apt-get (as root). Node.js and Java must be there (node, java).
#
#   scripts/bench-others.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
runs=${1:-3}
seconds=5

ensure_redis_server
for tool in node npm java python3; do
    command -v "$tool" > /dev/null || { echo "$tool is needed for this comparison" >&2; exit 1; }
done
cache=${QUORLOCK_OTHERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/quorlock/others}
if [ ! -d "$cache/node/node_modules/redlock" ]; then
    echo "== fetching node-redlock into $cache/node" >&2
    mkdir -p "$cache/node"
    (cd "$cache/node" && npm init -y > /dev/null && npm install --silent redlock@4.2.0 ioredis@5.4.1)
fi
if [ ! -d "$cache/py/kazoo" ]; then
    echo "== fetching kazoo into $cache/py" >&2
    python3 -m pip install --quiet --target "$cache/py" kazoo==2.10.0 redis==5.0.8
fi
if [ ! -f /usr/share/java/zookeeper.jar ]; then
    echo "== installing ZooKeeper (apt-get)" >&2
    apt-get update -qq && apt-get install -y -qq zookeeper > /dev/null
fi
export NODE_PATH="$cache/node/node_modules" PYTHONPATH="$cache/py"

redis_setup
zk_pids=()
stop_all() {
    [ ${#zk_pids[@]} -gt 0 ] && kill "${zk_pids[@]}" 2> /dev/null
    redis_stop_all
}
trap stop_all EXIT

echo "== building the benchmarks (release)"
bench=$(example_binary bench)
contention=$(example_binary contention)

urls=()
for _ in 1 2 3 4 5; do urls+=("$(redis_start_on 1)"); done
checker=$(redis_start)

# A 3-server ZooKeeper ensemble on loopback, on CPU 1.
zk_hosts=""
zk_ports=()
for i in 1 2 3; do zk_ports+=($((21800 + i)) $((22800 + i)) $((23800 + i))); done
for i in 1 2 3; do
    dir="$REDIS_TMP/zk$i"
    mkdir -p "$dir"
    echo "$i" > "$dir/myid"
    {
        echo "tickTime=2000"; echo "initLimit=10"; echo "syncLimit=5"
        echo "dataDir=$dir"; echo "clientPort=${zk_ports[$(((i - 1) * 3))]}"
        echo "admin.enableServer=false"; echo "4lw.commands.whitelist=srvr"
        for j in 1 2 3; do
            echo "server.$j=127.0.0.1:${zk_ports[$(((j - 1) * 3 + 1))]}:${zk_ports[$(((j - 1) * 3 + 2))]}"
        done
    } > "$dir/zoo.cfg"
    taskset -c 1 java -Xmx512m -cp "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar" \
        -Dzookeeper.log.dir="$dir" org.apache.zookeeper.server.quorum.QuorumPeerMain \
        "$dir/zoo.cfg" > "$dir/out.log" 2>&1 &
    zk_pids+=($!)
    zk_hosts+="${zk_hosts:+,}127.0.0.1:${zk_ports[$(((i - 1) * 3))]}"
done
for attempt in $(seq 100); do
    modes=$(for i in 0 3 6; do
        timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/${zk_ports[$i]}; echo srvr >&3; cat <&3" 2> /dev/null |
            awk '/^Mode:/ {print $2}' || true
    done | sort | tr '\n' ' ')
    [ "$modes" = "follower follower leader " ] && break
    [ "$attempt" = 100 ] && { echo "the ZooKeeper ensemble did not form: $modes" >&2; exit 1; }
    sleep 0.2
done
echo "== nodes ${urls[*]}; checker $checker; ZooKeeper $zk_hosts"

out=$(mktemp)
# Records "<client> <figure> <value>".
put() { echo "$1 $2 $3" >> "$out"; }

# Runs `contend` of a client in 4 processes at once; records the totals.
contend() {
    local name=$1
    shift
    local files=() pids=() i
    redis-cli -u "$checker" del holders > /dev/null
    for i in 1 2 3 4; do
        files+=("$(mktemp)")
        taskset -c 0 "$@" > "${files[-1]}" &
        pids+=($!)
    done
    wait "${pids[@]}"
    read -r acquired failed overlaps < <(cat "${files[@]}" | awk '{a += $1; f += $2; o += $3} END {print a, f, o}')
    rm -f "${files[@]}"
    put "$name" "contention_acquisitions" "$acquired"
    put "$name" "contention_failed" "$failed"
    put "$name" "contention_overlaps" "$overlaps"
}

for run in $(seq "$runs"); do
    echo "== round $run of $runs"
    # quorlock and rslock: bench --quick on the same 5 nodes.
    report=$(BENCH_REDIS_DIR="$REDIS_TMP" taskset -c 0 "$bench" --quick --json /dev/null "${urls[@]}")
    for client in quorlock rslock; do
        col=$([ "$client" = quorlock ] && echo 5 || echo 6)
        for n in 1 5; do
            put "$client" "latency_p50_ms_n$n" "$(awk -v n="$n" -v c="$col" '$1 == "latency" && $2 == n && $3 == "p50" {print $c / 1000}' <<< "$report")"
            put "$client" "latency_p99_ms_n$n" "$(awk -v n="$n" -v c="$col" '$1 == "latency" && $2 == n && $3 == "p99" {print $c / 1000}' <<< "$report")"
            put "$client" "throughput_n$n" "$(awk -v n="$n" -v c="$(( col - 1 ))" '$1 == "throughput" && $2 == n {print $c}' <<< "$report")"
        done
    done
    for n in 1 5; do
        read -r _ p50 p99 _ < <(taskset -c 0 node scripts/others/redlock.js latency "$seconds" "${urls[@]:0:$n}")
        put node-redlock "latency_p50_ms_n$n" "$p50"
        put node-redlock "latency_p99_ms_n$n" "$p99"
        read -r _ tp _ < <(taskset -c 0 node scripts/others/redlock.js throughput "$seconds" "${urls[@]:0:$n}")
        put node-redlock "throughput_n$n" "$tp"
    done
    read -r _ p50 p99 _ < <(taskset -c 0 python3 scripts/others/zk.py latency "$seconds" "$zk_hosts")
    put zookeeper latency_p50_ms "$p50"
    put zookeeper latency_p99_ms "$p99"
    read -r _ tp _ < <(taskset -c 0 python3 scripts/others/zk.py throughput "$seconds" "$zk_hosts")
    put zookeeper throughput "$tp"
    # Contention: quorlock's own run (its own 5 servers), then the others.
    line=$("$contention" 4 4 "$seconds" | grep '^total')
    put quorlock contention_acquisitions "$(awk '{print $2}' <<< "$line")"
    put quorlock contention_failed "$(awk '{print $4}' <<< "$line")"
    put quorlock contention_overlaps "$(awk '{print $7}' <<< "$line")"
    contend node-redlock node scripts/others/redlock.js contend "$seconds" 4 "$checker" "${urls[@]}"
    contend zookeeper python3 scripts/others/zk.py contend "$seconds" 4 "$checker" "$zk_hosts"
done

python3 - "$out" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    client, figure, value = line.split()
    if value:
        rows.setdefault((client, figure), []).append(float(value))
print("== medians of the rounds (spread: max - min over the median)")
for (client, figure), values in sorted(rows.items()):
    median = statistics.median(values)
    spread = (max(values) - min(values)) / median * 100 if median else 0
    print(f"{client:13} {figure:26} {median:12.3f}  (spread {spread:.0f} %, {len(values)} runs)")
PY
rm -f "$out"
