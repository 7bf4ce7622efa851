//! The lock's requests on one node, over whichever connection its topology
//! gives (see `conn`), and `--replicas`: a write counts only once enough
//! replicas of the node acknowledged it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;

use super::conn::{Conn, Target};
use super::error::{self, Failure, NodeError, interrupted, server_error, unexpected};
use super::scripts::*;
use super::wire::{DEFERRED, Line, Mode, Wire};
use super::{
    Books, Extension, Forget, Forgotten, Granted, InUse, Inspection, KeyInfo, Options, Queue,
    Refusal, Released, Share, millis,
};
use crate::lock::history::{Ended, Ending, Finish, HISTORY_CAP, HISTORY_TTL};
use crate::lock::redlock::Answer;

/// How many keys each SCAN request looks at (see `Session::scan`).
const SCAN_COUNT: u32 = 1000;

/// How late Redis may answer a WAIT after its timeout (see `write`).
const WAIT_LATE: Duration = Duration::from_millis(250);

/// One node's connection and what it needs to (re)connect and to word errors.
pub struct Session {
    name: String,
    target: Arc<Target>,
    timeout: Duration,
    /// --replicas N.
    replicas: u32,
    conn: Option<Conn>,
    /// Shared with the node: what the log should hear about the topology.
    notes: Arc<Mutex<Vec<String>>>,
    /// Shared with the node: the connection's writing half.
    line: Arc<Mutex<Line>>,
    /// The number of the node's job running now (see `Node::write_behind`).
    pub(super) job: u64,
}

impl Session {
    pub(super) fn new(
        name: &str,
        target: Arc<Target>,
        opts: &Options,
        notes: Arc<Mutex<Vec<String>>>,
        line: Arc<Mutex<Line>>,
    ) -> Session {
        Session {
            name: name.to_string(),
            target,
            timeout: opts.timeout,
            replicas: opts.replicas,
            conn: None,
            notes,
            line,
            job: 0,
        }
    }

    /// redlock-run's own connection, where the session has one.
    pub(super) fn wire(&mut self) -> Option<&mut Wire> {
        match &mut self.conn {
            Some(Conn::Own(w)) => Some(w),
            _ => None,
        }
    }

