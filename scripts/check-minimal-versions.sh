#!/usr/bin/env bash
# Checks that the lowest versions Cargo.toml allows for quorlock's own
# dependencies are enough: a user whose lockfile holds an older tokio or
# redis than ours must get a crate that builds and works, not a compile
# error. In a copy of the crate (this work tree's files, in a temporary
# directory it removes), each direct dependency is resolved to the lowest
# version Cargo.toml allows (`cargo update -Z direct-minimal-versions`,
# unstable, so RUSTC_BOOTSTRAP=1 on the stable toolchain; the dependencies'
# own dependencies are resolved as usual), then:
#
# - the library and the CLI build with every feature;
# - the unit tests, `tests/lock_basics.rs` and `tests/token_release.rs` run
#   against real redis-server processes.
#
# The development dependencies are cut down to what those tests use (rslock,
# for the interoperability tests, needs a newer redis than the lowest that
# quorlock allows). Usage: scripts/check-minimal-versions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh
ensure_redis_server
redis_setup
copy=$(mktemp -d)
# redis_setup's trap stops the servers; this one also removes the copy.
trap 'redis_stop_all; rm -rf "$copy"' EXIT
cp -r Cargo.toml src tests "$copy/"
cp README.md "$copy/" 2>/dev/null || true
cd "$copy"
rm -f Cargo.lock
python3 - <<'PY'
import re
manifest = open("Cargo.toml").read()
start = manifest.index("[dev-dependencies]")
end = manifest.index("[[test]]")
dev = """[dev-dependencies]
proptest = "1"
redis = { version = "1.0.3", features = ["tokio-comp"] }
tokio = { version = "1.41", features = ["full"] }
tracing-subscriber = { version = "0.3.18", features = ["fmt"] }

"""
manifest = manifest[:start] + dev + manifest[end:]
# Only the tests run here are targets.
manifest = re.sub(r'\[\[test\]\]\nname = "\w+"\nharness = false\n\n?', "", manifest)
open("Cargo.toml", "w").write(manifest)
PY
find tests -maxdepth 1 -name '*.rs' ! -name lock_basics.rs ! -name token_release.rs -delete

echo "== resolving each direct dependency to the lowest version Cargo.toml allows"
# Prints each version it chose ("Adding tokio v1.41.0").
RUSTC_BOOTSTRAP=1 cargo update -Z direct-minimal-versions
echo "== build: library and CLI, every feature"
cargo build --lib --bins --all-features
echo "== unit tests, tests/lock_basics.rs, tests/token_release.rs"
cargo test --all-features --lib --test lock_basics --test token_release --no-run
in_own_tmp cargo test --all-features --lib --test lock_basics --test token_release
echo "== the lowest versions Cargo.toml allows are enough"
