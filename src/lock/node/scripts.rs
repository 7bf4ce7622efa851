//! The Lua scripts every request runs. One script is one atomic step on the
//! node, and it is the same text on a plain server, a Sentinel group's
//! primary or a Cluster (where every key a script names is in one hash slot,
//! so the cluster routes it by its first key).

// The --wait queue. Waiters are a sorted set (the queue, scored by each
// waiter's ticket: see `Lock::acquire`) and a hash (when each one's place
// lapses, in the server's clock, so that a waiter that died leaves the queue
// by itself). `front` prunes lapsed waiters from the head and returns the
// first `n` live ones, the ones that may take the lock (n is 1, or N slots
// with --limit N), with every reader (a --shared run: its token starts with
// `r`) that follows readers only, since readers at the head of the line go
// in together, and the earliest of their lapse times. `writer_waits` says
// whether a live writer is queued anywhere: a reader's single try must not
// pass it. `wake` PUBLISHes to
// each of them on its own channel (`<release channel>:<token>`), so a release
// wakes the head of the queue, not every waiter; and, for waiters that do not
// queue (--wait-unfair, or other versions), on the release channel itself.
// Queue steps run under pcall: an ACL that denies them costs fairness, never
// a lock or a release.
macro_rules! queue_lua {
    (now_ms) => {
        "\
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"
    };
    (reader) => {
        "\
local function reader(id)
  return string.byte(id, 1) == 114
end
"
    };
    (front) => {
        "\
local function front(q, w, n, now)
  local live, i, lapse, readers = {}, 0, false, true
  while #live < n or readers do
    local id = redis.call('ZRANGE', q, i, i)[1]
    if not id or (#live >= n and not reader(id)) then
      break
    end
    local at = tonumber(redis.call('HGET', w, id) or '0')
    if at < now then
      redis.call('ZREM', q, id)
      redis.call('HDEL', w, id)
    else
      readers = readers and reader(id)
      live[#live + 1] = id
      if not lapse or at < lapse then
        lapse = at
      end
      i = i + 1
    end
  end
  return live, lapse
end
"
    };
    (writer_waits) => {
        "\
local function writer_waits(q, w, now)
  local i = 0
  while true do
    local id = redis.call('ZRANGE', q, i, i)[1]
    if not id then
      return false
    end
    local at = tonumber(redis.call('HGET', w, id) or '0')
    if at < now then
      redis.call('ZREM', q, id)
      redis.call('HDEL', w, id)
    elseif not reader(id) then
      return true
    else
      i = i + 1
    end
  end
end
"
    };
    (wake_front) => {
        "\
local function wake_front(q, w, ch, n)
  local live = front(q, w, n, now_ms())
  for _, id in ipairs(live) do
    redis.call('PUBLISH', ch .. ':' .. id, '')
  end
end
"
    };
    (wake) => {
        "\
local function wake(q, w, ch, n)
  if redis.call('EXISTS', q) == 1 then
    wake_front(q, w, ch, n)
  end
end
"
    };
}

// The --limit holders of the moment (`Keys::slots`): a sorted set of
// `<N>:<token>`, each scored by when that holder's slot lapses (server ms),
// written in the same step as the slot key's own expiry, so an entry is live
// exactly as long as its slot key. The set itself lives as long as its
// longest entry. `slot_holders` drops a few lapsed entries (holders that
// died) and returns the live ones (reading the clock only when there is a
// set); `hold_slot` sets ours to lapse in `ms`.
// Not under pcall where a slot is taken or kept: a plain lock and a --limit
// lock exclude each other by it, so a step that fails fails the request (the
// node then counts as failed and is undone). A plain acquire that may not
// read the set goes on: the same ACL could not have written an entry.
macro_rules! slots_lua {
    (keep_for) => {
        "\
local function keep_for(k, ms)
  if redis.call('PTTL', k) < ms then
    redis.call('PEXPIRE', k, ms)
  end
end
"
    };
    (live) => {
        "\
local function live(s, rec)
  if redis.call('EXISTS', s) == 0 then
    return {}
  end
  local now = now_ms()
  local dead = redis.call('ZRANGE', s, '-inf', now, 'BYSCORE', 'LIMIT', 0, 16)
  for _, m in ipairs(dead) do
    redis.call('ZREM', s, m)
    if rec then
      redis.pcall('HDEL', rec, m)
    end
  end
  return redis.call('ZRANGE', s, '(' .. now, '+inf', 'BYSCORE')
end
"
    };
    (slot_holders) => {
        "\
local function slot_holders(s)
  return live(s, false)
end
"
    };
    (slot_limit) => {
        "\
local function slot_limit(m)
  return tonumber(string.match(m, '^(%d+):') or '0')
end
"
    };
    (hold_slot) => {
        "\
local function hold_slot(s, member, ms, now)
  redis.call('ZADD', s, now + ms, member)
  keep_for(s, ms)
end
"
    };
}

// The --shared readers of the moment (`Keys::readers`): a sorted set of
// reader tokens, each scored by when that reader's share lapses (server ms),
// and beside it a hash of their records. An entry is live while its score is
// in the future; `live_readers` drops a few lapsed ones (readers that died),
// their records with them, and returns the live ones (as `slots_lua`'s
// `live` does for slot holders: it comes after, and needs, `slots_lua`). A writer is refused
// while there is one, a reader while the lock's key is held: on one node a
// share and the lock are never live at once (docs/design.md, "Readers and
// writers", has the quorum argument).
macro_rules! readers_lua {
    (live_readers) => {
        "\
local function live_readers(r, rec)
  return live(r, rec)
end
"
    };
    (share_left) => {
        "\
local function share_left(r, token, now)
  return tonumber(redis.call('ZSCORE', r, token) or '0') - now
end
"
    };
}

// How an acquire treats the queue (KEYS[5], KEYS[6]) by ARGV[5], shared by
// ACQUIRE and ACQUIRE_SHARED (`token`, `mode`, `n`, `place` and
// `lapse_ahead` are theirs): '' ignores it; 'check' (a single try) passes
// while fewer than n waiters are queued, or, for a reader, while no writer
// is; 'join' (a waiter's first try) queues us scored by this node's clock,
// unless we have a place already; a number (the waiter's ticket) queues or
// renews our place with that score. A place lapses in ARGV[6] ms; a waiter
// passes only from the front of the queue (see `front`).
macro_rules! gate_lua {
    () => {
        "\
local function gate()
  if mode == 'check' and redis.call('EXISTS', KEYS[5]) == 0 then
    return true
  end
  local now = now_ms()
  if mode ~= 'check' then
    redis.call('HSET', KEYS[6], token, now + tonumber(ARGV[6]))
    if mode == 'join' then
      redis.call('ZADD', KEYS[5], 'NX', now, token)
      place = tonumber(redis.call('ZSCORE', KEYS[5], token))
    else
      redis.call('ZADD', KEYS[5], mode, token)
      place = tonumber(mode)
    end
    redis.call('PEXPIRE', KEYS[5], ARGV[6])
    redis.call('PEXPIRE', KEYS[6], ARGV[6])
  end
  if mode == 'check' and reader(token) then
    return not writer_waits(KEYS[5], KEYS[6], now)
  end
  local live, lapse = front(KEYS[5], KEYS[6], n, now)
  if mode == 'check' then
    return #live < n
  end
  for _, id in ipairs(live) do
    if id == token then
      return true
    end
  end
  if lapse then
    lapse_ahead = lapse - now + 1
  end
  return false
end
local function refused(why, detail)
  return {0, false, place, why, detail or false, lapse_ahead}
end
local function held()
  local r = refused('held')
  local rec = bounded_hash(KEYS[2])
  if type(rec) == 'table' and #rec > 0 then
    r[7] = rec
  end
  return r
end
local function dequeue()
  if mode ~= '' and mode ~= 'check' then
    redis.pcall('ZREM', KEYS[5], token)
    redis.pcall('HDEL', KEYS[6], token)
  end
end
"
    };
}

// What the nodes keep beside the lock for people (a holder's record, a
// reader's, a run's history entry) is read back cut to RECORD_CAP bytes:
// anyone who can write the lock's keys could otherwise make every reply, and
// redlock-run's memory, as large as they like. A hash cut short ends in the
// pair ('truncated', the cap), reading no more of it than that (HKEYS and
// HSTRLEN; under an ACL without them, HGETALL); a JSON record too long is
// answered as {"truncated":<its size>}, which says so and parses.
macro_rules! bounded_lua {
    (bounded_hash) => {
        "\
local function bounded_hash(k)
  local names = redis.pcall('HKEYS', k)
  if type(names) ~= 'table' or names.err then
    return redis.pcall('HGETALL', k)
  end
  local out, total = {}, 0
  for _, f in ipairs(names) do
    local n = redis.pcall('HSTRLEN', k, f)
    if type(n) ~= 'number' then
      return redis.pcall('HGETALL', k)
    end
    total = total + #f + n
    if total > 8192 then
      out[#out + 1] = 'truncated'
      out[#out + 1] = '8192'
      return out
    end
    out[#out + 1] = f
    out[#out + 1] = redis.call('HGET', k, f)
  end
  return out
end
"
    };
    (bounded_field) => {
        "\
local function bounded_field(k, f)
  local n = redis.pcall('HSTRLEN', k, f)
  if type(n) == 'number' and n > 8192 then
    return '{\"truncated\":' .. n .. '}'
  end
  return redis.pcall('HGET', k, f)
end
"
    };
    (bounded_json) => {
        "\
local function bounded_json(s)
  if type(s) == 'string' and #s > 8192 then
    return '{\"truncated\":' .. #s .. '}'
  end
  return s
end
"
    };
    (bounded_value) => {
        "\
local function bounded_value(s)
  if type(s) == 'string' and #s > 8192 then
    return string.sub(s, 1, 8192)
  end
  return s
end
"
    };
}

/// How much of a record (see `bounded_lua`) a reply may carry.
pub(crate) const RECORD_CAP: usize = 8192;

// The --fence counters, compared as 64-bit integers. A Lua number is a
// double, exact only up to 2^53: `tonumber` of two neighbouring counters
// above it can be equal, and a counter raised by such a comparison stops
// rising. So a counter stays a decimal string: `counter` gives its canonical
// form (no leading zeros) or nil for anything else, and `above` compares
// two canonical ones by length, then lexically, which for decimals without
// leading zeros is their order as integers.
macro_rules! counter_lua {
    () => {
        "\
local function counter(s)
  if type(s) ~= 'string' or not string.match(s, '^%d+$') then
    return nil
  end
  return (string.gsub(s, '^0+(%d)', '%1'))
end
local function above(a, b)
  if #a ~= #b then
    return #a > #b
  end
  return a > b
end
"
    };
}

// Every script touches the lock's keys only while the lock holds our token.
// Calls that only inform (the holder record, the PUBLISH that wakes waiters)
// go through pcall: an ACL that denies them must not cost a lock or a
// release. Keys are passed as KEYS (one hash slot, see `keys`), never spliced
// into the Lua text.

// What a script that wakes the queue's front calls.
macro_rules! waking_lua {
    () => {
        concat!(
            queue_lua!(now_ms),
            queue_lua!(reader),
            queue_lua!(front),
            queue_lua!(wake_front),
        )
    };
}

// What both acquires call (`gate_lua` among them): the queue's front, and
// the --limit holders, which a plain lock and a --limit lock exclude each
// other by.
macro_rules! acquire_lua {
    () => {
        concat!(
            queue_lua!(now_ms),
            queue_lua!(reader),
            queue_lua!(front),
            queue_lua!(writer_waits),
            slots_lua!(keep_for),
            slots_lua!(live),
            slots_lua!(slot_holders),
            slots_lua!(slot_limit),
            slots_lua!(hold_slot),
        )
    };
}

/// Takes the lock (KEYS[1]: the lock, or with --limit a slot): SET NX PX,
/// or, when it already holds our token (a retry after a lost reply), renews
/// it. In the same atomic step: writes the holder record (KEYS[2]) when
/// fields are given from ARGV[8], and reads the --fence counter when ARGV[3]
/// is '1': the larger of KEYS[3] and the previous layout's counter KEYS[10]
/// (`Keys::legacy_fence`, given only then), so that tokens keep rising
/// across the upgrade.
///
/// One name, one lock: without --limit (ARGV[4] empty) the lock is refused
/// while any --limit holder is live in KEYS[4] (`slots_lua`); with --limit N
/// (ARGV[4] is our entry, `<N>:<token>`) a slot is refused while the lock
/// itself (KEYS[7]) is held, and refused as a conflict (answer 2) while a
/// holder with another N is live, so that runs with different --limit values
/// never share the name. A slot taken adds our entry to KEYS[4]. Either is
/// refused while a --shared reader is live in KEYS[8] (records: KEYS[9]).
///
/// The queue (KEYS[5], KEYS[6]) as `gate_lua` says; a waiter leaves it when
/// it takes the lock.
///
/// The answer: {1} or {1, fence counter} when taken; else {0 (2 for the
/// conflict), false, our place's score or false, why ('held', 'plain',
/// 'slots', 'readers', 'queued', 'limit'), a number for it (waiters queued,
/// the other N, readers) or false, ms until the earliest place ahead of ours
/// lapses or false, and when another token holds the lock its holder record
/// (HGETALL of KEYS[2], under pcall), so that a busy run can say who holds it
/// without a request of its own}.
pub(super) const ACQUIRE: &str = concat!(
    acquire_lua!(),
    readers_lua!(live_readers),
    counter_lua!(),
    "local token, mode, n = ARGV[1], ARGV[5], tonumber(ARGV[7])\n",
    "local place, lapse_ahead = false, false\n",
    bounded_lua!(bounded_hash),
    gate_lua!(),
    "\
local value = redis.call('GET', KEYS[1])
local mine = value == token
if not mine then
  if mode ~= '' then
    local ok, ours = pcall(gate)
    if ok and not ours then
      if value then
        return held()
      end
      local q = redis.pcall('ZCARD', KEYS[5])
      return refused('queued', type(q) == 'number' and q or 0)
    end
  end
  -- Slot holders and readers are rare: one look for both sets first.
  local others = redis.pcall('EXISTS', KEYS[4], KEYS[8])
  if type(others) == 'number' and others == 0 and ARGV[4] == '' then
    -- Neither: a plain lock need not look closer.
  elseif ARGV[4] == '' then
    -- An ACL without the set's commands cannot take a slot either: a plain
    -- lock still works for it.
    local ok, holders = pcall(slot_holders, KEYS[4])
    if ok and #holders > 0 then
      return refused('slots', slot_limit(holders[1]))
    end
  else
    local holders = slot_holders(KEYS[4])
    if redis.call('EXISTS', KEYS[7]) == 1 then
      return refused('plain')
    end
    local ours = slot_limit(ARGV[4])
    for _, m in ipairs(holders) do
      if slot_limit(m) ~= ours then
        return {2, false, place, 'limit', slot_limit(m), false}
      end
    end
  end
  -- Likewise: an ACL that cannot read the readers could not have written one.
  if type(others) ~= 'number' or others > 0 then
    local ok, readers = pcall(live_readers, KEYS[8], KEYS[9])
    if ok and #readers > 0 then
      return refused('readers', #readers)
    end
  end
end
if mine then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif not redis.call('SET', KEYS[1], token, 'NX', 'PX', ARGV[2]) then
  return held()
end
if ARGV[4] ~= '' then
  hold_slot(KEYS[4], ARGV[4], tonumber(ARGV[2]), now_ms())
end
dequeue()
if #ARGV > 7 then
  redis.pcall('DEL', KEYS[2])
  redis.pcall('HSET', KEYS[2], unpack(ARGV, 8))
  redis.pcall('PEXPIRE', KEYS[2], ARGV[2])
end
if ARGV[3] == '1' then
  local fence = redis.call('GET', KEYS[3])
  local old = counter(redis.pcall('GET', KEYS[10]))
  if old and (not fence or above(old, counter(fence) or '0')) then
    fence = old
  end
  return {1, fence}
end
return {1}"
);

/// Takes a share of the lock for a --shared reader: our token's entry in
/// the readers (KEYS[7]) lapsing in ARGV[2] ms, and our record (ARGV[3], a
/// JSON object, when not empty) in their records (KEYS[3]). Granted only
/// while no writer holds the lock's key (KEYS[1]; refused as 'held' with its
/// record, KEYS[2]) and no --limit slot is held (KEYS[4]). An entry of ours
/// that is still live (a retry after a lost reply) is renewed without a
/// check: it excluded writers all along. A lapsed one is a new share, and
/// checked as such. The queue (KEYS[5], KEYS[6]) as `gate_lua` says, ARGV[5]
/// to ARGV[7] as for ACQUIRE. The answer as ACQUIRE's.
pub(super) const ACQUIRE_SHARED: &str = concat!(
    acquire_lua!(),
    readers_lua!(share_left),
    "local token, mode, n = ARGV[1], ARGV[5], tonumber(ARGV[7])\n",
    "local place, lapse_ahead = false, false\n",
    bounded_lua!(bounded_hash),
    gate_lua!(),
    "\
local ttl = tonumber(ARGV[2])
local now = now_ms()
local left = share_left(KEYS[7], token, now)
if left <= 0 then
  if left > -now then
    -- Ours, but lapsed: a new share, checked as one.
    redis.call('ZREM', KEYS[7], token)
    redis.pcall('HDEL', KEYS[3], token)
  end
  if mode ~= '' then
    local ok, ours = pcall(gate)
    if ok and not ours then
      if redis.call('EXISTS', KEYS[1]) == 1 then
        return held()
      end
      local q = redis.pcall('ZCARD', KEYS[5])
      return refused('queued', type(q) == 'number' and q or 0)
    end
  end
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return held()
  end
  local ok, holders = pcall(slot_holders, KEYS[4])
  if ok and #holders > 0 then
    return refused('slots', slot_limit(holders[1]))
  end
end
hold_slot(KEYS[7], token, ttl, now)
dequeue()
if ARGV[3] ~= '' then
  redis.pcall('HSET', KEYS[3], token, ARGV[3])
  pcall(keep_for, KEYS[3], ttl)
end
return {1}"
);

/// `status`: the --limit N that live holders of the lock's slots took
/// (KEYS[1], the largest); false when none.
pub(super) const LIMIT_OF: &str = concat!(
    queue_lua!(now_ms),
    slots_lua!(live),
    slots_lua!(slot_holders),
    slots_lua!(slot_limit),
    "\
local best = false
for _, m in ipairs(slot_holders(KEYS[1])) do
  local n = slot_limit(m)
  if n > 0 and (not best or n > best) then
    best = n
  end
end
return best"
);

/// A --once-per marker: SET NX PX, or renew it when it holds our token.
pub(super) const MARK: &str = "\
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return {0}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {1}";

/// Extends only our own lock (its record, and with --limit our entry among
/// the slot holders, KEYS[3], ARGV[3]); never re-creates one (see
/// `retake`). 1 extended, -1 no key here, 0 another token; a PEXPIRE the
/// node refuses is answered `PEXPIRE: <error>`.
pub(super) const EXTEND: &str = concat!(
    queue_lua!(now_ms),
    slots_lua!(keep_for),
    slots_lua!(hold_slot),
    "\
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.pcall('PEXPIRE', KEYS[2], ARGV[2])
  if ARGV[3] ~= '' then
    hold_slot(KEYS[3], ARGV[3], tonumber(ARGV[2]), now_ms())
  end
  local e = redis.pcall('PEXPIRE', KEYS[1], ARGV[2])
  if type(e) == 'table' and e.err then
    return 'PEXPIRE: ' .. e.err
  end
  return 1
elseif v == false then
  return -1
end
return 0"
);

/// A reader's heartbeat: renews our entry among the readers (KEYS[1]) for
/// ARGV[2] ms while it is live, and the records' hash (KEYS[2]) with it. A
/// lapsed or missing entry is never re-created here: a writer may have taken
/// the node since (see `retake`). 1 extended, -1 no share here.
pub(super) const EXTEND_SHARED: &str = concat!(
    queue_lua!(now_ms),
    slots_lua!(keep_for),
    slots_lua!(hold_slot),
    readers_lua!(share_left),
    "\
local ttl, now = tonumber(ARGV[2]), now_ms()
if share_left(KEYS[1], ARGV[1], now) > 0 then
  hold_slot(KEYS[1], ARGV[1], ttl, now)
  pcall(keep_for, KEYS[2], ttl)
  return 1
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.pcall('HDEL', KEYS[2], ARGV[1])
return -1"
);

/// A reader's share back on a node that lost it (restarted empty, expired
/// early) while a quorum still holds it for us: our entry among the readers
/// (KEYS[3]) and our record (ARGV[3], KEYS[4]), by the same rule as a new
/// share: not while the lock's key (KEYS[1]) or a --limit slot (KEYS[2]) is
/// held there. 1 taken back, 0 refused.
pub(super) const RETAKE_SHARED: &str = concat!(
    queue_lua!(now_ms),
    slots_lua!(keep_for),
    slots_lua!(live),
    slots_lua!(slot_holders),
    slots_lua!(hold_slot),
    "\
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local ok, holders = pcall(slot_holders, KEYS[2])
if ok and #holders > 0 then
  return 0
end
local ttl = tonumber(ARGV[2])
hold_slot(KEYS[3], ARGV[1], ttl, now_ms())
if ARGV[3] ~= '' then
  redis.pcall('HSET', KEYS[4], ARGV[1], ARGV[3])
  pcall(keep_for, KEYS[4], ttl)
end
return 1"
);

/// With --limit: puts our slot (KEYS[1]) back on a node that lost it, with
/// our entry among the slot holders (KEYS[2], ARGV[3]). 1 taken back, 0
/// another token holds it.
pub(super) const RETAKE_SLOT: &str = concat!(
    queue_lua!(now_ms),
    slots_lua!(keep_for),
    slots_lua!(hold_slot),
    "\
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
hold_slot(KEYS[2], ARGV[3], tonumber(ARGV[2]), now_ms())
return 1"
);

// RELEASE's text, also inside RELEASE_RECORDING (after queue_lua!). The
// wrapper names the slot holders' set and our entry there (`slots_key`,
// `member`; an empty member without --limit). A DEL the node refuses (an
// ACL without it) is answered as `DEL: <error>`, naming the command, which
// Redis before 7.2 does not in a script's error.
macro_rules! release {
    () => {
        "\
local v = redis.call('GET', KEYS[1])
local r = 0
if v == ARGV[1] then
  local d = redis.pcall('DEL', KEYS[1], KEYS[2])
  if type(d) == 'table' and d.err then
    return 'DEL: ' .. d.err
  end
  r = 1
elseif v == false then
  r = -1
end
if member ~= '' then
  redis.pcall('ZREM', slots_key, member)
end
if ARGV[2] ~= '' then
  if r ~= 0 then
    redis.pcall('PUBLISH', ARGV[2], '')
  end
  pcall(function()
    if redis.call('EXISTS', KEYS[3]) == 1 then
      redis.call('ZREM', KEYS[3], ARGV[1])
      redis.call('HDEL', KEYS[4], ARGV[1])
      if r ~= 0 then
        wake_front(KEYS[3], KEYS[4], ARGV[2], tonumber(ARGV[3]))
      end
    end
  end)
end
return r"
    };
}

/// Deletes only our own lock, then wakes the waiters: those at the front of
/// the queue (KEYS[3], KEYS[4]; ARGV[3] of them) and those subscribed to
/// ARGV[2] itself, in the same script, so that no waiter can miss it. An
/// empty ARGV[2] (undoing a failed attempt) wakes nobody and keeps our place
/// in the queue; a real release also drops our place wherever it is left (a
/// node that did not grant us the lock still has it). With --limit our entry
/// (ARGV[4]) leaves the slot holders (KEYS[5]). -1 tells the log the key had
/// already gone.
pub(super) const RELEASE: &str = concat!(
    waking_lua!(),
    "local slots_key, member = KEYS[5], ARGV[4]\n",
    release!()
);

// RELEASE_SHARED's text, also inside RELEASE_SHARED_RECORDING (after
// queue_lua! and readers_lua!).
macro_rules! release_shared {
    () => {
        "\
local r = -1
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  r = 1
end
redis.pcall('HDEL', KEYS[2], ARGV[1])
if ARGV[2] ~= '' then
  local ok, left = pcall(live_readers, KEYS[1], KEYS[2])
  local last = not ok or #left == 0
  if last then
    redis.pcall('PUBLISH', ARGV[2], '')
  end
  pcall(function()
    if redis.call('EXISTS', KEYS[3]) == 1 then
      redis.call('ZREM', KEYS[3], ARGV[1])
      redis.call('HDEL', KEYS[4], ARGV[1])
      if last then
        wake_front(KEYS[3], KEYS[4], ARGV[2], tonumber(ARGV[3]))
      end
    end
  end)
end
return r"
    };
}

/// A reader's release: drops our entry among the readers (KEYS[1]) and our
/// record (KEYS[2]). With a channel (ARGV[2], not for undoing a failed
/// attempt) the last reader to leave wakes the waiters, as a release of the
/// lock does (the queue's front, KEYS[3] and KEYS[4], ARGV[3] of them, and
/// the channel's own listeners), and our place in the queue goes. 1 dropped,
/// -1 already gone.
pub(super) const RELEASE_SHARED: &str = concat!(
    waking_lua!(),
    slots_lua!(live),
    readers_lua!(live_readers),
    release_shared!()
);

/// Drops our place in the queue, waking nobody: we hold the lock, taken on
/// a quorum of other nodes, and this node should not keep us at its front.
pub(super) const FORGET: &str = "\
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return 1";

/// A waiter gives up its place (its --wait ran out, or a signal ended it),
/// and the front of the queue, which may now include someone new, is woken.
pub(super) const LEAVE: &str = concat!(
    waking_lua!(),
    queue_lua!(wake),
    "\
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
pcall(wake, KEYS[1], KEYS[2], ARGV[2], tonumber(ARGV[3]))
return 1"
);

// HOLD's text, also inside HOLD_RECORDING (after queue_lua! and
// slots_lua!, with `slots_key` and `member` as for release!).
macro_rules! hold {
    () => {
        "\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.pcall('HSET', KEYS[2], 'exited_ms', ARGV[3], 'exit_code', ARGV[4])
redis.pcall('PEXPIRE', KEYS[2], ARGV[2])
if member ~= '' then
  hold_slot(slots_key, member, tonumber(ARGV[2]), now_ms())
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1"
    };
}

/// Leaves our lock to expire after ARGV[2] ms (--hold), saying so in its
/// record: the command exited (ARGV[3] ms) with status ARGV[4]. With
/// --limit our entry among the slot holders (KEYS[3], ARGV[5]) lapses with it.
pub(super) const HOLD: &str = concat!(
    queue_lua!(now_ms),
    slots_lua!(keep_for),
    slots_lua!(hold_slot),
    "local slots_key, member = KEYS[3], ARGV[5]\n",
    hold!()
);

// HOLD_SHARED's text, also inside HOLD_SHARED_RECORDING.
macro_rules! hold_shared {
    () => {
        "\
local left, now = tonumber(ARGV[2]), now_ms()
if share_left(KEYS[1], ARGV[1], now) <= 0 then
  return 0
end
hold_slot(KEYS[1], ARGV[1], left, now)
pcall(keep_for, KEYS[2], left)
return 1"
    };
}

/// --hold for a reader: our live entry among the readers (KEYS[1]) lapses
/// ARGV[2] ms from now (the records' hash, KEYS[2], lives as long). 1 done,
/// 0 no live share here.
pub(super) const HOLD_SHARED: &str = concat!(
    queue_lua!(now_ms),
    slots_lua!(keep_for),
    slots_lua!(hold_slot),
    readers_lua!(share_left),
    hold_shared!()
);

/// `unlock --token`: deletes the lock where its token starts with ARGV[1]
/// (the whole token, or the prefix `status` shows), and wakes waiters; or,
/// for a reader's token, that reader's share among the readers (KEYS[5],
/// records KEYS[6]), waking waiters once no reader is left. A plain byte
/// comparison: no Lua patterns. 1 deleted, 0 held by another token, -1 no
/// such lock here.
pub(super) const UNLOCK: &str = concat!(
    waking_lua!(),
    queue_lua!(wake),
    slots_lua!(live),
    readers_lua!(live_readers),
    "\
local function ours(v)
  return string.sub(v, 1, #ARGV[1]) == ARGV[1]
end
local v = redis.call('GET', KEYS[1])
if v and ours(v) then
  redis.call('DEL', KEYS[1])
  redis.pcall('DEL', KEYS[2])
  redis.pcall('PUBLISH', ARGV[2], '')
  pcall(wake, KEYS[3], KEYS[4], ARGV[2], tonumber(ARGV[3]))
  return 1
end
local readers = live_readers(KEYS[5], KEYS[6])
for _, m in ipairs(readers) do
  if ours(m) then
    redis.call('ZREM', KEYS[5], m)
    redis.pcall('HDEL', KEYS[6], m)
    if #readers == 1 then
      redis.pcall('PUBLISH', ARGV[2], '')
      pcall(wake, KEYS[3], KEYS[4], ARGV[2], tonumber(ARGV[3]))
    end
    return 1
  end
end
if v or #readers > 0 then
  return 0
end
return -1"
);

/// Deletes a key only while it holds our token (undoing a --once-per
/// marker); a DEL the node refuses is answered `DEL: <error>`.
pub(super) const DROP: &str = "\
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local d = redis.pcall('DEL', KEYS[1])
  if type(d) == 'table' and d.err then
    return 'DEL: ' .. d.err
  end
  return d
end
return 0";

/// --fence, second phase: raise the counter to ARGV[2] (never lower it), only
/// while the lock holds our token here. Compared as an integer (see
/// `counter_lua`): as doubles, 2^53 + 1 is not above 2^53 and the counter
/// would stop rising.
pub(super) const FENCE: &str = concat!(
    counter_lua!(),
    "\
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local c = counter(redis.call('GET', KEYS[2]) or '0') or '0'
if above(ARGV[2], c) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1"
);

/// `unlock --force`: deletes whatever holds the lock (its key and record,
/// KEYS[1] and KEYS[2], and every reader's share, KEYS[5] and KEYS[6]), and
/// wakes waiters. 1 if anything held it.
pub(super) const FORCE: &str = concat!(
    waking_lua!(),
    queue_lua!(wake),
    "\
local n = redis.call('DEL', KEYS[1])
redis.pcall('DEL', KEYS[2])
if redis.call('DEL', KEYS[5]) == 1 then
  n = 1
end
redis.pcall('DEL', KEYS[6])
if n == 1 then
  redis.pcall('PUBLISH', ARGV[1], '')
  pcall(wake, KEYS[3], KEYS[4], ARGV[1], tonumber(ARGV[2]))
end
return n"
);

/// `status`: the lock's value, its PTTL, its holder record, how many
/// waiters are queued, and the live readers (KEYS[4], records KEYS[5]) as a
/// flat list of token, ms left, record (a JSON object or false), in one step.
/// A script rather than a pipeline, which a Cluster connection cannot route.
pub(super) const INSPECT: &str = concat!(
    bounded_lua!(bounded_hash), bounded_lua!(bounded_field), bounded_lua!(bounded_value),
    queue_lua!(now_ms),
    slots_lua!(live),
    readers_lua!(live_readers), readers_lua!(share_left),
    "\
local q = redis.pcall('ZCARD', KEYS[3])
if type(q) ~= 'number' then
  q = 0
end
local shares = {}
local ok, readers = pcall(live_readers, KEYS[4], KEYS[5])
if ok then
  local now = now_ms()
  for _, m in ipairs(readers) do
    local rec = bounded_field(KEYS[5], m)
    if type(rec) ~= 'string' then
      rec = false
    end
    shares[#shares + 1] = m
    shares[#shares + 1] = share_left(KEYS[4], m, now)
    shares[#shares + 1] = rec
  end
end
return {bounded_value(redis.call('GET', KEYS[1])), redis.call('PTTL', KEYS[1]), bounded_hash(KEYS[2]), q, shares}"
);

/// `status --keys`: {key, TYPE, PTTL} of each of KEYS that exists (SCAN
/// found them a moment ago; one may have expired since).
pub(super) const DESCRIBE: &str = "\
local out = {}
for _, k in ipairs(KEYS) do
  local t = redis.call('TYPE', k)['ok']
  if t ~= 'none' then
    out[#out + 1] = {k, t, redis.call('PTTL', k)}
  end
end
return out";

/// `status`: {key, value, PTTL} of each of KEYS (--once-per markers SCAN
/// found a moment ago) that still exists.
pub(super) const MARKERS: &str = "\
local out = {}
for _, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  if v then
    out[#out + 1] = {k, string.sub(v, 1, 8192), redis.call('PTTL', k)}
  end
end
return out";

/// `history`: the newest ARGV[1] entries of the history (KEYS[1]), each
/// as `bounded_lua` reads a record.
pub(super) const HISTORY: &str = concat!(
    bounded_lua!(bounded_json),
    "\
local out = redis.call('LRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
for i, e in ipairs(out) do
  out[i] = bounded_json(e)
end
return out"
);

/// `forget`: deletes every key of a lock that SCAN found on this node, unless
/// the lock is in use, deciding and deleting in one step. KEYS[1] the lock,
/// [2] its holder record, [3] the slot holders, [4] the queue, [5] its
/// waiters, [6] the readers, [7] their records; then ARGV[2] pairs of a slot key and its holder record; then
/// every other key found. ARGV[1]: 'check' only says whether the lock is in
/// use, deleting nothing; 'delete' deletes unless it is; 'force' deletes the
/// lock too, in use or not, and wakes the queue's live waiters on ARGV[3]
/// (they were queued for a lock that is gone).
///
/// In use: the lock is held (KEYS[1] exists), a slot is held (a slot key
/// exists, or the slot holders have a live entry), a reader holds a share,
/// or waiters whose places have not lapsed are queued.
///
/// The answer: {1 deleted or 0 refused, why in use ('held', 'slot',
/// 'shared', 'queued') or false, the holder's token or false, its holder
/// record (a flat array; a reader's is {'json', its JSON object}), live
/// waiters, keys deleted}.
pub(super) const FORGET_LOCK: &str = concat!(
    bounded_lua!(bounded_hash),
    bounded_lua!(bounded_field),
    bounded_lua!(bounded_value),
    waking_lua!(),
    slots_lua!(live),
    slots_lua!(slot_holders),
    readers_lua!(live_readers),
    "\
local force, pairs = ARGV[1] == 'force', tonumber(ARGV[2])
local function text(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'string' then
    return bounded_value(v)
  end
  return false
end
local function record(k)
  local r = bounded_hash(k)
  if type(r) == 'table' and r.err == nil then
    return r
  end
  return {}
end
local why, token, rec = false, false, {}
if redis.call('EXISTS', KEYS[1]) == 1 then
  why, token, rec = 'held', text(KEYS[1]), record(KEYS[2])
end
local i = 0
while not why and i < pairs do
  local slot = KEYS[8 + 2 * i]
  if redis.call('EXISTS', slot) == 1 then
    why, token, rec = 'slot', text(slot), record(KEYS[9 + 2 * i])
  end
  i = i + 1
end
if not why then
  local ok, live = pcall(slot_holders, KEYS[3])
  if ok and #live > 0 then
    why, token = 'slot', string.match(live[1], '^%d+:(.*)$') or false
  end
end
if not why then
  local ok, live = pcall(live_readers, KEYS[6], KEYS[7])
  if ok and #live > 0 then
    why, token = 'shared', live[1]
    local r = bounded_field(KEYS[7], live[1])
    if type(r) == 'string' then
      rec = {'json', r}
    end
  end
end
local waiting = 0
pcall(function()
  if redis.call('EXISTS', KEYS[4]) == 1 then
    local now = now_ms()
    for _, id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
      if tonumber(redis.call('HGET', KEYS[5], id) or '0') >= now then
        waiting = waiting + 1
      end
    end
  end
end)
if not force and (why or waiting > 0) then
  return {0, why or 'queued', token, rec, waiting, 0}
end
if ARGV[1] == 'check' then
  return {1, why, token, rec, waiting, 0}
end
if waiting > 0 then
  pcall(wake_front, KEYS[4], KEYS[5], ARGV[3], waiting)
end
local first, deleted = 2, 0
if force then
  first = 1
end
for k = first, #KEYS do
  deleted = deleted + redis.call('DEL', KEYS[k])
end
if why == 'held' then
  redis.pcall('PUBLISH', ARGV[3], '')
end
return {1, why, token, rec, waiting, deleted}"
);

// The run history (see `lock::end`). A run's record goes out in the same
// script as its release or hold where the lock was ours, so recording costs
// no request of its own; the history key is a helper key, in the lock's slot.

/// Lua: `record(key, entry, cap, ttl)` pushes `entry` onto the list `key`
/// unless it is the newest entry there already (the same request repeated
/// after EINTR), keeps the newest `cap` entries, and sets the list to expire
/// in `ttl` ms. Returns 1, or `'<COMMAND>: <error>'` for the first step that
/// failed: through pcall, so that a refused append (an ACL without LPUSH, a
/// server out of memory) leaves the release or hold beside it standing, and
/// as text, since an error nested in a reply would fail the whole reply in
/// the client.
macro_rules! record {
    () => {
        "\
local function record(key, entry, cap, ttl)
  local function failed(r)
    return type(r) == 'table' and r.err ~= nil
  end
  local step, r = 'LINDEX', redis.pcall('LINDEX', key, 0)
  if not failed(r) and r ~= entry then
    step, r = 'LPUSH', redis.pcall('LPUSH', key, entry)
  end
  if not failed(r) then
    step, r = 'LTRIM', redis.pcall('LTRIM', key, 0, tonumber(cap) - 1)
  end
  if not failed(r) then
    step, r = 'PEXPIRE', redis.pcall('PEXPIRE', key, ttl)
  end
  if failed(r) then
    return step .. ': ' .. r.err
  end
  return 1
end
"
    };
}

/// Appends ARGV[1] to the history KEYS[1], keeping ARGV[2] entries and
/// expiring in ARGV[3] ms, on a node the lock was not on: `record`'s answer.
pub(super) const APPEND: &str = concat!(
    record!(),
    "return record(KEYS[1], ARGV[1], ARGV[2], ARGV[3])"
);

/// RELEASE (KEYS[1..4], ARGV[1..3]), then the append of ARGV[4] to the
/// history KEYS[5] (ARGV[5], ARGV[6] as in APPEND): {RELEASE's answer,
/// `record`'s}. With --limit, the slot holders are KEYS[6] and our entry
/// ARGV[7].
pub(super) const RELEASE_RECORDING: &str = concat!(
    waking_lua!(),
    record!(),
    "local slots_key, member = KEYS[6], ARGV[7]\n",
    "local function release()\n",
    release!(),
    "
end
local released = release()
local recorded = record(KEYS[5], ARGV[4], ARGV[5], ARGV[6])
return {released, recorded}"
);

/// HOLD (KEYS[1..2], ARGV[1..4]), then the append of ARGV[5] to the history
/// KEYS[3] (ARGV[6], ARGV[7] as in APPEND): {HOLD's answer, `record`'s}.
/// With --limit, the slot holders are KEYS[4] and our entry ARGV[8].
pub(super) const HOLD_RECORDING: &str = concat!(
    queue_lua!(now_ms),
    slots_lua!(keep_for),
    slots_lua!(hold_slot),
    record!(),
    "local slots_key, member = KEYS[4], ARGV[8]\n",
    "local function hold()\n",
    hold!(),
    "
end
local held = hold()
local recorded = record(KEYS[3], ARGV[5], ARGV[6], ARGV[7])
return {held, recorded}"
);

/// RELEASE_SHARED (KEYS[1..4], ARGV[1..3]), then the append of ARGV[4] to
/// the history KEYS[5] (ARGV[5], ARGV[6] as in APPEND): {RELEASE_SHARED's
/// answer, `record`'s}.
pub(super) const RELEASE_SHARED_RECORDING: &str = concat!(
    waking_lua!(),
    slots_lua!(live),
    readers_lua!(live_readers),
    record!(),
    "local function release()\n",
    release_shared!(),
    "
end
local released = release()
local recorded = record(KEYS[5], ARGV[4], ARGV[5], ARGV[6])
return {released, recorded}"
);

/// HOLD_SHARED (KEYS[1..2], ARGV[1..2]), then the append of ARGV[3] to the
/// history KEYS[3] (ARGV[4], ARGV[5] as in APPEND): {HOLD_SHARED's answer,
/// `record`'s}.
pub(super) const HOLD_SHARED_RECORDING: &str = concat!(
    queue_lua!(now_ms),
    slots_lua!(keep_for),
    slots_lua!(hold_slot),
    readers_lua!(share_left),
    record!(),
    "local function hold()\n",
    hold_shared!(),
    "
end
local held = hold()
local recorded = record(KEYS[3], ARGV[3], ARGV[4], ARGV[5])
return {held, recorded}"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_that_reads_a_record_back_cuts_it_at_the_cap() {
        let cap = format!("> {RECORD_CAP} then");
        for script in [ACQUIRE, ACQUIRE_SHARED, INSPECT, FORGET_LOCK, HISTORY] {
            assert!(script.contains(&cap), "{script}");
        }
    }

    /// Where `script` calls `f` (`f(...)`, or `pcall(f, ...)`), its
    /// definition aside.
    fn calls(script: &str, f: &str) -> bool {
        let word = |i: usize| {
            !script[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                && !script[..i].ends_with("local function ")
        };
        script.match_indices(&format!("{f}(")).any(|(i, _)| word(i))
            || script.contains(&format!("pcall({f},"))
            || script.contains(&format!("pcall({f})"))
    }

    /// Each script carries the functions it calls and no other: what a
    /// script carries goes over the wire, and through the server's hash, on
    /// every request.
    #[test]
    fn every_script_defines_what_it_calls_and_nothing_more() {
        let scripts = [
            ("ACQUIRE", ACQUIRE),
            ("ACQUIRE_SHARED", ACQUIRE_SHARED),
            ("LIMIT_OF", LIMIT_OF),
            ("MARK", MARK),
            ("EXTEND", EXTEND),
            ("EXTEND_SHARED", EXTEND_SHARED),
            ("RETAKE_SHARED", RETAKE_SHARED),
            ("RETAKE_SLOT", RETAKE_SLOT),
            ("RELEASE", RELEASE),
            ("RELEASE_SHARED", RELEASE_SHARED),
            ("FORGET", FORGET),
            ("LEAVE", LEAVE),
            ("HOLD", HOLD),
            ("HOLD_SHARED", HOLD_SHARED),
            ("UNLOCK", UNLOCK),
            ("DROP", DROP),
            ("FENCE", FENCE),
            ("FORCE", FORCE),
            ("INSPECT", INSPECT),
            ("DESCRIBE", DESCRIBE),
            ("MARKERS", MARKERS),
            ("HISTORY", HISTORY),
            ("FORGET_LOCK", FORGET_LOCK),
            ("APPEND", APPEND),
            ("RELEASE_RECORDING", RELEASE_RECORDING),
            ("HOLD_RECORDING", HOLD_RECORDING),
            ("RELEASE_SHARED_RECORDING", RELEASE_SHARED_RECORDING),
            ("HOLD_SHARED_RECORDING", HOLD_SHARED_RECORDING),
        ];
        let defined = |script: &'static str| -> Vec<&'static str> {
            script
                .match_indices("local function ")
                .map(|(at, m)| {
                    let rest = &script[at + m.len()..];
                    &rest[..rest.find('(').unwrap_or(0)]
                })
                .collect()
        };
        let helpers: Vec<&str> = scripts.iter().flat_map(|(_, s)| defined(s)).collect();
        let mut wrong = Vec::new();
        for (name, script) in scripts {
            let own = defined(script);
            for f in &own {
                if !calls(script, f) {
                    wrong.push(format!("{name} never calls {f}"));
                }
            }
            for f in &helpers {
                if calls(script, f) && !own.contains(f) {
                    wrong.push(format!("{name} calls {f} without it"));
                }
            }
        }
        assert!(wrong.is_empty(), "{wrong:?}");
    }
}
