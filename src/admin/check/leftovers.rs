//! The probe's keys removed after it, on every node: DEL, and where the
//! node refuses DEL (an ACL without it, which the probe's release has met
//! already and said), PEXPIRE of 0 instead (the node deletes a key given no
//! time left), so that nothing of
//! the probe stays, its fence counter (which has no expiry) included. A
//! node that keeps any of them is unfit, and they are named.

use redis::{Cmd, Value};

use super::{Finding, Level, Report};
use crate::cli::Config;
use crate::lock::keys::{self, Keys};
use crate::lock::node::{Kind, NodeError, Nodes, Request};
use crate::lock::{Taking, quorum};

/// DEL of the probe's keys: the name is check's own.
struct Remove {
    keys: Vec<Vec<u8>>,
}

impl Request for Remove {
    type Answer = ();

    fn command(&self, _: usize) -> Option<Cmd> {
        let mut cmd = redis::cmd("DEL");
        for k in &self.keys {
            cmd.arg(k);
        }
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        self.keys.first().map_or(b"", Vec::as_slice)
    }

    fn decode(&self, _: usize, _: Value, _: &str) -> Result<(), NodeError> {
        Ok(())
    }
}

/// Each of KEYS given no time left, which deletes it at once (a millisecond
/// left it to be listed a moment longer); the first PEXPIRE the node
/// refuses, as `PEXPIRE: <error>`, else 1.
const EXPIRE_SOON: &str = "\
for _, k in ipairs(KEYS) do
  local r = redis.pcall('PEXPIRE', k, 0)
  if type(r) == 'table' and r.err then
    return 'PEXPIRE: ' .. r.err
  end
end
return 1";

/// The probe's keys deleted by PEXPIRE, where DEL was refused: what the
/// node refused, if it did.
struct ExpireSoon {
    keys: Vec<Vec<u8>>,
}

impl Request for ExpireSoon {
    type Answer = Option<String>;

    fn command(&self, _: usize) -> Option<Cmd> {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(EXPIRE_SOON).arg(self.keys.len());
        for k in &self.keys {
            cmd.arg(k);
        }
        Some(cmd)
    }

    fn key(&self) -> &[u8] {
        self.keys.first().map_or(b"", Vec::as_slice)
    }

    fn decode(&self, _: usize, v: Value, _: &str) -> Result<Option<String>, NodeError> {
        Ok(match v {
            Value::Int(1) => None,
            Value::BulkString(b) => Some(String::from_utf8_lossy(&b).into_owned()),
            other => Some(format!("{other:?}")),
        })
    }
}

/// Every key the probe may have made.
fn probe_keys(keys: &Keys, c: &Config, window: Option<u64>) -> Vec<Vec<u8>> {
    let mut all = vec![
        keys.lock().to_vec(),
        keys.holder(None),
        keys.fence(),
        keys.legacy_fence(),
        keys.slots(),
        keys.readers(),
        keys.reader_records(),
        keys.queue(),
        keys.waiters(),
        keys.history(),
    ];
    if let Taking::Slot(n) = c.taking() {
        for i in 0..n {
            all.push(keys.slot(i));
            all.push(keys.holder(Some(i)));
        }
    }
    all.extend(window.map(|w| keys.once(w)));
    all
}

/// Removes every key the probe may have made, on every node; a node that
/// keeps some gets a finding naming them.
pub(super) fn clean(
    nodes: &Nodes,
    keys: &Keys,
    c: &Config,
    window: Option<u64>,
    report: &mut Report,
) {
    let all = probe_keys(keys, c, window);
    let every: Vec<usize> = (0..nodes.len()).collect();
    let limit = crate::admin::limit(nodes);
    let replies = quorum::on_each(nodes, &every, Remove { keys: all.clone() }, limit);
    let refused: Vec<usize> = replies
        .iter()
        .filter(|r| r.result.as_ref().is_err_and(|e| e.kind() == Kind::Server))
        .map(|r| r.node)
        .collect();
    if refused.is_empty() {
        return;
    }
    let soon = quorum::on_each(nodes, &refused, ExpireSoon { keys: all.clone() }, limit);
    for r in soon {
        let why = match r.result {
            Ok(None) => continue,
            Ok(Some(why)) => why,
            Err(e) => e.to_string(),
        };
        let lock = keys::show(keys.lock());
        report.on(
            r.node,
            Finding::new(
                "probe",
                Level::Unfit,
                format!(
                    "the probe's keys may stay on the node, the fence counter without expiry: \
                     neither DEL nor PEXPIRE of them was allowed ({why})"
                ),
            )
            .advice(format!(
                "delete {lock} and {{{lock}}}:* as a user that may, and allow DEL"
            )),
        );
    }
}