    /// Takes over a connection made for it (see `node::polled`).
    pub(super) fn adopt(&mut self, wire: Wire) {
        self.conn = Some(Conn::Own(wire));
    }

    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Takes `books.lock` for `token` (see ACQUIRE); with a non-empty
    /// `record`, the holder record goes out in the same script, and with
    /// `fence` the counter is read in it.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &mut self,
        books: &Books,
        token: &str,
        ttl: Duration,
        record: &[(&str, String)],
        fence: bool,
        queue: &Queue,
    ) -> Result<Granted, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        if books.shared {
            cmd.arg(ACQUIRE_SHARED)
                .arg(7)
                .arg(&books.main)
                .arg(&books.holder)
                .arg(&books.reader_records)
                .arg(&books.slots)
                .arg(&books.queue)
                .arg(&books.waiters)
                .arg(&books.readers);
            cmd.arg(token)
                .arg(millis(ttl))
                .arg(crate::lock::record::share(record))
                .arg("");
        } else {
            // The previous layout's counter only where it is read: an ACL
            // that names the lock's keys one by one need not name it.
            cmd.arg(ACQUIRE)
                .arg(if fence { 10 } else { 9 })
                .arg(&books.lock)
                .arg(&books.holder)
                .arg(&books.fence)
                .arg(&books.slots)
                .arg(&books.queue)
                .arg(&books.waiters)
                .arg(&books.main)
                .arg(&books.readers)
                .arg(&books.reader_records);
            if fence {
                cmd.arg(&books.legacy_fence);
            }
            cmd.arg(token)
                .arg(millis(ttl))
                .arg(u8::from(fence))
                .arg(books.member(token));
        }
        match queue {
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
        cmd.arg(books.front());
        // A reader's record went as one JSON object above.
        if !books.shared {
            for (k, v) in record {
                cmd.arg(*k).arg(v);
            }
        }
        self.take(&cmd, &books.lock, fence)
    }

    /// Sets a --once-per marker (idempotent for the same token).
    pub fn mark(
        &mut self,
        marker: &[u8],
        token: &str,
        ttl: Duration,
    ) -> Result<Granted, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(MARK).arg(1).arg(marker).arg(token).arg(millis(ttl));
        self.take(&cmd, marker, false)
    }

    fn take(&mut self, cmd: &redis::Cmd, key: &[u8], fence: bool) -> Result<Granted, NodeError> {
        let reply = self.write(
            cmd,
            key,
            |v| matches!(v, Value::Array(parts) if parts.first() == Some(&Value::Int(1))),
        )?;
        let parts = match &reply {
            Value::Array(parts) => parts.as_slice(),
            other => return Err(self.unexpected("acquire script", &format!("{other:?}"))),
        };
        let answer = match parts.first() {
            Some(Value::Int(1)) => Answer::Granted,
            Some(Value::Int(0 | 2)) => Answer::Refused,
            other => return Err(self.unexpected("acquire script", &format!("{other:?}"))),
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
                    .ok_or_else(|| self.unexpected("GET fence counter", &format!("{b:?}")))?,
            ),
            (true, _, Some(other)) => {
                return Err(self.unexpected("GET fence counter", &format!("{other:?}")));
            }
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
            server: self.server(),
            holder: match (refusal, parts.get(6)) {
                (Some(Refusal::Held), Some(Value::Array(fields))) => pairs(fields),
                _ => Vec::new(),
            },
        })
    }

    /// Compare-and-PEXPIRE (the record too): `Refused` when the key no
    /// longer holds our token, `Failed`-free `Absent` when it is gone.
    pub fn extend(
        &mut self,
        books: &Books,
        token: &str,
        ttl: Duration,
    ) -> Result<Extension, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        if books.shared {
            cmd.arg(EXTEND_SHARED)
                .arg(2)
                .arg(&books.readers)
                .arg(&books.reader_records);
            cmd.arg(token).arg(millis(ttl));
        } else {
            cmd.arg(EXTEND).arg(3).arg(&books.lock).arg(&books.holder);
            cmd.arg(books.entries());
            cmd.arg(token).arg(millis(ttl)).arg(books.member(token));
        }
        self.follow_primary();
        match self.write(&cmd, &books.lock, |v| *v == Value::Int(1))? {
            Value::Int(1) => Ok(Extension::Extended),
            Value::Int(-1) => Ok(Extension::Absent),
            Value::Int(0) => Ok(Extension::NotOurs),
            other => Err(self.unexpected("extend script", &format!("{other:?}"))),
        }
    }

    /// `SET NX PX` of our token on a node that lost the key (restarted empty,
    /// or expired early by its clock) while a quorum still holds it for us:
    /// so that losses spread over a long run do not add up. Only ever sent
    /// within the validity the extension round just won.
    /// With --limit, a script: the slot goes back with our entry among the
    /// slot holders, which keeps plain runs away.
    pub fn retake(
        &mut self,
        books: &Books,
        token: &str,
        ttl: Duration,
        record: &[(&str, String)],
    ) -> Result<bool, NodeError> {
        if books.shared {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(RETAKE_SHARED)
                .arg(4)
                .arg(&books.main)
                .arg(&books.slots)
                .arg(&books.readers)
                .arg(&books.reader_records);
            cmd.arg(token)
                .arg(millis(ttl))
                .arg(crate::lock::record::share(record));
            return match self.write(&cmd, &books.readers, |v| *v == Value::Int(1))? {
                Value::Int(1) => Ok(true),
                Value::Int(0) => Ok(false),
                other => Err(self.unexpected("retake script", &format!("{other:?}"))),
            };
        }
        if books.limit.is_some() {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(RETAKE_SLOT)
                .arg(2)
                .arg(&books.lock)
                .arg(&books.slots);
            cmd.arg(token).arg(millis(ttl)).arg(books.member(token));
            return match self.write(&cmd, &books.lock, |v| *v == Value::Int(1))? {
                Value::Int(1) => Ok(true),
                Value::Int(0) => Ok(false),
                other => Err(self.unexpected("retake script", &format!("{other:?}"))),
            };
        }
        let mut cmd = redis::cmd("SET");
        cmd.arg(&books.lock)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl));
        match self.write(&cmd, &books.lock, |v| *v == Value::Okay)? {
            Value::Okay => Ok(true),
            Value::Nil => Ok(false),
            other => Err(self.unexpected("SET NX", &format!("{other:?}"))),
        }
    }

    /// Compare-and-delete (the record too). `announce` wakes waiters: right
    /// for a lock that was held, wrong for undoing a failed attempt, which
    /// would wake every waiter for nothing (and each of their failed attempts
    /// would wake them all again).
    pub fn release(
        &mut self,
        books: &Books,
        token: &str,
        announce: bool,
    ) -> Result<Released, NodeError> {
        match self.eval(&release_cmd(books, token, announce))? {
            Value::Int(1) => Ok(Released::Deleted),
            Value::Int(-1) => Ok(Released::AlreadyGone),
            Value::Int(0) => Ok(Released::NotOurs),
            other => Err(self.unexpected("release script", &format!("{other:?}"))),
        }
    }

    /// --hold: leaves the lock to expire in `left`, recording the exit.
    pub fn hold(
        &mut self,
        books: &Books,
        token: &str,
        left: Duration,
        exit_code: u8,
    ) -> Result<Answer, NodeError> {
        let cmd = hold_cmd(books, token, left, exit_code);
        match self.write(&cmd, &books.lock, |v| *v == Value::Int(1))? {
            Value::Int(1) => Ok(Answer::Granted),
            Value::Int(0) => Ok(Answer::Refused),
            other => Err(self.unexpected("hold script", &format!("{other:?}"))),
        }
    }

    /// `unlock --token`: deletes the lock if its token starts with `prefix`.
    pub fn unlock(&mut self, books: &Books, prefix: &str) -> Result<Released, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(UNLOCK).arg(6).arg(&books.lock).arg(&books.holder);
        cmd.arg(&books.queue).arg(&books.waiters);
        cmd.arg(&books.readers).arg(&books.reader_records);
        cmd.arg(prefix).arg(&books.released).arg(books.front());
        match self.eval(&cmd)? {
            Value::Int(1) => Ok(Released::Deleted),
            Value::Int(-1) => Ok(Released::AlreadyGone),
            Value::Int(0) => Ok(Released::NotOurs),
            other => Err(self.unexpected("unlock script", &format!("{other:?}"))),
        }
    }

    /// Gives up our place in the --wait queue, and wakes its front.
    pub fn leave(&mut self, books: &Books, token: &str) -> Result<(), NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(LEAVE).arg(2).arg(&books.queue).arg(&books.waiters);
        cmd.arg(token).arg(&books.released).arg(books.front());
        match self.eval(&cmd)? {
            Value::Int(_) => Ok(()),
            other => Err(self.unexpected("leave script", &format!("{other:?}"))),
        }
    }

    /// Drops our place in the queue without waking anyone (see FORGET).
    pub fn forget_place(&mut self, books: &Books, token: &str) -> Result<(), NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FORGET).arg(2).arg(&books.queue).arg(&books.waiters);
        cmd.arg(token);
        self.eval(&cmd).map(drop)
    }

    /// The N of the --limit N holders of the lock's slots (see LIMIT_OF).
    pub fn limit(&mut self, books: &Books) -> Result<Option<u32>, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(LIMIT_OF).arg(1).arg(&books.slots);
        match self.eval(&cmd)? {
            Value::Int(n) => Ok(u32::try_from(n).ok()),
            Value::Nil => Ok(None),
            other => Err(self.unexpected("limit script", &format!("{other:?}"))),
        }
    }

    /// Deletes `key` only while it holds our token.
    pub fn drop_ours(&mut self, key: &[u8], token: &str) -> Result<bool, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(DROP).arg(1).arg(key).arg(token);
        match self.eval(&cmd)? {
            Value::Int(n) => Ok(n == 1),
            other => Err(self.unexpected("drop script", &format!("{other:?}"))),
        }
    }

    /// Raises the fence counter to `t` while the lock holds our token here.
    pub fn commit_fence(
        &mut self,
        books: &Books,
        token: &str,
        t: u64,
    ) -> Result<Answer, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FENCE)
            .arg(2)
            .arg(&books.lock)
            .arg(&books.fence)
            .arg(token)
            .arg(t);
        match self.write(&cmd, &books.lock, |v| *v == Value::Int(1))? {
            Value::Int(1) => Ok(Answer::Granted),
            Value::Int(0) => Ok(Answer::Refused),
            other => Err(self.unexpected("fence script", &format!("{other:?}"))),
        }
    }

    /// Deletes the lock whoever holds it: true if there was one.
    pub fn force_delete(&mut self, books: &Books) -> Result<bool, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FORCE)
            .arg(6)
            .arg(&books.lock)
            .arg(&books.holder)
            .arg(&books.queue)
            .arg(&books.waiters)
            .arg(&books.readers)
            .arg(&books.reader_records)
            .arg(&books.released)
            .arg(books.front());
        match self.eval(&cmd)? {
            Value::Int(n) => Ok(n == 1),
            other => Err(self.unexpected("delete script", &format!("{other:?}"))),
        }
    }

    /// The lock's value, its PTTL, its holder record and how many wait in
    /// its queue, in one round trip.
    pub fn inspect(&mut self, books: &Books) -> Result<Inspection, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(INSPECT)
            .arg(5)
            .arg(&books.lock)
            .arg(&books.holder)
            .arg(&books.queue)
            .arg(&books.readers)
            .arg(&books.reader_records);
        let bad = |s: &Session, v: &Value| s.unexpected("inspect script", &format!("{v:?}"));
        let reply = self.eval(&cmd)?;
        let Value::Array(parts) = &reply else {
            return Err(bad(self, &reply));
        };
        let value = match parts.first() {
            Some(Value::BulkString(b)) => Some(b.clone()),
            Some(Value::Nil) => None,
            _ => return Err(bad(self, &reply)),
        };
        let Some(Value::Int(pttl)) = parts.get(1) else {
            return Err(bad(self, &reply));
        };
        let mut holder = Vec::new();
        match parts.get(2) {
            Some(Value::Array(fields)) => {
                for pair in fields.chunks(2) {
                    match pair {
                        [Value::BulkString(k), Value::BulkString(v)] => holder.push((
                            String::from_utf8_lossy(k).into_owned(),
                            String::from_utf8_lossy(v).into_owned(),
                        )),
                        _ => return Err(bad(self, &reply)),
                    }
                }
            }
            None | Some(Value::Nil) => {}
            _ => return Err(bad(self, &reply)),
        }
        let queued = match parts.get(3) {
            Some(Value::Int(n)) => *n,
            _ => 0,
        };
        let mut readers = Vec::new();
        if let Some(Value::Array(flat)) = parts.get(4) {
            for share in flat.chunks(3) {
                match share {
                    [Value::BulkString(token), Value::Int(left_ms), record] => {
                        readers.push(Share {
                            token: token.clone(),
                            left_ms: *left_ms,
                            record: match record {
                                Value::BulkString(json) => crate::lock::record::of_share(json),
                                _ => Vec::new(),
                            },
                        })
                    }
                    _ => return Err(bad(self, &reply)),
                }
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

    /// The keys matching the glob `pattern` on this node (on a Cluster, on
    /// the master of `near`'s slot), by SCAN with the cursor carried from
    /// here, a thousand keys looked at per request: a large keyspace costs
    /// many short requests, never one long one.
    pub fn scan(&mut self, pattern: &[u8], near: &[u8]) -> Result<Vec<Vec<u8>>, NodeError> {
        let mut found = Vec::new();
        let mut cursor = b"0".to_vec();
        loop {
            let mut cmd = redis::cmd("SCAN");
            cmd.arg(&cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, keys): (Vec<u8>, Vec<Vec<u8>>) = self.query(|c| {
                let reply = c.at_key(&cmd, near)?.extract_error()?;
                Ok(redis::from_redis_value(reply)?)
            })?;
            found.extend(keys);
            if next == b"0" {
                break;
            }
            cursor = next;
        }
        // SCAN may return a key twice (the table was resized meanwhile).
        found.sort();
        found.dedup();
        Ok(found)
    }

    /// Which of `keys` exist, with their type and time left (see DESCRIBE).
    pub fn describe(&mut self, keys: &[Vec<u8>]) -> Result<Vec<KeyInfo>, NodeError> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(DESCRIBE).arg(keys.len()).arg(keys);
        let reply = self.eval(&cmd)?;
        let bad = |s: &Session| s.unexpected("describe script", &format!("{reply:?}"));
        let Value::Array(rows) = &reply else {
            return Err(bad(self));
        };
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            match row {
                Value::Array(f) => match f.as_slice() {
                    [Value::BulkString(k), Value::BulkString(t), Value::Int(pttl)] => {
                        out.push(KeyInfo {
                            key: k.clone(),
                            kind: String::from_utf8_lossy(t).into_owned(),
                            pttl: *pttl,
                        })
                    }
                    _ => return Err(bad(self)),
                },
                _ => return Err(bad(self)),
            }
        }
        Ok(out)
    }

    /// Deletes `keys` unless the lock is in use, or only looks, or deletes
    /// them whatever it finds, as `how` says (see FORGET_LOCK, whose order of
    /// `keys` this takes: the five fixed keys, `pairs` pairs of a slot key and
    /// its record, the rest).
    pub fn forget(
        &mut self,
        keys: &[Vec<u8>],
        pairs: usize,
        how: Forget,
        released: &[u8],
    ) -> Result<Forgotten, NodeError> {
        let how = match how {
            Forget::Check => "check",
            Forget::Delete => "delete",
            Forget::Force => "force",
        };
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(FORGET_LOCK).arg(keys.len()).arg(keys);
        cmd.arg(how).arg(pairs).arg(released);
        let reply = self.eval(&cmd)?;
        let bad = |s: &Session| s.unexpected("forget script", &format!("{reply:?}"));
        let Value::Array(parts) = &reply else {
            return Err(bad(self));
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
            return Err(bad(self));
        };
        let in_use = match why {
            Value::Nil => None,
            Value::BulkString(w) => Some(match w.as_slice() {
                b"held" => InUse::Held,
                b"shared" => InUse::Shared,
                b"slot" => InUse::Slot,
                b"queued" => InUse::Queued,
                _ => return Err(bad(self)),
            }),
            _ => return Err(bad(self)),
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

    /// The end of a run on this node: `ending` where the lock may be ours,
    /// and the append of `entry` (the history key and the record) to the run
    /// history, in the same script when there are both (see `lock::history`).
    /// The append is a write like any other: with --replicas N it counts
    /// only once N replicas have it, but a release stands either way.
    pub fn end_run(
        &mut self,
        books: &Books,
        token: &str,
        ending: Option<Ending>,
        entry: Option<(&[u8], &str)>,
    ) -> Result<Ended, NodeError> {
        match (ending, entry) {
            (Some(ending), Some((key, record))) => {
                self.end_recording(books, token, ending, key, record)
            }
            (Some(Ending::Release), None) => Ok(Ended {
                lock: Some(Finish::Released(self.release(books, token, true)?)),
                recorded: None,
            }),
            (Some(Ending::Hold { left, exit_code }), None) => Ok(Ended {
                lock: Some(Finish::Held(self.hold(books, token, left, exit_code)?)),
                recorded: None,
            }),
            (None, Some((key, record))) => {
                let cmd = append_cmd(key, record);
                let recorded = self
                    .write(&cmd, key, |v| *v == Value::Int(1))
                    .and_then(|v| self.appended(v));
                Ok(Ended {
                    lock: None,
                    recorded: Some(recorded),
                })
            }
            (None, None) => Ok(Ended {
                lock: None,
                recorded: None,
            }),
        }
    }

    /// RELEASE_RECORDING or HOLD_RECORDING: one script, one hash slot.
    fn end_recording(
        &mut self,
        books: &Books,
        token: &str,
        ending: Ending,
        key: &[u8],
        record: &str,
    ) -> Result<Ended, NodeError> {
        let cmd = recording_cmd(books, token, ending, key, record);
        // WAIT after a hold that took, as for HOLD alone, and after an
        // append; a release alone waits for nobody, as RELEASE does.
        let hold = matches!(ending, Ending::Hold { .. });
        let (reply, replicated) = self.write_apart(&cmd, &books.lock, |v| {
            matches!(v, Value::Array(p) if p.get(1) == Some(&Value::Int(1))
                || (hold && p.first() == Some(&Value::Int(1))))
        })?;
        let bad = |s: &Session| s.unexpected("end of run script", &format!("{reply:?}"));
        let Value::Array(parts) = &reply else {
            return Err(bad(self));
        };
        let [lock, append] = parts.as_slice() else {
            return Err(bad(self));
        };
        let lock = self.finish_of(ending, lock)?;
        let recorded = self.appended(append.clone());
        Ok(match replicated {
            Ok(()) => Ended {
                lock: Some(lock),
                recorded: Some(recorded),
            },
            // Too few replicas have the hold: it fails here as HOLD alone
            // would, and the record with it.
            Err(e) if matches!(lock, Finish::Held(Answer::Granted)) => return Err(e),
            Err(e) => Ended {
                lock: Some(lock),
                recorded: Some(recorded.and(Err(e))),
            },
        })
    }

    /// A digest of the `run_id` of the server on this connection, where
    /// redlock-run's own connection has read it (see `Wire::ask_run_id`).
    fn server(&self) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        match &self.conn {
            Some(Conn::Own(wire)) => wire.run_id.as_ref().map(|id| {
                let mut h = std::hash::DefaultHasher::new();
                id.hash(&mut h);
                h.finish()
            }),
            _ => None,
        }
    }

    /// The server's `run_id` (INFO server): one per server process,
    /// whatever address it is reached at. None from a Cluster (INFO goes to
    /// any of its nodes) or a server that does not say.
    pub fn run_id(&mut self) -> Result<Option<String>, NodeError> {
        if matches!(self.target.as_ref(), Target::Cluster(_)) {
            return Ok(None);
        }
        let mut cmd = redis::cmd("INFO");
        cmd.arg("server");
        let info: String = self.query(|c| cmd.query(c))?;
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|id| id.trim().to_string()))
    }

    /// The newest `count` records of the history at `key`, as stored.
    pub fn history(&mut self, key: &[u8], count: usize) -> Result<Vec<String>, NodeError> {
        let last = isize::try_from(count).unwrap_or(isize::MAX) - 1;
        let mut cmd = redis::cmd("LRANGE");
        cmd.arg(key).arg(0).arg(last);
        let entries: Vec<Vec<u8>> = self.query(|c| cmd.query(c))?;
        Ok(entries
            .into_iter()
            .map(|e| String::from_utf8_lossy(&e).into_owned())
            .collect())
    }

    /// The lock's half of an end-of-run reply, read as RELEASE's or HOLD's.
    fn finish_of(&self, ending: Ending, v: &Value) -> Result<Finish, NodeError> {
        match (ending, v) {
            (_, Value::ServerError(e)) => Err(server_error(&self.name, e)),
            (Ending::Release, Value::Int(1)) => Ok(Finish::Released(Released::Deleted)),
            (Ending::Release, Value::Int(-1)) => Ok(Finish::Released(Released::AlreadyGone)),
            (Ending::Release, Value::Int(0)) => Ok(Finish::Released(Released::NotOurs)),
            (Ending::Hold { .. }, Value::Int(1)) => Ok(Finish::Held(Answer::Granted)),
            (Ending::Hold { .. }, Value::Int(0)) => Ok(Finish::Held(Answer::Refused)),
            (Ending::Release, other) => {
                Err(self.unexpected("release script", &format!("{other:?}")))
            }
            (Ending::Hold { .. }, other) => {
                Err(self.unexpected("hold script", &format!("{other:?}")))
            }
        }
    }

    /// The history's half: 1, or the failed step and its error, as text
    /// (see `scripts::record`).
    fn appended(&self, v: Value) -> Result<(), NodeError> {
        match v {
            Value::Int(1) => Ok(()),
            Value::BulkString(b) => Err(error::script_error(
                &self.name,
                &String::from_utf8_lossy(&b),
            )),
            Value::SimpleString(s) => Err(error::script_error(&self.name, &s)),
            Value::ServerError(e) => Err(server_error(&self.name, &e)),
            other => Err(self.unexpected("history script", &format!("{other:?}"))),
        }
    }

    // Plain EVAL rather than EVALSHA: a once-per-run CLI would pay a NOSCRIPT
    // round trip and a SCRIPT LOAD on every fresh node, and the scripts are tiny.
    fn eval(&mut self, cmd: &redis::Cmd) -> Result<Value, NodeError> {
        self.write(cmd, b"", |_| false)
    }

    /// Runs `cmd`, and when `wrote` says it changed the lock on `key` and
    /// --replicas N asks for it, WAIT for N replicas on the same connection
    /// (WAIT counts the writes of its own connection) within what is left of
    /// the node timeout. A write too few replicas acknowledged is an error:
    /// the node does not count, and the write is undone there like any
    /// other that failed (a primary that fails over before its replica has
    /// the key would lose the lock).
    ///
    /// A Sentinel group's primary that answers READONLY has been demoted:
    /// the request goes again to the primary the sentinels name now.
    fn write(
        &mut self,
        cmd: &redis::Cmd,
        key: &[u8],
        wrote: impl Fn(&Value) -> bool,
    ) -> Result<Value, NodeError> {
        let (reply, replicated) = self.write_apart(cmd, key, wrote)?;
        replicated.map(|()| reply)
    }

    /// `write`, with the replicas' verdict kept apart from the reply (`Ok`
    /// when there was nothing to wait for): for a request whose reply stands
    /// whatever the replicas did, such as a release that carries the run's
    /// history record.
    fn write_apart(
        &mut self,
        cmd: &redis::Cmd,
        key: &[u8],
        wrote: impl Fn(&Value) -> bool,
    ) -> Result<(Value, Result<(), NodeError>), NodeError> {
        let (replicas, timeout, started) = (self.replicas, self.timeout, Instant::now());
        let mut demoted = 0;
        loop {
            let (reply, acked) = self.query(|c| {
                let v = cmd.query::<Value>(c)?;
                if replicas == 0 || !wrote(&v) {
                    return Ok((v, None));
                }
                // WAIT gets what is left of the node timeout. Redis checks
                // blocked clients' timeouts from its event loop, up to 1/hz
                // (100 ms by default) late: the socket waits that much longer
                // for this one reply, so that a slow replica reads as too few
                // acknowledgements, not as a node that did not answer.
                let left = timeout.saturating_sub(started.elapsed());
                let mut wait = redis::cmd("WAIT");
                wait.arg(replicas).arg(millis(left));
                c.set_read_timeout(left + WAIT_LATE)?;
                let acked = c.at_key(&wait, key);
                c.set_read_timeout(timeout)?;
                Ok((v, Some(acked?)))
            })?;
            match reply {
                Value::ServerError(e)
                    if e.code() == "READONLY"
                        && self.target.follows_failover()
                        && demoted < 2
                        && started.elapsed() < timeout =>
                {
                    demoted += 1;
                    self.target.forget();
                    self.conn = None;
                }
                Value::ServerError(e) => return Err(server_error(&self.name, &e)),
                v => {
                    let replicated = match acked {
                        None => Ok(()),
                        Some(Value::Int(n)) if n >= i64::from(replicas) => Ok(()),
                        Some(Value::Int(n)) => Err(NodeError::new(format!(
                            "{}: only {n} of {replicas} replicas acknowledged the write within \
                             {} (--replicas)",
                            self.name,
                            humantime::format_duration(timeout)
                        ))
                        .unreplicated()),
                        Some(Value::ServerError(e)) => Err(server_error(&self.name, &e)),
                        Some(other) => Err(self.unexpected("WAIT", &format!("{other:?}"))),
                    };
                    return Ok((v, replicated));
                }
            }
        }
    }

    /// Runs `f` on this node's connection, connecting first if needed.
    ///
    /// A read or connect interrupted by the process being stopped and
    /// continued (SIGSTOP/SIGCONT, Ctrl-Z and `fg`, a cgroup freezer) fails
    /// with EINTR even without signal handlers; it is retried on a fresh
    /// connection for as long as the node timeout allows (redlock-run's own
    /// connection reads on instead, see `wire`). Every request
    /// redlock-run sends gives the same answer when repeated (an acquire for
    /// our own token, a compare-and-delete that finds the key gone), so a
    /// retry cannot change what happened.
    fn query<T>(&mut self, f: impl Fn(&mut Conn) -> redis::RedisResult<T>) -> Result<T, NodeError> {
        let until = Instant::now() + self.timeout;
        let retry = || Instant::now() < until;
        loop {
            let mut conn = match self.conn.take() {
                Some(c) => c,
                None => match self
                    .target
                    .connect(&self.name, self.timeout, &self.notes, &self.line)
                {
                    Ok(c) => c,
                    Err(Failure::Interrupted(_)) if retry() => continue,
                    Err(f) => return Err(f.into_error().unsent()),
                },
            };
            if let Conn::Own(wire) = &mut conn {
                wire.job = self.job;
            }
            match f(&mut conn) {
                Ok(v) => {
                    self.conn = Some(conn);
                    return Ok(v);
                }
                // Written; the reply is read when this runs again (see
                // `Mode::Record`).
                Err(_) if matches!(&conn, Conn::Own(w) if matches!(w.mode, Mode::Sent { .. })) => {
                    self.conn = Some(conn);
                    return Err(NodeError::new(format!("{}: {DEFERRED}", self.name)));
                }
                Err(e) => {
                    let superseded = matches!(&conn, Conn::Own(w) if w.superseded);
                    let kept = self.keep(conn, &e);
                    if superseded {
                        return Err(NodeError::new(format!(
                            "{}: not sent, a release went out behind it",
                            self.name
                        ))
                        .superseded());
                    }
                    match e {
                        // The crate's connection: a late reply would be read
                        // as the answer to the next request, so one that saw
                        // an error is gone, and the request is made again on
                        // a fresh one.
                        e if interrupted(&e) && retry() && !kept => {}
                        // A Sentinel group's primary that answers READONLY
                        // has been demoted: ask again where the primary is
                        // now.
                        e if e.code() == Some("READONLY")
                            && self.target.follows_failover()
                            && retry() =>
                        {
                            self.target.forget();
                            self.conn = None;
                        }
                        e => {
                            self.target.forget();
                            return Err(error::wording(&self.name, self.timeout, &e));
                        }
                    }
                }
            }
        }
    }

    /// After a request on `conn` failed with `e`: keeps redlock-run's own
    /// connection to a plain server when it only timed out (the reply owed
    /// is discarded when it comes, see `wire`), so that the node's next
    /// requests follow on the same connection, in order; every other
    /// connection is dropped. True when kept.
    fn keep(&mut self, conn: Conn, e: &redis::RedisError) -> bool {
        match conn {
            Conn::Own(wire) if wire.superseded => {
                self.conn = Some(Conn::Own(wire));
                true
            }
            Conn::Own(wire) if e.is_timeout() && !self.target.follows_failover() => {
                self.conn = Some(Conn::Own(wire));
                true
            }
            // A Sentinel group's primary is looked up again; what is written
            // behind still goes out on this connection until a new one is made.
            Conn::Own(wire) => {
                wire.discard(e.is_timeout());
                false
            }
            _ => false,
        }
    }

    /// A Sentinel group's primary may have changed while the connection to
    /// the old one still works: see `Group::recheck`.
    fn follow_primary(&mut self) {
        if self.conn.is_some()
            && let Some(note) = self.target.recheck(&self.name, self.timeout)
        {
            self.conn = None;
            super::lock(&self.notes).push(note);
        }
    }

    fn unexpected(&self, what: &str, reply: &str) -> NodeError {
        unexpected(&self.name, what, reply)
    }
}

