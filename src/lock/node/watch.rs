//! Waiting for a release: a connection of its own subscribed to the lock's
//! announcement channel, on a thread of its own (a subscribed connection
//! can do nothing else). It is made the one way every connection is (see
//! `state`), so a Sentinel group's primary and a Cluster's slot master are
//! found as for any request.

use std::time::{Duration, Instant};

use super::error::NodeError;
use super::state::{Req, State};
use super::{Node, step};

/// How soon a dropped subscription is tried again while its node refuses:
/// first at once, then doubling from the first to the second.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(20);
const RESUBSCRIBE_MAX: Duration = Duration::from_millis(500);

/// How often a subscribed connection that hears nothing checks whether the
/// wait is over.
const LOOK: Duration = Duration::from_millis(200);

impl Node {
    /// Blocks on a connection of its own subscribed to `channels` (whose
    /// hash slot is `key`'s): `ready` once the first subscription stands (or
    /// failed), then `wake` for every message, until `wake` returns false or
    /// `alive` says the wait is over.
    ///
    /// A subscription that drops (the node restarted, `CLIENT KILL TYPE
    /// pubsub`, a proxy's idle timeout) is made again at once, then with a
    /// pause doubling up to `RESUBSCRIBE_MAX` while the node refuses or the
    /// subscription drops again at once; each new one calls `wake` too,
    /// since a release may have come while nobody listened.
    ///
    /// A release PUBLISHes from the node that held the lock: on a Sentinel
    /// group that is the primary, and on a Cluster every node hears it
    /// (Cluster forwards PUBLISH to every node).
    pub(crate) fn watch(
        &self,
        channels: &[Vec<u8>],
        key: &[u8],
        ready: impl FnOnce(Result<(), NodeError>),
        mut wake: impl FnMut() -> bool,
        alive: impl Fn() -> bool,
    ) {
        let mut ready = Some(ready);
        let mut pause = Duration::ZERO;
        loop {
            let since = Instant::now();
            let mut state = State::subscriber();
            match self.subscribe(&mut state, channels, key) {
                Err(e) => {
                    if let Some(ready) = ready.take() {
                        ready(Err(e));
                    }
                    pause = (pause * 2).clamp(RESUBSCRIBE_MIN, RESUBSCRIBE_MAX);
                }
                Ok(()) => {
                    let woken = match ready.take() {
                        Some(ready) => {
                            ready(Ok(()));
                            true
                        }
                        None => wake(),
                    };
                    if woken {
                        self.listen(&mut state, &mut wake, &alive);
                    }
                    // Once at once; a subscription that keeps dropping as
                    // soon as it stands backs off.
                    pause = if since.elapsed() >= RESUBSCRIBE_MAX {
                        Duration::ZERO
                    } else {
                        (pause * 2).clamp(RESUBSCRIBE_MIN, RESUBSCRIBE_MAX)
                    };
                }
            }
            state.close(Instant::now());
            if !alive() {
                return;
            }
            std::thread::sleep(pause);
        }
    }

    /// SUBSCRIBE on `state`'s own connection, answered within the node's
    /// time.
    fn subscribe(
        &self,
        state: &mut State,
        channels: &[Vec<u8>],
        key: &[u8],
    ) -> Result<(), NodeError> {
        let mut cmd = redis::cmd("SUBSCRIBE");
        for c in channels {
            cmd.arg(c);
        }
        let ticket = state.ticket();
        let now = Instant::now();
        let req = Req::new(
            ticket,
            std::sync::Arc::new(cmd.get_packed_command()),
            crate::lock::keys::hash_slot(key),
            now,
        );
        state.submit(self, req, now);
        let until = now + self.expiry();
        loop {
            if let Some(answer) = state.take(ticket) {
                return match answer?.reply {
                    redis::Value::ServerError(e) => Err(super::error::server_error(&self.name, &e)),
                    _ => Ok(()),
                };
            }
            if Instant::now() >= until {
                return Err(super::error::timed_out(&self.name, self.timeout));
            }
            step(&mut [(self, &mut *state)], until);
        }
    }

    /// Hands each message to `wake` until it says stop, `alive` says the
    /// wait is over, or the connection drops. Messages may be far apart:
    /// no timeout ends the subscription.
    fn listen(
        &self,
        state: &mut State,
        wake: &mut impl FnMut() -> bool,
        alive: &impl Fn() -> bool,
    ) {
        while alive() && state.connected() {
            step(&mut [(self, &mut *state)], Instant::now() + LOOK);
            for _ in state.messages() {
                if !wake() {
                    return;
                }
            }
        }
    }
}
