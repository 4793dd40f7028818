# Shared shell helpers: install redis-server when missing, start throw-away
# servers on free loopback ports, and stop every one of them; build an example
# and print where cargo put it. Source it, then call `redis_setup` once (it
# sets a trap that stops what was started).

# Installs redis-server (and redis-cli) with apt-get when missing.
ensure_redis_server() {
    if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
        return 0
    fi
    echo "== installing redis-server" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "redis-server is missing and this is not root: run 'sudo apt-get install -y redis-server'" >&2
        return 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
}

# Installs what the network fault tests need (tests/support/netns.rs):
# iproute2 (ip netns, veth, bridges) and nftables (loss, a blackholed
# connection), with apt-get when missing.
ensure_net_tools() {
    if command -v ip >/dev/null 2>&1 && command -v nft >/dev/null 2>&1; then
        return 0
    fi
    echo "== installing iproute2 and nftables" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "ip or nft is missing and this is not root: the network fault tests need root;" \
            "run 'sudo apt-get install -y iproute2 nftables' and the tests as root" >&2
        return 1
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 nftables >/dev/null
}

# Runs "$@" (the tests) with TMPDIR a temp dir of their own, which they must
# leave empty: what a test makes there (servers' dirs, certificates, the CLI
# tests' files) it removes, passed or failed. Fails if they fail or leave
# anything (listed); removes the dir either way. Build the tests first
# (`cargo test --no-run`): a dependency's build script may leave files in
# the temp dir it builds in (rustix's `rustix_test_can_compile`).
in_own_tmp() {
    local dir left status=0
    dir=$(mktemp -d "${TMPDIR:-/tmp}/quorlock-tests.XXXXXX")
    TMPDIR=$dir "$@" || status=$?
    left=$(find "$dir" -mindepth 1 -maxdepth 1)
    rm -rf "$dir"
    if [ -n "$left" ]; then
        echo "the tests left these behind in their temp dir:" >&2
        echo "$left" >&2
        [ "$status" -ne 0 ] || status=1
    fi
    return "$status"
}

# Makes the temporary directory and installs the traps that always stop the
# servers: on exit, on failure and on Ctrl-C / SIGTERM.
redis_setup() {
    REDIS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/quorlock-redis.XXXXXX")
    trap redis_stop_all EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Starts one server as `redis_start` does, pinned to CPU $1 (for figures
# that keep the client and the servers on cores of their own); prints its
# URL. Run from the project's root.
redis_start_on() {
    local cpu=$1
    shift
    taskset -c "$cpu" bash -c 'source scripts/redis.sh; REDIS_TMP="$1"; shift; redis_start "$@"' \
        _ "$REDIS_TMP" "$@"
}

# Starts one server on a free loopback port, with extra arguments "$@"
# (`--replicaof 127.0.0.1 PORT`), or with --sentinel CONF_LINES... a Sentinel
# whose configuration holds those lines; prints its URL.
redis_start() {
    local port dir attempt
    for attempt in $(seq 50); do
        port=$(( 20000 + (RANDOM * 7 + attempt) % 40000 ))
        # Taken by something else: try another.
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
        dir="$REDIS_TMP/$port"
        mkdir -p "$dir"
        if [ "${1:-}" = --sentinel ]; then
            printf '%s\n' "port $port" "bind 127.0.0.1" "dir $dir" "${@:2}" >"$dir/sentinel.conf"
            redis-server "$dir/sentinel.conf" --sentinel --daemonize yes \
                --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" || continue
        else
            redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
                --dir "$dir" --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
                "$@" || continue
        fi
        for _ in $(seq 100); do
            if redis-cli -p "$port" ping >/dev/null 2>&1; then
                echo "redis://127.0.0.1:$port"
                return 0
            fi
            sleep 0.05
        done
    done
    echo "could not start redis-server" >&2
    return 1
}

# Stops every server started here (also ones that already died) and removes
# the temporary directory. Further signals are ignored while it runs, and no
# failure stops it halfway.
redis_stop_all() {
    trap '' INT TERM
    set +e
    [ -n "${REDIS_TMP:-}" ] && [ -d "$REDIS_TMP" ] || return 0
    local dir port pid pids=()
    for dir in "$REDIS_TMP"/*/; do
        [ -d "$dir" ] || continue
        port=$(basename "$dir")
        if pid=$(cat "$dir/redis.pid" 2>/dev/null) && [ -n "$pid" ]; then
            pids+=("$pid")
        else
            # Started but its pidfile is not written yet (or it already exited):
            # find it by the title redis-server gives itself.
            for pid in $(pgrep -f "^redis-server 127.0.0.1:$port\b"); do pids+=("$pid"); done
        fi
    done
    for pid in "${pids[@]}"; do
        # Thaw first: a frozen server would not die.
        kill -CONT "$pid" 2>/dev/null
        kill "$pid" 2>/dev/null
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill -KILL "$pid" 2>/dev/null
    done
    rm -rf "$REDIS_TMP"
}

# Builds example $1 in release mode and prints the path of its binary, as
# cargo reports it (so CARGO_TARGET_DIR and build.target-dir are honoured).
example_binary() {
    local line exe=""
    while IFS= read -r line; do
        case "$line" in
            *'"reason":"compiler-artifact"'*'"executable":"'*)
                exe=${line##*\"executable\":\"}
                exe=${exe%%\"*}
                ;;
        esac
    done < <(cargo build --release --quiet --example "$1" --message-format=json)
    if [ -z "$exe" ] || [ ! -x "$exe" ]; then
        echo "cargo did not report a binary for example $1" >&2
        return 1
    fi
    echo "$exe"
}