/// RELEASE: compare-and-delete, waking waiters when `announce`.
fn release_cmd(books: &Books, token: &str, announce: bool) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    if books.shared {
        return shared_release_cmd(books, token, announce, None);
    }
    cmd.arg(RELEASE)
        .arg(5)
        .arg(&books.lock)
        .arg(&books.holder)
        .arg(&books.queue)
        .arg(&books.waiters)
        .arg(books.entries())
        .arg(token);
    if announce {
        cmd.arg(&books.released);
    } else {
        cmd.arg("");
    }
    cmd.arg(books.front()).arg(books.member(token));
    cmd
}

/// A reader's release (RELEASE_SHARED), with the history append of
/// `entry` (its key and record) where one is given.
fn shared_release_cmd(
    books: &Books,
    token: &str,
    announce: bool,
    entry: Option<(&[u8], &str)>,
) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    match entry {
        Some(_) => cmd.arg(RELEASE_SHARED_RECORDING).arg(5),
        None => cmd.arg(RELEASE_SHARED).arg(4),
    };
    cmd.arg(&books.readers)
        .arg(&books.reader_records)
        .arg(&books.queue)
        .arg(&books.waiters);
    if let Some((key, _)) = entry {
        cmd.arg(key);
    }
    cmd.arg(token);
    if announce {
        cmd.arg(&books.released);
    } else {
        cmd.arg("");
    }
    cmd.arg(books.front());
    if let Some((_, record)) = entry {
        history_args(&mut cmd, record);
    }
    cmd
}

