//! The run history on the nodes: a list beside the lock (`Keys::history`),
//! one record per run (see `crate::history`), newest first, at most
//! [`HISTORY_CAP`] long, expiring [`HISTORY_TTL`] after the last append, so
//! that a retired job's history goes away on its own.
//!
//! A run's record goes to every node in the same pipeline as its release (or
//! `--hold`), so recording costs no round trip: one write, one read, per
//! node, as before. Nodes the lock was never on get the append alone, in
//! parallel. Either way it is information only: an append that a node
//! refuses (an ACL without LPUSH, a full server) is logged under `-v` and
//! changes nothing about the release.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::lock::node::{Books, HOLD, NodeError, RELEASE, Released, Session};
use crate::lock::quorum::{self, Reply};
use crate::lock::redlock::Answer;
use crate::lock::{Lock, unix_ms};
use crate::log::{Log, ev};

/// Runs kept per lock, on each node.
pub const HISTORY_CAP: usize = 100;

/// How long a history outlives its last run: long enough for a monthly job
/// to always find last month's run.
pub const HISTORY_TTL: Duration = Duration::from_secs(35 * 24 * 3600);

/// Pushes ARGV[1] onto the list KEYS[1] unless it is the newest entry there
/// already (the same request repeated after EINTR), keeps the newest
/// ARGV[2] entries, and sets the list to expire in ARGV[3] ms.
const APPEND: &str = "\
if redis.call('LINDEX', KEYS[1], 0) ~= ARGV[1] then
  redis.call('LPUSH', KEYS[1], ARGV[1])
end
redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1";

/// How a held lock ends once the command's tree is gone.
#[derive(Clone, Copy, Debug)]
pub enum Ending {
    /// Compare-and-delete, waking waiters.
    Release,
    /// `--hold`: left to expire in `left`, the record saying how the command
    /// exited.
    Hold { left: Duration, exit_code: u8 },
}

/// What the end of a run did on one node.
pub struct Ended {
    /// The lock's part, where it was ours to end.
    pub lock: Option<Finish>,
    /// The history's part, when there was a record to append.
    pub recorded: Option<Result<(), NodeError>>,
}

/// The answer of the release or hold script.
pub enum Finish {
    Released(Released),
    Held(Answer),
}

impl Lock {
    /// Ends a held lock as `ending` says and, with a record, appends it to
    /// the history on every node, in the same request where the lock is
    /// ours. Waits for the nodes as a release does (see `quorum::on_each`).
    pub fn end(&self, ending: Ending, record: Option<String>, log: &Log) {
        let holding = self.holding();
        let which: Vec<usize> = if record.is_some() {
            (0..self.nodes.len()).collect()
        } else {
            holding.clone()
        };
        if which.is_empty() {
            return;
        }
        let (books, token) = (self.books(), Arc::clone(&self.token));
        let history: Arc<[u8]> = self.keys.history().into();
        let record: Option<Arc<str>> = record.map(Into::into);
        let ours = holding.clone();
        let replies = quorum::on_each_indexed(
            &self.nodes,
            &which,
            move |i, s| {
                let entry = record.as_deref().map(|r| (&history[..], r));
                s.end_run(&books, &token, ours.contains(&i).then_some(ending), entry)
            },
            self.round_limit(),
        );
        let mut ends: Vec<Reply<Finish>> = Vec::new();
        for r in replies {
            let (node, latency) = (r.node, r.latency);
            let name = self.nodes[node].name();
            let not_recorded = |e: &NodeError| {
                log.info(|| {
                    ev("history", format!("run not recorded in the history: {e}"))
                        .node(name)
                        .outcome("error")
                })
            };
            match r.result {
                Ok(ended) => {
                    if let Some(Err(e)) = &ended.recorded {
                        not_recorded(e);
                    }
                    if let Some(f) = ended.lock {
                        ends.push(Reply {
                            node,
                            result: Ok(f),
                            latency,
                        });
                    }
                }
                Err(e) if holding.contains(&node) => ends.push(Reply {
                    node,
                    result: Err(e),
                    latency,
                }),
                Err(e) => not_recorded(&e),
            }
        }
        match ending {
            Ending::Release => {
                let released: Vec<Reply<Released>> = ends
                    .into_iter()
                    .filter_map(|r| {
                        let result = match r.result {
                            Ok(Finish::Released(x)) => Ok(x),
                            Ok(Finish::Held(_)) => return None,
                            Err(e) => Err(e),
                        };
                        Some(Reply {
                            node: r.node,
                            result,
                            latency: r.latency,
                        })
                    })
                    .collect();
                self.log_releases(&holding, &released, log);
            }
            Ending::Hold { left, .. } => {
                let held: Vec<Reply<Answer>> = ends
                    .into_iter()
                    .filter_map(|r| {
                        let result = match r.result {
                            Ok(Finish::Held(a)) => Ok(a),
                            Ok(Finish::Released(_)) => return None,
                            Err(e) => Err(e),
                        };
                        Some(Reply {
                            node: r.node,
                            result,
                            latency: r.latency,
                        })
                    })
                    .collect();
                self.log_holds(&held, left, log);
            }
        }
    }
}

