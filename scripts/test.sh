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
# In a temp dir of their own, which they must leave empty: what a test
# makes there (servers' dirs, certificates, the CLI's files) it removes,
# whether it passes or fails.
tests_tmp=$(mktemp -d "${TMPDIR:-/tmp}/quorlock-tests.XXXXXX")
if ! TMPDIR=$tests_tmp cargo test --all-features; then
    rm -rf "$tests_tmp"
    exit 1
fi
left=$(find "$tests_tmp" -mindepth 1 -maxdepth 1)
rm -rf "$tests_tmp"
if [ -n "$left" ]; then
    echo "the tests left these behind in their temp dir:" >&2
    echo "$left" >&2
    exit 1
fi
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
