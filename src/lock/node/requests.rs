//! The lock's requests, each a command for a node and the typed answer
//! read from its reply. Every one of them goes to a node the same way (see
//! `state`); here is only what each asks and what its answer means.
//!
//! Plain EVAL rather than EVALSHA: a once-per-run command would pay a
//! NOSCRIPT round trip and a SCRIPT LOAD on every fresh node, and the
//! scripts are small.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use super::error::{self, NodeError};
use super::scripts::*;
use super::{
    Extension, Forget, Forgotten, Granted, InUse, Inspection, KeyInfo, KeySet, Queue, Refusal,
    Released, Share, millis,
};
use crate::lock::end::{Ended, Ending, Finish, HISTORY_CAP, HISTORY_TTL};
use crate::lock::redlock::Answer;

/// A request for the nodes of a round: what it asks of each, and what its
/// answer is.
pub(crate) trait Request: Send + Sync {
    type Answer: Send;

    /// What node `node` is asked; None when it is asked nothing.
    fn command(&self, node: usize) -> Option<Cmd>;

    /// Whether nodes `a` and `b` are asked the same command.
    fn asks_alike(&self, _a: usize, _b: usize) -> bool {
        false
    }

    /// A key of the request: its keys share this one's hash slot, which
    /// decides where a Cluster runs it.
    fn key(&self) -> &[u8];

    /// Whether it may change the lock on `node`: with `--replicas N` it is
    /// then followed by a WAIT for N replicas.
    fn writes(&self) -> bool {
        false
    }

    /// Whether its reply `v` says it wrote (the WAIT's count matters then).
    fn wrote(&self, _node: usize, _v: &Value) -> bool {
        false
    }

    /// A Sentinel group's sentinels are asked where the primary is first
    /// (see `Group` in `state`): an extension must not renew a lock on a
    /// server that was just demoted.
    fn recheck(&self) -> bool {
        false
    }

    /// Whether it is the last word on what this run asked the node before
    /// (a release, an undo, the end of a run): what was asked before and is
    /// not written yet is withdrawn, and this goes out at once.
    fn last_word(&self) -> bool {
        false
    }

    /// The answer of node `node` (named `name`) from its reply.
    fn decode(&self, node: usize, v: Value, name: &str) -> Result<Self::Answer, NodeError>;

    /// Whether its write is the node's vote for the lock (an acquire, an
    /// extension, a retake, a --once-per marker, a fencing token): one that
    /// counts only from a node that will remember it (see
    /// `Node::uncounted`), and that --durable waits to see on disk.
    fn votes(&self) -> bool {
        false
    }

    /// Whether it keeps the lock up (an extension, a release, an undo, a
    /// clean-up): a refusal of it is said as one (see `lock::refused`), not
    /// among the node's failures as well.
    fn upkeep(&self) -> bool {
        false
    }

    /// The write landed but does not count (too few replicas acknowledged
    /// it, or the node may forget it): by default it fails, and the node
    /// does not count.
    fn uncounted(&self, _answer: Self::Answer, e: NodeError) -> Result<Self::Answer, NodeError> {
        Err(e)
    }
}

fn eval(script: &str, keys: &[&[u8]]) -> Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len());
    for k in keys {
        cmd.arg(*k);
    }
    cmd
}

/// An integer reply among `ok`, or unexpected; a script's `COMMAND: error`
/// (a step the node refused, see `scripts`) is that error.
fn int(v: &Value, what: &str, name: &str) -> Result<i64, NodeError> {
    match v {
        Value::Int(n) => Ok(*n),
        Value::BulkString(b) if names_a_step(b) => {
            Err(error::script_error(name, &String::from_utf8_lossy(b)))
        }
        other => Err(error::unexpected(name, what, other)),
    }
}

/// `DEL: ...`, `PEXPIRE: ...`: a script's word for a step the node refused.
fn names_a_step(text: &[u8]) -> bool {
    text.iter()
        .position(|&b| b == b':')
        .is_some_and(|i| i > 0 && text[..i].iter().all(|b| b.is_ascii_uppercase()))
}

/// Takes `key_set.lock` for `token` (see ACQUIRE): with the holder record in
/// the same script, and with `fence` the counter read in it.
pub(crate) struct Acquire {
    pub key_set: Arc<KeySet>,
    pub token: Arc<str>,
    pub ttl: Duration,
    pub record: Vec<(&'static str, String)>,
    pub fence: bool,
    pub queue: Queue,
}

impl Request for Acquire {
    type Answer = Granted;

    fn asks_alike(&self, _: usize, _: usize) -> bool {
        true
    }