impl Session {
    /// The end of a run on this node: `ending` where the lock may be ours,
    /// and the append of `entry` (the history key and the record), both in
    /// one pipeline when there are both.
    pub fn end_run(
        &mut self,
        books: &Books,
        token: &str,
        ending: Option<Ending>,
        entry: Option<(&[u8], &str)>,
    ) -> Result<Ended, NodeError> {
        match (ending, entry) {
            (Some(ending), Some((key, record))) => {
                let mut pipe = redis::pipe();
                pipe.add_command(end_cmd(books, token, ending))
                    .add_command(append_cmd(key, record))
                    .ignore_errors();
                let replies: Vec<Value> = self.query(|c| pipe.query(c))?;
                let mut replies = replies.into_iter();
                let (Some(lock), Some(append)) = (replies.next(), replies.next()) else {
                    return Err(self.unexpected("end of run", "fewer than two replies"));
                };
                Ok(Ended {
                    lock: Some(self.finish_of(ending, lock)?),
                    recorded: Some(self.appended(append)),
                })
            }
            (Some(ending), None) => {
                let lock = match ending {
                    Ending::Release => Finish::Released(self.release(books, token, true)?),
                    Ending::Hold { left, exit_code } => {
                        Finish::Held(self.hold(books, token, left, exit_code)?)
                    }
                };
                Ok(Ended {
                    lock: Some(lock),
                    recorded: None,
                })
            }
            (None, Some((key, record))) => {
                let cmd = append_cmd(key, record);
                let recorded = self.eval(&cmd).and_then(|v| self.appended(v));
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

    fn finish_of(&self, ending: Ending, v: Value) -> Result<Finish, NodeError> {
        match (ending, v) {
            (_, Value::ServerError(e)) => Err(self.server_error(&e)),
            (Ending::Release, Value::Int(1)) => Ok(Finish::Released(Released::Deleted)),
            (Ending::Release, Value::Int(-1)) => Ok(Finish::Released(Released::AlreadyGone)),
            (Ending::Release, Value::Int(0)) => Ok(Finish::Released(Released::NotOurs)),
            (Ending::Hold { .. }, Value::Int(1)) => Ok(Finish::Held(Answer::Granted)),
            (Ending::Hold { .. }, Value::Int(0)) => Ok(Finish::Held(Answer::Refused)),
            (_, other) => Err(self.unexpected("release script", &format!("{other:?}"))),
        }
    }

    fn appended(&self, v: Value) -> Result<(), NodeError> {
        match v {
            Value::Int(1) => Ok(()),
            Value::ServerError(e) => Err(self.server_error(&e)),
            other => Err(self.unexpected("history script", &format!("{other:?}"))),
        }
    }
}

/// The release or hold script, with the arguments `Session::release` and
/// `Session::hold` send.
fn end_cmd(books: &Books, token: &str, ending: Ending) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    match ending {
        Ending::Release => {
            cmd.arg(RELEASE)
                .arg(2)
                .arg(&books.lock)
                .arg(&books.holder)
                .arg(token)
                .arg(&books.released);
        }
        Ending::Hold { left, exit_code } => {
            cmd.arg(HOLD)
                .arg(2)
                .arg(&books.lock)
                .arg(&books.holder)
                .arg(token)
                .arg(ms(left))
                .arg(unix_ms())
                .arg(exit_code);
        }
    }
    cmd
}

fn append_cmd(key: &[u8], record: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(APPEND)
        .arg(1)
        .arg(key)
        .arg(record)
        .arg(HISTORY_CAP)
        .arg(ms(HISTORY_TTL));
    cmd
}

/// Milliseconds for PX/PEXPIRE, never 0 (which Redis refuses).
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
