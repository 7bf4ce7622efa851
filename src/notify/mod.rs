//! Telling someone how a run went: `--ping` (the healthchecks.io protocol,
//! which runitor, hc-ping and self-hosted healthchecks speak too) and
//! `--on-failure` (`hook`).
//!
//! A ping never stands in the lock's way: the start ping goes out on a
//! thread of its own once the command has started, the end ping after the
//! release, each within `--ping-timeout` (its tries included), and a ping
//! that fails is one warning line at the end of the run.
//!
//! - `url`: the ping URL, checked and masked (its path is the secret);
//! - `http`: one ping over HTTP(S), with its tries;
//! - `proxy`: the proxy curl would use;
//! - `hook`: the `--on-failure` command.

mod hook;
mod http;
mod proxy;
mod url;

use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::log::{Log, ev};

pub(crate) use hook::run as run_hook;
pub(crate) use url::{PingUrl, mask};

use http::{Client, Delivery};
use rand::TryRng;
use rand::rngs::SysRng;

/// How long after the end's deadline the start ping's outcome is still
/// waited for (see `Pings::finish`).
const START_GRACE: Duration = Duration::from_millis(200);

/// A run's id: a random UUID (version 4). The service pairs a run's start
/// ping with its end ping by it.
pub(crate) fn run_id() -> String {
    // From the OS, as the lock's token: the thread's generator, seeded for
    // this alone, checks CPU features first (CPUID traps to a VM's host).
    let mut b = [0u8; 16];
    if SysRng.try_fill_bytes(&mut b).is_err() {
        b = rand::random();
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The ping that ends a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// `URL/<status>`: the run's exit status (0 success, else failure).
    Status(u8),
    /// `URL/fail`: the command could not run (no quorum).
    Fail,
    /// `URL/log`: an event that changes nothing (the lock was busy).
    Log,
}

impl End {
    fn suffix(self) -> String {
        match self {
            End::Status(code) => code.to_string(),
            End::Fail => "fail".into(),
            End::Log => "log".into(),
        }
    }
}

/// How many of a run's pings reached the service, and how many did not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub sent: u32,
    pub failed: u32,
}

/// The start ping's outcome, and its client for the end ping.
struct Started {
    delivery: Delivery,
    client: Option<Client>,
}

/// The pings of one run.
pub(crate) struct Pings {
    url: PingUrl,
    rid: String,
    /// Each ping's time, its tries included.
    timeout: Duration,
    /// `--tls-ca`'s PEM, trusted beside the system's roots.
    tls_ca: Option<Vec<u8>>,
    log: Log,
    /// The start ping's thread, once it was started.
    start: Mutex<Option<mpsc::Receiver<Started>>>,
}

impl Pings {
    pub(crate) fn new(
        url: PingUrl,
        rid: String,
        timeout: Duration,
        tls_ca: Option<Vec<u8>>,
        log: Log,
    ) -> Pings {
        Pings {
            url,
            rid,
            timeout,
            tls_ca,
            log,
            start: Mutex::new(None),
        }
    }

    /// `URL/start`, sent from a thread of its own: called once the command
    /// has started, so that nothing waits for it.
    pub(crate) fn start(&self) {
        let (tx, rx) = mpsc::channel();
        let (url, rid, ca, log) = (
            self.url.clone(),
            self.rid.clone(),
            self.tls_ca.clone(),
            self.log,
        );
        let deadline = Instant::now() + self.timeout;
        let spawned = std::thread::Builder::new()
            .name("ping".into())
            .spawn(move || {
                let (delivery, client) =
                    send(None, &url, ca.as_deref(), "start", &rid, None, deadline);
                tell(&log, &url, "start", &delivery);
                let _ = tx.send(Started { delivery, client });
            });
        if let Ok(_thread) = spawned {
            *self.start.lock().unwrap_or_else(|p| p.into_inner()) = Some(rx);
        }
    }