fn hold_cmd(books: &Books, token: &str, left: Duration, exit_code: u8) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    if books.shared {
        cmd.arg(HOLD_SHARED)
            .arg(2)
            .arg(&books.readers)
            .arg(&books.reader_records)
            .arg(token)
            .arg(millis(left));
        return cmd;
    }
    cmd.arg(HOLD)
        .arg(3)
        .arg(&books.lock)
        .arg(&books.holder)
        .arg(books.entries());
    cmd.arg(token)
        .arg(millis(left))
        .arg(crate::lock::unix_ms())
        .arg(exit_code)
        .arg(books.member(token));
    cmd
}

fn append_cmd(key: &[u8], record: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(APPEND).arg(1).arg(key);
    history_args(&mut cmd, record);
    cmd
}

fn recording_cmd(
    books: &Books,
    token: &str,
    ending: Ending,
    key: &[u8],
    record: &str,
) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    if books.shared {
        match ending {
            Ending::Release => {
                return shared_release_cmd(books, token, true, Some((key, record)));
            }
            Ending::Hold { left, .. } => {
                cmd.arg(HOLD_SHARED_RECORDING)
                    .arg(3)
                    .arg(&books.readers)
                    .arg(&books.reader_records)
                    .arg(key)
                    .arg(token)
                    .arg(millis(left));
                history_args(&mut cmd, record);
                return cmd;
            }
        }
    }
    match ending {
        Ending::Release => {
            cmd.arg(RELEASE_RECORDING)
                .arg(6)
                .arg(&books.lock)
                .arg(&books.holder)
                .arg(&books.queue)
                .arg(&books.waiters);
            cmd.arg(key)
                .arg(books.entries())
                .arg(token)
                .arg(&books.released)
                .arg(books.front());
        }
        Ending::Hold { left, exit_code } => {
            cmd.arg(HOLD_RECORDING)
                .arg(4)
                .arg(&books.lock)
                .arg(&books.holder);
            cmd.arg(key)
                .arg(books.entries())
                .arg(token)
                .arg(millis(left))
                .arg(crate::lock::unix_ms())
                .arg(exit_code);
        }
    }
    history_args(&mut cmd, record);
    cmd.arg(books.member(token));
    cmd
}

