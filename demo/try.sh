#!/usr/bin/env bash
# A real redlock-run session on throwaway local Redis nodes: starts three
# redis-server processes on free loopback ports in a temporary directory,
# shows a quorum lock at work, and removes everything when it ends.
# Needs: cargo, redis-server and redis-cli (apt-get install redis-server),
# python3 (to find free ports).
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in redis-server redis-cli python3 cargo; do
    command -v "$tool" >/dev/null || { echo "try.sh: $tool not found (see the comment at the top)" >&2; exit 1; }
done
echo "building redlock-run (release; the first build takes about two minutes)..."
cargo build --release
# Wherever cargo put it: CARGO_TARGET_DIR, a build.target-dir setting, or target/.
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
bin=$target_dir/release/redlock-run
test -x "$bin" || { echo "try.sh: no binary at $bin" >&2; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
urls=()
for i in 1 2 3; do
    port=$(free_port)
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$work" --logfile "$work/node$i.log" &
    pids+=($!)
    urls+=("redis://127.0.0.1:$port")
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
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
for url in "${urls[@]}"; do redis-cli -u "$url" --no-auth-warning exists lock:job; done

# One node of three stopped (maintenance, a hung VM): the quorum of the other
# two takes the lock at once, and redlock-run names the node that did not answer.
kill -STOP "${pids[2]}"
time "$bin" -k report -- echo "ran with one node stopped"
kill -CONT "${pids[2]}"