    /// After the release: waits for the start ping (it ends within its own
    /// time), then sends `end` with its body, all before `deadline`. One
    /// warning line for every ping that failed.
    pub(crate) fn finish(&self, end: Option<(End, String)>, deadline: Instant) -> Tally {
        let mut tally = Tally::default();
        let mut failed: Vec<String> = Vec::new();
        let mut client = None;
        let pending = self.start.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(rx) = pending {
            // The start ping ends by its own deadline, which is before this
            // one: the grace covers a client's lateness in giving up.
            let wait = deadline.saturating_duration_since(Instant::now()) + START_GRACE;
            let started = rx.recv_timeout(wait).unwrap_or_else(|_| Started {
                delivery: Delivery::Failed {
                    why: "no answer".into(),
                    tries: 1,
                    took: self.timeout,
                },
                client: None,
            });
            count(&mut tally, &mut failed, "start", &started.delivery);
            client = started.client;
        }
        if let Some((end, body)) = end {
            let suffix = end.suffix();
            let (delivery, _) = send(
                client,
                &self.url,
                self.tls_ca.as_deref(),
                &suffix,
                &self.rid,
                Some(body.as_bytes()),
                deadline,
            );
            tell(&self.log, &self.url, &suffix, &delivery);
            count(&mut tally, &mut failed, &suffix, &delivery);
        }
        if !failed.is_empty() {
            self.log.error(
                ev(
                    "ping",
                    format!("warning: --ping {}: {}", self.url, failed.join("; ")),
                )
                .outcome("ping-failed")
                .field("pings_failed", tally.failed),
            );
        }
        tally
    }
}

/// One ping, `URL/<suffix>`, on `client` or on a new one (also returned).
fn send(
    client: Option<Client>,
    url: &PingUrl,
    ca: Option<&[u8]>,
    suffix: &str,
    rid: &str,
    body: Option<&[u8]>,
    deadline: Instant,
) -> (Delivery, Option<Client>) {
    let client = match client.map_or_else(|| Client::new(url, ca), Ok) {
        Ok(c) => c,
        Err(why) => {
            let took = Duration::ZERO;
            return (
                Delivery::Failed {
                    why,
                    tries: 0,
                    took,
                },
                None,
            );
        }
    };
    let delivery = http::deliver(&client, url, &url.ping(suffix, rid), body, deadline);
    (delivery, Some(client))
}

/// -v: a ping that reached the service.
fn tell(log: &Log, url: &PingUrl, suffix: &str, delivery: &Delivery) {
    if let Delivery::Sent { status, tries } = delivery {
        log.info(|| {
            ev(
                "ping",
                format!(
                    "ping {url}/{suffix}: HTTP {status}{}",
                    if *tries > 1 {
                        format!(" after {tries} tries")
                    } else {
                        String::new()
                    }
                ),
            )
            .outcome("ping-sent")
        });
    }
}

/// Counts `delivery`, and words it when it failed.
fn count(tally: &mut Tally, failed: &mut Vec<String>, suffix: &str, delivery: &Delivery) {
    match delivery {
        Delivery::Sent { .. } => tally.sent += 1,
        Delivery::Failed { why, tries, took } => {
            tally.failed += 1;
            let took = crate::log::span(*took);
            failed.push(match tries {
                0 => format!("/{suffix} not sent: {why}"),
                1 => format!("/{suffix} not sent: {why} (1 try, {took})"),
                n => format!("/{suffix} not sent: {why} ({n} tries, {took})"),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_version_4_uuids() {
        let a = run_id();
        let b = run_id();
        assert_ne!(a, b);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{a}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{a}");
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
    }

    #[test]
    fn ends_name_their_ping() {
        assert_eq!(End::Status(0).suffix(), "0");
        assert_eq!(End::Status(143).suffix(), "143");
        assert_eq!(End::Fail.suffix(), "fail");
        assert_eq!(End::Log.suffix(), "log");
    }
}
