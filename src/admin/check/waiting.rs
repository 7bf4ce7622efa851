//! With `--wait`, what a waiter needs besides the lock: the queue's
//! commands (which the acquire runs under pcall, so that an ACL without
//! them costs a waiter its place in line, never the lock: the probe's lock
//! alone would not meet them), the PUBLISH that wakes the front of the
//! queue, and SUBSCRIBE to its channel. Each is tried on the probe's own
//! keys and channel; what a node refuses is a warning, as it costs fairness
//! and wake-ups, not the lock.

use redis::{Cmd, Value};

use super::{Finding, Level, Report};
use crate::cli::Config;
use crate::lock::node::{self, NodeError, Nodes, Request};
use crate::lock::quorum;

/// Each command the queue uses, on the probe's queue (KEYS[1]) and its
/// waiters (KEYS[2]) for token ARGV[1], and the PUBLISH to channel ARGV[2],
/// each under pcall; the first the node refuses, as `ZADD: <error>`, else 1.
/// What was added is taken back (and expires in a second regardless).
const QUEUE_STEPS: &str = "\
local steps = {
  {'TIME'},
  {'EXISTS', KEYS[1]},
  {'HSET', KEYS[2], ARGV[1], '1'},
  {'ZADD', KEYS[1], 'NX', '1', ARGV[1]},
  {'PEXPIRE', KEYS[1], '1000'},
  {'PEXPIRE', KEYS[2], '1000'},
  {'ZSCORE', KEYS[1], ARGV[1]},
  {'ZRANGE', KEYS[1], '0', '0'},
  {'HGET', KEYS[2], ARGV[1]},
  {'ZCARD', KEYS[1]},
  {'ZREM', KEYS[1], ARGV[1]},
  {'HDEL', KEYS[2], ARGV[1]},
  {'PUBLISH', ARGV[2], ''},
}
for _, s in ipairs(steps) do
  local r = redis.pcall(unpack(s))
  if type(r) == 'table' and r.err then
    redis.pcall('ZREM', KEYS[1], ARGV[1])
    redis.pcall('HDEL', KEYS[2], ARGV[1])
    return s[1] .. ': ' .. r.err
  end
end
return 1";

struct QueueSteps {
    queue: Vec<u8>,
    waiters: Vec<u8>,
    token: String,
    channel: Vec<u8>,
}

impl Request for QueueSteps {
    type Answer = Option<String>;

    fn command(&self, _: usize) -> Option<Cmd> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(QUEUE_STEPS)
            .arg(2)
            .arg(&self.queue)
            .arg(&self.waiters)
            .arg(&self.token)
            .arg(&self.channel);
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        &self.queue
    }

    fn decode(&self, _: usize, v: Value, _: &str) -> Result<Option<String>, NodeError> {
        Ok(match v {
            Value::Int(1) => None,
            Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            other => Some(format!("{other:?}")),
        })
    }
}

/// The queue's steps and the waiter's subscription on every node, each
/// refusal a warning on its node.
pub(super) fn queue_and_wake_up(nodes: &Nodes, c: &Config, token: &str, report: &mut Report) {
    let every: Vec<usize> = (0..nodes.len()).collect();
    let mut channel = c.keys.released();
    channel.push(b':');
    channel.extend_from_slice(token.as_bytes());
    let replies = quorum::on_each(
        nodes,
        &every,
        QueueSteps {
            queue: c.keys.queue(),
            waiters: c.keys.waiters(),
            token: token.to_string(),
            channel: channel.clone(),
        },
        crate::admin::limit(nodes),
    );
    for r in replies {
        if let Ok(Some(why)) = r.result {
            let step = why.split(':').next().unwrap_or("").to_string();
            let said = if node::refused_by_acl(&why) {
                format!("the ACL refuses {step}")
            } else {
                why.clone()
            };
            report.on(
                r.node,
                Finding::new(
                    "acl",
                    Level::Warn,
                    format!(
                        "{said}: waiters are not queued (they race as with --wait-unfair) or \
                         not woken"
                    ),
                )
                .advice("allow the queue's commands the README's ACL line lists"),
            );
        }
    }
    subscribe(nodes, &c.keys, &channel, report);
}

/// SUBSCRIBE to the probe's own wake-up channel on every node, side by side,
/// each given up once it stands (or failed).
fn subscribe(nodes: &Nodes, keys: &crate::lock::keys::Keys, channel: &[u8], report: &mut Report) {
    let results: Vec<Option<NodeError>> = std::thread::scope(|s| {
        let handles: Vec<_> = nodes
            .iter()
            .map(|n| {
                s.spawn(move || {
                    let mut failed = None;
                    n.watch(
                        &[channel.to_vec()],
                        keys.lock(),
                        |r| failed = r.err(),
                        || false,
                        || false,
                    );
                    failed
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect()
    });
    for (i, failed) in results.into_iter().enumerate() {
        let Some(e) = failed else { continue };
        let why = e.to_string();
        let said = if node::denied(&why) {
            "the ACL refuses SUBSCRIBE to the lock's channels (&{<prefix><name>}:*)".to_string()
        } else {
            why
        };
        report.on(
            i,
            Finding::new(
                "acl",
                Level::Warn,
                format!("{said}: waiters are not woken by a release and look again on their own"),
            )
            .advice("allow +subscribe and the lock's channels, as the README's ACL line does"),
        );
    }
}
