#!/usr/bin/env bash
# "The seeds' approach": the hand-rolled lock a cron job would use before
# redlock-run -- SET NX PX, run the command, compare-and-delete with EVAL.
# One node only, no heartbeat, no quorum, no signal handling.
#   seed-lock.sh PORT [COMMAND...]     (COMMAND defaults to `true`)
port=$1; shift
[ $# -gt 0 ] || set -- true
# bash's SRANDOM reads getrandom(2): no extra process for the token.
token="$SRANDOM$SRANDOM$SRANDOM$SRANDOM"
[ "$(redis-cli -p "$port" SET lock:x "$token" NX PX 30000)" = OK ] || exit 75
"$@"; rc=$?
redis-cli -p "$port" EVAL "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end" 1 lock:x "$token" >/dev/null
exit $rc