    fn command(&self, _: usize) -> Option<Cmd> {
        let b = &self.key_set;
        let mut cmd;
        if b.shared {
            cmd = eval(
                ACQUIRE_SHARED,
                &[
                    &b.main,
                    &b.holder,
                    &b.reader_records,
                    &b.slots,
                    &b.queue,
                    &b.waiters,
                    &b.readers,
                ],
            );
            cmd.arg(&*self.token)
                .arg(millis(self.ttl))
                .arg(crate::lock::record::share(&self.record))
                .arg("");
        } else {
            let mut keys: Vec<&[u8]> = vec![
                &b.lock,
                &b.holder,
                &b.fence,
                &b.slots,
                &b.queue,
                &b.waiters,
                &b.main,
                &b.readers,
                &b.reader_records,
            ];
            // The previous layout's counter only where it is read: an ACL
            // that names the lock's keys one by one need not name it.
            if self.fence {
                keys.push(&b.legacy_fence);
            }
            cmd = eval(ACQUIRE, &keys);
            cmd.arg(&*self.token)
                .arg(millis(self.ttl))
                .arg(u8::from(self.fence))
                .arg(b.member(&self.token));
        }
        match &self.queue {
            Queue::Ignore => cmd.arg("").arg(0),
            Queue::Check => cmd.arg("check").arg(0),
            Queue::Join {
                ticket: None,
                lapse,
            } => cmd.arg("join").arg(millis(*lapse)),
            Queue::Join {
                ticket: Some(t),
                lapse,
            } => cmd.arg(t).arg(millis(*lapse)),
        };
        cmd.arg(b.front());
        // A reader's record went as one JSON object above.
        if !b.shared {
            for (k, v) in &self.record {
                cmd.arg(*k).arg(v);
            }
        }
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn writes(&self) -> bool {
        true
    }

    fn votes(&self) -> bool {
        true
    }

    fn wrote(&self, _: usize, v: &Value) -> bool {
        granted(v)
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Granted, NodeError> {
        take(v, self.fence, name)
    }
}

/// Sets a --once-per marker (idempotent for the same token).
pub(crate) struct Mark {
    pub marker: Vec<u8>,
    pub token: Arc<str>,
    pub ttl: Duration,
}

impl Request for Mark {
    type Answer = Granted;

    fn command(&self, _: usize) -> Option<Cmd> {
        let mut cmd = eval(MARK, &[&self.marker]);
        cmd.arg(&*self.token).arg(millis(self.ttl));
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.marker
    }

    fn writes(&self) -> bool {
        true
    }

    fn votes(&self) -> bool {
        true
    }

    fn wrote(&self, _: usize, v: &Value) -> bool {
        granted(v)
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Granted, NodeError> {
        take(v, false, name)
    }
}

fn granted(v: &Value) -> bool {
    matches!(v, Value::Array(parts) if parts.first() == Some(&Value::Int(1)))
}

/// An acquire script's answer: granted or why not, with the fence counter,
/// the waiter's place and the holder's record.
fn take(reply: Value, fence: bool, name: &str) -> Result<Granted, NodeError> {
    let bad = |v: &Value| error::unexpected(name, "acquire script", v);
    let Value::Array(parts) = &reply else {
        return Err(bad(&reply));
    };
    let answer = match parts.first() {
        Some(Value::Int(1)) => Answer::Granted,
        Some(Value::Int(0 | 2)) => Answer::Refused,
        _ => return Err(bad(&reply)),
    };
    let fence = match (fence, answer, parts.get(1)) {
        (false, _, _) | (_, Answer::Refused, _) => None,
        (true, _, None | Some(Value::Nil)) => Some(0),
        // The counter's decimal string, parsed exactly: never through a
        // double, which is exact only up to 2^53.
        (true, _, Some(Value::BulkString(b))) => Some(
            std::str::from_utf8(b)
                .ok()
                .and_then(|t| t.parse::<u64>().ok())
                .ok_or_else(|| bad(&reply))?,
        ),
        (true, _, Some(_)) => return Err(bad(&reply)),
    };
    let int = |i: usize| match parts.get(i) {
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        _ => None,
    };
    let refusal = match (answer, parts.get(3)) {
        (Answer::Refused, Some(Value::BulkString(why))) => {
            let n = int(4).unwrap_or(0);
            let small = u32::try_from(n).unwrap_or(u32::MAX);
            Some(match why.as_slice() {
                b"plain" => Refusal::Plain,
                b"slots" => Refusal::Slots(small),
                b"readers" => Refusal::Readers(small),
                b"queued" => Refusal::Queued(n),
                b"limit" => Refusal::Limit(small),
                _ => Refusal::Held,
            })
        }
        (Answer::Refused, _) => Some(Refusal::Held),
        _ => None,
    };
    Ok(Granted {
        answer,
        fence,
        refusal,
        place: int(2),
        lapse_ahead: int(5).map(Duration::from_millis),
        holder: match (refusal, parts.get(6)) {
            (Some(Refusal::Held), Some(Value::Array(fields))) => pairs(fields),
            _ => Vec::new(),
        },
    })
}

/// Compare-and-PEXPIRE (the record too): `NotOurs` when the key holds
/// another token, `Absent` when it is gone.
pub(crate) struct Extend {
    pub key_set: Arc<KeySet>,
    pub token: Arc<str>,
    pub ttl: Duration,
}

impl Request for Extend {
    type Answer = Extension;

    fn upkeep(&self) -> bool {
        true
    }

    fn command(&self, _: usize) -> Option<Cmd> {
        let b = &self.key_set;
        let mut cmd;
        if b.shared {
            cmd = eval(EXTEND_SHARED, &[&b.readers, &b.reader_records]);
            cmd.arg(&*self.token).arg(millis(self.ttl));
        } else {
            cmd = eval(EXTEND, &[&b.lock, &b.holder, b.entries()]);
            cmd.arg(&*self.token)
                .arg(millis(self.ttl))
                .arg(b.member(&self.token));
        }
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn writes(&self) -> bool {
        true
    }

    fn votes(&self) -> bool {
        true
    }

    fn wrote(&self, _: usize, v: &Value) -> bool {
        *v == Value::Int(1)
    }

    fn recheck(&self) -> bool {
        true
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Extension, NodeError> {
        match int(&v, "extend script", name)? {
            1 => Ok(Extension::Extended),
            -1 => Ok(Extension::Absent),
            0 => Ok(Extension::NotOurs),
            _ => Err(error::unexpected(name, "extend script", &v)),
        }
    }
}

/// `SET NX PX` of our token on a node that lost the key (restarted empty,
/// or expired early by its clock) while a quorum still holds it for us:
/// so that losses spread over a long run do not add up. Only ever sent
/// within the validity the extension round just won. With --limit, a
/// script: the slot goes back with our entry among the slot holders, which
/// keeps plain runs away; a reader's share goes back the same way.
pub(crate) struct Retake {
    pub key_set: Arc<KeySet>,
    pub token: Arc<str>,
    pub ttl: Duration,
    pub record: Arc<[(&'static str, String)]>,
}

impl Request for Retake {
    type Answer = bool;

    fn command(&self, _: usize) -> Option<Cmd> {
        let b = &self.key_set;
        let (token, ttl) = (&*self.token, millis(self.ttl));
        Some(if b.shared {
            let mut cmd = eval(
                RETAKE_SHARED,
                &[&b.main, &b.slots, &b.readers, &b.reader_records],
            );
            cmd.arg(token)
                .arg(ttl)
                .arg(crate::lock::record::share(&self.record));
            cmd
        } else if b.limit.is_some() {
            let mut cmd = eval(RETAKE_SLOT, &[&b.lock, &b.slots]);
            cmd.arg(token).arg(ttl).arg(b.member(token));
            cmd
        } else {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&b.lock).arg(token).arg("NX").arg("PX").arg(ttl);
            cmd
        })
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn writes(&self) -> bool {
        true
    }

    fn votes(&self) -> bool {
        true
    }

    fn wrote(&self, _: usize, v: &Value) -> bool {
        matches!(v, Value::Okay | Value::Int(1))
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<bool, NodeError> {
        match v {
            Value::Okay | Value::Int(1) => Ok(true),
            Value::Nil | Value::Int(0) => Ok(false),
            other => Err(error::unexpected(name, "retake", &other)),
        }
    }
}

/// Compare-and-delete (the record too). `announce` wakes waiters: right
/// for a lock that was held, wrong for undoing a failed attempt, which
/// would wake every waiter for nothing (and each of their failed attempts
/// would wake them all again).
pub(crate) struct Release {
    pub key_set: Arc<KeySet>,
    pub token: Arc<str>,
    pub announce: bool,
}

impl Request for Release {
    type Answer = Released;

    fn upkeep(&self) -> bool {
        true
    }

    fn last_word(&self) -> bool {
        true
    }

    fn command(&self, _: usize) -> Option<Cmd> {
        Some(release_cmd(&self.key_set, &self.token, self.announce, None))
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Released, NodeError> {
        released(&v, "release script", name)
    }
}

fn released(v: &Value, what: &str, name: &str) -> Result<Released, NodeError> {
    match int(v, what, name)? {
        1 => Ok(Released::Deleted),
        -1 => Ok(Released::AlreadyGone),
        0 => Ok(Released::NotOurs),
        _ => Err(error::unexpected(name, what, v)),
    }
}

/// RELEASE (or a reader's RELEASE_SHARED), with the history append of
/// `entry` (its key and record) in the same script where one is given.
fn release_cmd(key_set: &KeySet, token: &str, announce: bool, entry: Option<(&[u8], &str)>) -> Cmd {
    let released: &[u8] = if announce { &key_set.released } else { b"" };
    if key_set.shared {
        let mut cmd = match entry {
            Some((key, _)) => eval(
                RELEASE_SHARED_RECORDING,
                &[
                    &key_set.readers,
                    &key_set.reader_records,
                    &key_set.queue,
                    &key_set.waiters,
                    key,
                ],
            ),
            None => eval(
                RELEASE_SHARED,
                &[
                    &key_set.readers,
                    &key_set.reader_records,
                    &key_set.queue,
                    &key_set.waiters,
                ],
            ),
        };
        cmd.arg(token).arg(released).arg(key_set.front());
        if let Some((_, record)) = entry {
            history_args(&mut cmd, record);
        }
        return cmd;
    }
    match entry {
        None => {
            let mut cmd = eval(
                RELEASE,
                &[
                    &key_set.lock,
                    &key_set.holder,
                    &key_set.queue,
                    &key_set.waiters,
                    key_set.entries(),
                ],
            );
            cmd.arg(token)
                .arg(released)
                .arg(key_set.front())
                .arg(key_set.member(token));
            cmd
        }
        Some((key, record)) => {
            let mut cmd = eval(
                RELEASE_RECORDING,
                &[
                    &key_set.lock,
                    &key_set.holder,
                    &key_set.queue,
                    &key_set.waiters,
                    key,
                    key_set.entries(),
                ],
            );
            cmd.arg(token).arg(released).arg(key_set.front());
            history_args(&mut cmd, record);
            cmd.arg(key_set.member(token));
            cmd
        }
    }
}

fn held(v: &Value, name: &str) -> Result<Answer, NodeError> {
    match int(v, "hold script", name)? {
        1 => Ok(Answer::Granted),
        0 => Ok(Answer::Refused),
        _ => Err(error::unexpected(name, "hold script", v)),
    }
}

fn hold_cmd(
    key_set: &KeySet,
    token: &str,
    left: Duration,
    exit_code: u8,
    entry: Option<(&[u8], &str)>,
) -> Cmd {
    if key_set.shared {
        let mut cmd = match entry {
            Some((key, _)) => eval(
                HOLD_SHARED_RECORDING,
                &[&key_set.readers, &key_set.reader_records, key],
            ),
            None => eval(HOLD_SHARED, &[&key_set.readers, &key_set.reader_records]),
        };
        cmd.arg(token).arg(millis(left));
        if let Some((_, record)) = entry {
            history_args(&mut cmd, record);
        }
        return cmd;
    }
    let mut cmd = match entry {
        Some((key, _)) => eval(
            HOLD_RECORDING,
            &[&key_set.lock, &key_set.holder, key, key_set.entries()],
        ),
        None => eval(HOLD, &[&key_set.lock, &key_set.holder, key_set.entries()]),
    };
    cmd.arg(token)
        .arg(millis(left))
        .arg(crate::lock::unix_ms())
        .arg(exit_code);
    if let Some((_, record)) = entry {
        history_args(&mut cmd, record);
    }
    cmd.arg(key_set.member(token));
    cmd
}

/// The end of a run on each node: `ending` where the lock may be ours
/// (`ours`), and the append of `entry` (the history key and the record) to
/// the run history, in the same script when there are both (see
/// `lock::end`). The append is a write like any other: with --replicas
/// N it counts only once N replicas have it, but a release stands either
/// way.
pub(crate) struct EndRun {
    pub key_set: Arc<KeySet>,
    pub token: Arc<str>,
    pub ending: Ending,
    pub ours: Vec<usize>,
    pub entry: Option<(Vec<u8>, String)>,
}

impl EndRun {
    fn ending(&self, node: usize) -> Option<Ending> {
        self.ours.contains(&node).then_some(self.ending)
    }

    fn entry(&self) -> Option<(&[u8], &str)> {
        self.entry.as_ref().map(|(k, r)| (&k[..], r.as_str()))
    }
}

impl Request for EndRun {
    type Answer = Ended;

    fn upkeep(&self) -> bool {
        true
    }

    fn last_word(&self) -> bool {
        true
    }

    fn asks_alike(&self, a: usize, b: usize) -> bool {
        self.ours.contains(&a) == self.ours.contains(&b)
    }

    fn command(&self, node: usize) -> Option<Cmd> {
        let (b, token) = (&self.key_set, &*self.token);
        Some(match (self.ending(node), self.entry()) {
            (Some(Ending::Release), entry) => release_cmd(b, token, true, entry),
            (Some(Ending::Hold { left, exit_code }), entry) => {
                hold_cmd(b, token, left, exit_code, entry)
            }
            (None, Some((key, record))) => {
                let mut cmd = eval(APPEND, &[key]);
                history_args(&mut cmd, record);
                cmd
            }
            (None, None) => return None,
        })
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn writes(&self) -> bool {
        true
    }

    /// WAIT after a hold that took, as for HOLD alone, and after an append;
    /// a release alone waits for nobody, as RELEASE does.
    fn wrote(&self, node: usize, v: &Value) -> bool {
        let hold = matches!(self.ending(node), Some(Ending::Hold { .. }));
        match (self.ending(node), self.entry.is_some(), v) {
            (Some(_), true, Value::Array(p)) => {
                p.get(1) == Some(&Value::Int(1)) || (hold && p.first() == Some(&Value::Int(1)))
            }
            (Some(_), false, v) => hold && *v == Value::Int(1),
            (None, _, v) => *v == Value::Int(1),
            _ => false,
        }
    }

    fn decode(&self, node: usize, v: Value, name: &str) -> Result<Ended, NodeError> {
        let finish = |lock: &Value| match self.ending(node) {
            Some(Ending::Release) => released(lock, "release script", name).map(Finish::Released),
            _ => held(lock, name).map(Finish::Held),
        };
        match (self.ending(node), self.entry.is_some()) {
            (Some(_), true) => {
                let Value::Array(parts) = &v else {
                    return Err(error::unexpected(name, "end of run script", &v));
                };
                let [lock, append] = parts.as_slice() else {
                    return Err(error::unexpected(name, "end of run script", &v));
                };
                if let Value::ServerError(e) = lock {
                    return Err(error::server_error(name, e));
                }
                Ok(Ended {
                    lock: Some(finish(lock)?),
                    recorded: Some(appended(append.clone(), name)),
                })
            }
            (Some(_), false) => Ok(Ended {
                lock: Some(finish(&v)?),
                recorded: None,
            }),
            (None, _) => Ok(Ended {
                lock: None,
                recorded: Some(appended(v, name)),
            }),
        }
    }

    fn uncounted(&self, answer: Ended, e: NodeError) -> Result<Ended, NodeError> {
        match answer.lock {
            // Too few replicas have the hold: it fails here as HOLD alone
            // would, and the record with it.
            Some(Finish::Held(Answer::Granted)) => Err(e),
            lock => Ok(Ended {
                lock,
                recorded: Some(answer.recorded.unwrap_or(Ok(())).and(Err(e))),
            }),
        }
    }
}

/// The history's half: 1, or the failed step and its error, as text
/// (see `scripts::record`).
fn appended(v: Value, name: &str) -> Result<(), NodeError> {
    match v {
        Value::Int(1) => Ok(()),
        Value::BulkString(b) => Err(error::script_error(name, &String::from_utf8_lossy(&b))),
        Value::SimpleString(s) => Err(error::script_error(name, &s)),
        Value::ServerError(e) => Err(error::server_error(name, &e)),
        other => Err(error::unexpected(name, "history script", &other)),
    }
}

/// The record, and the history's length and lifetime (`HISTORY_CAP`,
/// `HISTORY_TTL`): the last three arguments of every script that appends.
fn history_args(cmd: &mut Cmd, record: &str) {
    cmd.arg(record).arg(HISTORY_CAP).arg(millis(HISTORY_TTL));
}

/// `unlock --token`: deletes the lock if its token starts with `prefix`.
pub(crate) struct Unlock {
    pub key_set: Arc<KeySet>,
    pub prefix: Arc<str>,
}

impl Request for Unlock {
    type Answer = Released;

    fn command(&self, _: usize) -> Option<Cmd> {
        let b = &self.key_set;
        let mut cmd = eval(
            UNLOCK,
            &[
                &b.lock,
                &b.holder,
                &b.queue,
                &b.waiters,
                &b.readers,
                &b.reader_records,
            ],
        );
        cmd.arg(&*self.prefix).arg(&b.released).arg(b.front());
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Released, NodeError> {
        released(&v, "unlock script", name)
    }
}

/// Gives up our place in the --wait queue, waking its front (`wake`), or
/// quietly (see FORGET).
pub(crate) struct Leave {
    pub key_set: Arc<KeySet>,
    pub token: Arc<str>,
    pub wake: bool,
}

impl Request for Leave {
    type Answer = ();

    fn upkeep(&self) -> bool {
        true
    }

    fn last_word(&self) -> bool {
        self.wake
    }

    fn command(&self, _: usize) -> Option<Cmd> {
        let b = &self.key_set;
        if self.wake {
            let mut cmd = eval(LEAVE, &[&b.queue, &b.waiters]);
            cmd.arg(&*self.token).arg(&b.released).arg(b.front());
            Some(cmd)
        } else {
            let mut cmd = eval(FORGET, &[&b.queue, &b.waiters]);
            cmd.arg(&*self.token);
            Some(cmd)
        }
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn decode(&self, _: usize, _: Value, _: &str) -> Result<(), NodeError> {
        Ok(())
    }
}

/// The N of the --limit N holders of the lock's slots (see LIMIT_OF).
pub(crate) struct LimitOf {
    pub key_set: Arc<KeySet>,
}

impl Request for LimitOf {
    type Answer = Option<u32>;

    fn command(&self, _: usize) -> Option<Cmd> {
        Some(eval(LIMIT_OF, &[&self.key_set.slots]))
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Option<u32>, NodeError> {
        match v {
            Value::Int(n) => Ok(u32::try_from(n).ok()),
            Value::Nil => Ok(None),
            other => Err(error::unexpected(name, "limit script", &other)),
        }
    }
}

/// Deletes `key` only while it holds our token.
pub(crate) struct DropOurs {
    pub key: Vec<u8>,
    pub token: Arc<str>,
}

impl Request for DropOurs {
    type Answer = bool;

    fn upkeep(&self) -> bool {
        true
    }

    fn last_word(&self) -> bool {
        true
    }

    fn command(&self, _: usize) -> Option<Cmd> {
        let mut cmd = eval(DROP, &[&self.key]);
        cmd.arg(&*self.token);
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.key
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<bool, NodeError> {
        Ok(int(&v, "drop script", name)? == 1)
    }
}

/// Raises the fence counter to `t` while the lock holds our token here.
pub(crate) struct CommitFence {
    pub key_set: Arc<KeySet>,
    pub token: Arc<str>,
    pub t: u64,
}

impl Request for CommitFence {
    type Answer = Answer;

    fn command(&self, _: usize) -> Option<Cmd> {
        let mut cmd = eval(FENCE, &[&self.key_set.lock, &self.key_set.fence]);
        cmd.arg(&*self.token).arg(self.t);
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn writes(&self) -> bool {
        true
    }

    fn votes(&self) -> bool {
        true
    }

    fn wrote(&self, _: usize, v: &Value) -> bool {
        *v == Value::Int(1)
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Answer, NodeError> {
        match int(&v, "fence script", name)? {
            1 => Ok(Answer::Granted),
            0 => Ok(Answer::Refused),
            _ => Err(error::unexpected(name, "fence script", &v)),
        }
    }
}

/// Deletes the lock whoever holds it: true if there was one.
pub(crate) struct ForceDelete {
    pub key_set: Arc<KeySet>,
}

impl Request for ForceDelete {
    type Answer = bool;

    fn command(&self, _: usize) -> Option<Cmd> {
        let b = &self.key_set;
        let mut cmd = eval(
            FORCE,
            &[
                &b.lock,
                &b.holder,
                &b.queue,
                &b.waiters,
                &b.readers,
                &b.reader_records,
            ],
        );
        cmd.arg(&b.released).arg(b.front());
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<bool, NodeError> {
        Ok(int(&v, "delete script", name)? == 1)
    }
}

/// The lock's value, its PTTL, its holder record, how many wait in its
/// queue and its readers, in one round trip.
pub(crate) struct Inspect {
    pub key_set: Arc<KeySet>,
}

impl Request for Inspect {
    type Answer = Inspection;

    fn command(&self, _: usize) -> Option<Cmd> {
        let b = &self.key_set;
        Some(eval(
            INSPECT,
            &[&b.lock, &b.holder, &b.queue, &b.readers, &b.reader_records],
        ))
    }

    fn key(&self) -> &[u8] {
        &self.key_set.lock
    }

    fn decode(&self, _: usize, reply: Value, name: &str) -> Result<Inspection, NodeError> {
        let bad = || error::unexpected(name, "inspect script", &reply);
        let Value::Array(parts) = &reply else {
            return Err(bad());
        };
        let value = match parts.first() {
            Some(Value::BulkString(b)) => Some(b.clone()),
            Some(Value::Nil) => None,
            _ => return Err(bad()),
        };
        let Some(Value::Int(pttl)) = parts.get(1) else {
            return Err(bad());
        };
        let holder = match parts.get(2) {
            Some(Value::Array(fields)) => pairs(fields),
            None | Some(Value::Nil) => Vec::new(),
            _ => return Err(bad()),
        };
        let queued = match parts.get(3) {
            Some(Value::Int(n)) => *n,
            _ => 0,
        };
        let mut readers = Vec::new();
        if let Some(Value::Array(flat)) = parts.get(4) {
            for share in flat.chunks(3) {
                let [Value::BulkString(token), Value::Int(left_ms), record] = share else {
                    return Err(bad());
                };
                readers.push(Share {
                    token: token.clone(),
                    left_ms: *left_ms,
                    record: match record {
                        Value::BulkString(json) => crate::lock::record::of_share(json),
                        _ => Vec::new(),
                    },
                });
            }
        }
        Ok(Inspection {
            value,
            pttl: *pttl,
            holder,
            queued,
            readers,
        })
    }
}

/// How many keys each SCAN request looks at: a large keyspace costs many
/// short requests, never one long one.
const SCAN_COUNT: u32 = 1000;

/// One page of SCAN for the keys matching `pattern`, from each node's own
/// cursor (on a Cluster, on the master of `near`'s slot); a node whose
/// cursor is empty is asked nothing.
pub(crate) struct Scan {
    pub pattern: Vec<u8>,
    pub near: Vec<u8>,
    pub cursors: Vec<Vec<u8>>,
}

impl Request for Scan {
    /// The next cursor ("0" at the end) and the keys of this page.
    type Answer = (Vec<u8>, Vec<Vec<u8>>);

    fn command(&self, node: usize) -> Option<Cmd> {
        let cursor = self.cursors.get(node).filter(|c| !c.is_empty())?;
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(&self.pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.near
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Self::Answer, NodeError> {
        redis::from_redis_value(v.clone()).map_err(|_| error::unexpected(name, "SCAN", &v))
    }
}

/// Which of each node's `keys` exist, with their type and time left (see
/// DESCRIBE).
pub(crate) struct Describe {
    pub near: Vec<u8>,
    /// Each node's keys; None: the node is asked nothing.
    pub keys: Vec<Option<Vec<Vec<u8>>>>,
}

impl Request for Describe {
    type Answer = Vec<KeyInfo>;

    fn command(&self, node: usize) -> Option<Cmd> {
        let keys = self.keys.get(node)?.as_ref()?;
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(DESCRIBE).arg(keys.len()).arg(keys);
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.near
    }

    fn decode(&self, _: usize, reply: Value, name: &str) -> Result<Vec<KeyInfo>, NodeError> {
        let bad = || error::unexpected(name, "describe script", &reply);
        let Value::Array(rows) = &reply else {
            return Err(bad());
        };
        rows.iter()
            .map(|row| match row {
                Value::Array(f) => match f.as_slice() {
                    [Value::BulkString(k), Value::BulkString(t), Value::Int(pttl)] => Ok(KeyInfo {
                        key: k.clone(),
                        kind: String::from_utf8_lossy(t).into_owned(),
                        pttl: *pttl,
                    }),
                    _ => Err(bad()),
                },
                _ => Err(bad()),
            })
            .collect()
    }
}

/// Each node's --once-per markers that still exist, with the token of the
/// run that set each and the milliseconds it has left (see MARKERS).
pub(crate) struct Markers {
    pub near: Vec<u8>,
    /// Each node's markers; None: the node is asked nothing.
    pub keys: Vec<Option<Vec<Vec<u8>>>>,
}

/// One --once-per marker on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Marker {
    pub key: Vec<u8>,
    pub token: Vec<u8>,
    pub pttl: i64,
}

impl Request for Markers {
    type Answer = Vec<Marker>;

    fn command(&self, node: usize) -> Option<Cmd> {
        let keys = self.keys.get(node)?.as_ref()?;
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(MARKERS).arg(keys.len()).arg(keys);
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.near
    }

    fn decode(&self, _: usize, reply: Value, name: &str) -> Result<Vec<Marker>, NodeError> {
        let bad = || error::unexpected(name, "markers script", &reply);
        let Value::Array(rows) = &reply else {
            return Err(bad());
        };
        rows.iter()
            .map(|row| match row {
                Value::Array(f) => match f.as_slice() {
                    [Value::BulkString(k), Value::BulkString(t), Value::Int(pttl)] => Ok(Marker {
                        key: k.clone(),
                        token: t.clone(),
                        pttl: *pttl,
                    }),
                    _ => Err(bad()),
                },
                _ => Err(bad()),
            })
            .collect()
    }
}

/// Deletes each node's `keys` unless the lock is in use, or only looks, or
/// deletes them whatever it finds, as `how` says (see FORGET_LOCK, whose
/// order of keys this takes: the five fixed keys, `pairs` pairs of a slot
/// key and its record, the rest).
pub(crate) struct ForgetLock {
    pub near: Vec<u8>,
    /// Each node's keys and slot pairs; None: the node is asked nothing.
    pub keys: Vec<Option<(Vec<Vec<u8>>, usize)>>,
    pub how: Forget,
    pub released: Vec<u8>,
}

impl Request for ForgetLock {
    type Answer = Forgotten;

    fn command(&self, node: usize) -> Option<Cmd> {
        let (keys, pairs) = self.keys.get(node)?.as_ref()?;
        let how = match self.how {
            Forget::Check => "check",
            Forget::Delete => "delete",
            Forget::Force => "force",
        };
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FORGET_LOCK).arg(keys.len()).arg(keys);
        cmd.arg(how).arg(*pairs).arg(&self.released);
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.near
    }

    fn decode(&self, _: usize, reply: Value, name: &str) -> Result<Forgotten, NodeError> {
        let bad = || error::unexpected(name, "forget script", &reply);
        let Value::Array(parts) = &reply else {
            return Err(bad());
        };
        let [
            Value::Int(done),
            why,
            token,
            Value::Array(record),
            Value::Int(waiting),
            Value::Int(removed),
        ] = parts.as_slice()
        else {
            return Err(bad());
        };
        let in_use = match why {
            Value::Nil => None,
            Value::BulkString(w) => Some(match w.as_slice() {
                b"held" => InUse::Held,
                b"shared" => InUse::Shared,
                b"slot" => InUse::Slot,
                b"queued" => InUse::Queued,
                _ => return Err(bad()),
            }),
            _ => return Err(bad()),
        };
        let token = match token {
            Value::BulkString(t) => Some(t.clone()),
            _ => None,
        };
        let mut holder = Vec::new();
        for pair in record.chunks(2) {
            match pair {
                // A reader's record: one JSON object.
                [Value::BulkString(k), Value::BulkString(v)] if k == b"json" => {
                    holder = crate::lock::record::of_share(v);
                }
                [Value::BulkString(k), Value::BulkString(v)] => holder.push((
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )),
                _ => {}
            }
        }
        Ok(Forgotten {
            in_use,
            token,
            holder,
            waiting: *waiting,
            removed: *removed,
            refused: *done == 0,
        })
    }
}

/// The server's `run_id` (INFO server): one per server process, whatever
/// address it is reached at.
pub(crate) struct RunId {
    pub near: Vec<u8>,
}

impl Request for RunId {
    type Answer = Option<String>;

    fn command(&self, _: usize) -> Option<Cmd> {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("server");
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.near
    }

    fn decode(&self, _: usize, v: Value, _: &str) -> Result<Option<String>, NodeError> {
        let Value::BulkString(text) = v else {
            return Ok(None);
        };
        Ok(String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|id| id.trim().to_string()))
    }
}

/// The newest `count` records of the history at `key`, as stored, each one
/// longer than `RECORD_CAP` as `{"truncated":<its size>}`.
pub(crate) struct History {
    pub key: Vec<u8>,
    pub count: usize,
}

impl Request for History {
    type Answer = Vec<String>;

    fn command(&self, _: usize) -> Option<Cmd> {
        let mut cmd = eval(HISTORY, &[&self.key]);
        cmd.arg(self.count);
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.key
    }

    fn decode(&self, _: usize, v: Value, name: &str) -> Result<Vec<String>, NodeError> {
        let entries: Vec<Vec<u8>> = redis::from_redis_value(v.clone())
            .map_err(|_| error::unexpected(name, "history script", &v))?;
        Ok(entries
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e).into_owned())
            .collect())
    }
}

/// A hash as HGETALL answers it, as (field, value) pairs; what is not text
/// is left out (the record is information only).
fn pairs(fields: &[Value]) -> Vec<(String, String)> {
    fields
        .chunks(2)
        .filter_map(|pair| match pair {
            [Value::BulkString(k), Value::BulkString(v)] => Some((
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::keys::Keys;

    fn key_set() -> Arc<KeySet> {
        let keys = Keys::new(b"lock:", b"job").expect("printable");
        Arc::new(crate::lock::key_set(&keys, None, None))
    }

    /// Every pair of nodes `asks_alike` names is sent the very bytes each
    /// would have been packed on its own: the round packs them once.
    fn alike_means_the_same_bytes<R: Request>(request: &R, nodes: usize) {
        let packed = |i| request.command(i).map(|c| c.get_packed_command());
        for a in 0..nodes {
            for b in 0..nodes {
                if request.asks_alike(a, b) {
                    assert_eq!(packed(a), packed(b), "nodes {a} and {b}");
                }
            }
        }
    }

    #[test]
    fn nodes_asked_alike_are_asked_the_same_bytes() {
        let acquire = Acquire {
            key_set: key_set(),
            token: Arc::from("t0ken"),
            ttl: Duration::from_secs(30),
            record: vec![("host", "vm".to_string())],
            fence: true,
            queue: Queue::Check,
        };
        assert!(acquire.asks_alike(0, 2));
        alike_means_the_same_bytes(&acquire, 3);
        for ours in [vec![0, 2], vec![], vec![0, 1, 2]] {
            for entry in [None, Some((b"lock:job:runs".to_vec(), "rec".to_string()))] {
                let end = EndRun {
                    key_set: key_set(),
                    token: Arc::from("t0ken"),
                    ending: Ending::Release,
                    ours: ours.clone(),
                    entry,
                };
                alike_means_the_same_bytes(&end, 3);
            }
        }
        // A node that holds nothing is asked to append alone, not to release.
        let end = EndRun {
            key_set: key_set(),
            token: Arc::from("t0ken"),
            ending: Ending::Release,
            ours: vec![0, 2],
            entry: Some((b"lock:job:runs".to_vec(), "rec".to_string())),
        };
        assert!(end.asks_alike(0, 2) && !end.asks_alike(0, 1));
        assert_ne!(
            end.command(0).map(|c| c.get_packed_command()),
            end.command(1).map(|c| c.get_packed_command())
        );
    }
}
