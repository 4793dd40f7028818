#!/usr/bin/env bash
# The demo: a stock of 100 items, several worker processes buying with a plain
# read-check-write. Without a lock they oversell; with quorlock over 5 Redis
# nodes they sell exactly 100, even with 2 of the 5 nodes killed mid-round.
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
"$inventory" --workers "${1:-8}" "$database" "${nodes[@]}"
