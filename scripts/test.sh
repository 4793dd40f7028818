#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs redis-server when it is
# missing, then formatting, lints, tests (against real redis-server processes
# the tests start themselves), docs, and the basic example on three throw-away
# servers. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
    echo "== installing redis-server"
    if [ "$(id -u)" -ne 0 ]; then
        echo "redis-server is missing and this is not root: run 'sudo apt-get install -y redis-server'" >&2
        exit 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
redis-server --version

# Servers this script starts are stopped on any exit.
tmp=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --all-targets --all-features -- -D warnings
echo "== cargo test"
cargo test --all-features
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features

echo "== examples/basic.rs on three servers"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
urls=()
for i in 1 2 3; do
    port=$(free_port)
    mkdir -p "$tmp/$i"
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp/$i" >/dev/null &
    pids+=($!)
    for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
    urls+=("redis://127.0.0.1:$port")
done
cargo run --quiet --example basic -- "${urls[@]}"
echo "== all checks passed"
