//! The Lua scripts every request runs. One script is one atomic step on the
//! node, and it is the same text on a plain server, a Sentinel group's
//! primary or a Cluster (where every key a script names is in one hash slot,
//! so the cluster routes it by its first key).

// Every script touches the lock's books only while the lock holds our token.
// Calls that only inform (the holder record, the PUBLISH that wakes waiters)
// go through pcall: an ACL that denies them must not cost a lock or a
// release. Keys are passed as KEYS (one hash slot, see `keys`), never spliced
// into the Lua text.

/// Takes the lock: SET NX PX, or, when it already holds our token (a retry
/// after a lost reply), renews it. In the same atomic step: writes the
/// holder record (KEYS[2]) when fields are given from ARGV[5], reads the
/// --fence counter (KEYS[3]) when ARGV[3] is '1', and with --limit records
/// the number of slots (ARGV[4]) in KEYS[4] for `status`.
pub(super) const ACQUIRE: &str = "\
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return {0}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if #ARGV > 4 then
  redis.pcall('DEL', KEYS[2])
  redis.pcall('HSET', KEYS[2], unpack(ARGV, 5))
  redis.pcall('PEXPIRE', KEYS[2], ARGV[2])
end
if ARGV[4] ~= '' then
  redis.pcall('SET', KEYS[4], ARGV[4], 'PX', ARGV[2])
end
if ARGV[3] == '1' then
  return {1, redis.call('GET', KEYS[3])}
end
return {1}";

/// Extends only our own lock (its record, and with --limit the slot count,
/// KEYS[3]); never re-creates one (see `retake`). 1 extended, -1 no key
/// here, 0 another token.
pub(super) const EXTEND: &str = "\
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.pcall('PEXPIRE', KEYS[2], ARGV[2])
  redis.pcall('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif v == false then
  return -1
end
return 0";

/// Deletes only our own lock, then wakes waiters subscribed to ARGV[2] (in
/// the same script, so no waiter can miss it); an empty ARGV[2] wakes nobody.
/// -1 tells the log the key had already gone.
pub(super) const RELEASE: &str = "\
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.pcall('DEL', KEYS[2])
  if ARGV[2] ~= '' then
    redis.pcall('PUBLISH', ARGV[2], '')
  end
  return 1
elseif v == false then
  return -1
end
return 0";

/// Leaves our lock to expire after ARGV[2] ms (--hold), saying so in its
/// record: the command exited (ARGV[3] ms) with status ARGV[4].
pub(super) const HOLD: &str = "\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.pcall('HSET', KEYS[2], 'exited_ms', ARGV[3], 'exit_code', ARGV[4])
redis.pcall('PEXPIRE', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1";

/// `unlock --token`: deletes the lock where its token starts with ARGV[1]
/// (the whole token, or the prefix `status` shows), and wakes waiters.
/// A plain byte comparison: no Lua patterns.
pub(super) const UNLOCK: &str = "\
local v = redis.call('GET', KEYS[1])
if v == false then
  return -1
end
if string.sub(v, 1, #ARGV[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.pcall('DEL', KEYS[2])
redis.pcall('PUBLISH', ARGV[2], '')
return 1";

/// Deletes a key only while it holds our token (undoing a --once-per marker).
pub(super) const DROP: &str = "\
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// --fence, second phase: raise the counter to ARGV[2] (never lower it), only
/// while the lock holds our token here.
pub(super) const FENCE: &str = "\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1";

/// `unlock --force`: deletes whatever holds the lock, and wakes waiters.
pub(super) const FORCE: &str = "\
local n = redis.call('DEL', KEYS[1])
redis.pcall('DEL', KEYS[2])
if n == 1 then
  redis.pcall('PUBLISH', ARGV[1], '')
end
return n";

/// `status`: the lock's value, its PTTL and its holder record in one step.
/// A script rather than a pipeline, which a Cluster connection cannot route.
pub(super) const INSPECT: &str = "\
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('HGETALL', KEYS[2])}";
