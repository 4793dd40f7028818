#!/usr/bin/env bash
# The demo: a stock of 100 items, several worker processes buying with a plain
# read-check-write. Without a lock they oversell; with quorlock over 5 Redis
# nodes they sell exactly 100, even with 2 of the 5 nodes killed mid-round;
# and over one Sentinel-managed primary (a replica, three Sentinels) killed
# mid-round, which the Sentinels replace: exactly 100.
# Installs redis-server when missing; always stops the servers it started.
# Usage: scripts/demo.sh [WORKERS]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh

ensure_redis_server
redis_setup

echo "== building the demo (release)"
inventory=$(example_binary inventory)
database=$(redis_start)
nodes=()
for _ in 1 2 3 4 5; do nodes+=("$(redis_start)"); done
echo "== stock database: $database; lock nodes: ${nodes[*]}"
primary=$(redis_start)
primary_port=${primary##*:}
redis_start --replicaof 127.0.0.1 "$primary_port" >/dev/null
sentinels=()
for _ in 1 2 3; do
    url=$(redis_start --sentinel "sentinel monitor mymaster 127.0.0.1 $primary_port 2" \
        "sentinel down-after-milliseconds mymaster 1000" "sentinel failover-timeout mymaster 3000")
    sentinels+=("${url#redis://}")
done
# A failover needs a replica that the Sentinels know.
for sentinel in "${sentinels[@]}"; do
    for _ in $(seq 600); do
        [ -n "$(redis-cli -p "${sentinel##*:}" sentinel replicas mymaster)" ] && break
        sleep 0.05
    done
done
sentinel_url="redis+sentinel://$(IFS=,; echo "${sentinels[*]}")/mymaster"
echo "== Sentinel node: $sentinel_url (primary $primary)"
"$inventory" --workers "${1:-8}" --sentinel "$sentinel_url" "$primary" "$database" "${nodes[@]}"
