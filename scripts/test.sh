#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs redis-server (and, for
# the network fault tests, iproute2 and nftables) when missing, then
# formatting, lints, tests (against real redis-server processes the tests
# start themselves), docs, and the basic, fenced storage, election and
# semaphore examples on three throw-away servers. Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh

ensure_redis_server
ensure_net_tools
redis-server --version
redis_setup

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --all-targets --all-features -- -D warnings
echo "== the crate's shape (no import circle, short functions, shallow nesting)"
scripts/check-structure.sh
echo "== cargo test"
# In a temp dir of their own, which they must leave empty (`in_own_tmp`),
# built before.
cargo test --all-features --no-run
in_own_tmp cargo test --all-features
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features

echo "== examples/basic.rs on three servers"
urls=()
for _ in 1 2 3; do urls+=("$(redis_start)"); done
cargo run --quiet --example basic -- "${urls[@]}"
echo "== examples/fenced_storage.rs on the same servers"
cargo run --quiet --example fenced_storage -- "${urls[@]}"
echo "== examples/election.rs on the same servers"
cargo run --quiet --example election -- "${urls[@]}"
echo "== examples/semaphore.rs on the same servers"
cargo run --quiet --example semaphore -- "${urls[@]}"
echo "== all checks passed"