/// The requests a node may be sent behind an unanswered one, as bytes
/// (see `Node::write_behind`): the same as the session's.
pub mod behind {
    use super::*;

    pub fn release(books: &Books, token: &str, announce: bool) -> Vec<u8> {
        release_cmd(books, token, announce).get_packed_command()
    }

    pub fn hold(books: &Books, token: &str, left: Duration, exit_code: u8) -> Vec<u8> {
        hold_cmd(books, token, left, exit_code).get_packed_command()
    }

    /// The end of a run, as `Session::end_run` sends it.
    pub fn end_run(
        books: &Books,
        token: &str,
        ending: Option<Ending>,
        entry: Option<(&[u8], &str)>,
    ) -> Option<Vec<u8>> {
        let cmd = match (ending, entry) {
            (Some(ending), Some((key, record))) => recording_cmd(books, token, ending, key, record),
            (Some(Ending::Release), None) => release_cmd(books, token, true),
            (Some(Ending::Hold { left, exit_code }), None) => {
                hold_cmd(books, token, left, exit_code)
            }
            (None, Some((key, record))) => append_cmd(key, record),
            (None, None) => return None,
        };
        Some(cmd.get_packed_command())
    }
}

/// The record, and the history's length and lifetime (`HISTORY_CAP`,
/// `HISTORY_TTL`): the last three arguments of every script that appends.
fn history_args(cmd: &mut redis::Cmd, record: &str) {
    cmd.arg(record).arg(HISTORY_CAP).arg(millis(HISTORY_TTL));
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
