//! One node's connections and the requests on them: where each request
//! goes (the server; the primary its sentinels name; the master of the
//! lock's hash slot), finding that out when it is not known, following
//! MOVED, ASK, TRYAGAIN and READONLY, and each request's answer once it
//! comes. Nothing here waits: whoever drives a round (see `quorum`) polls
//! the descriptors `interest` lists and calls `progress`.

use std::collections::VecDeque;
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;
use rustix::event::PollFlags;

use super::Node;
use super::broken::Broken;
use super::error::{self, Kind, NodeError, Step};
use super::link::{Event, Link, Tag};
use super::server::{self, Server};
use super::topology::{Place, Topology, tls_to};

/// How many times one request may be sent elsewhere (MOVED, ASK, a
/// failover) before it fails.
const REDIRECTS: u8 = 5;

/// The pause before a request a Cluster asked to try again (TRYAGAIN,
/// CLUSTERDOWN) is sent again.
const TRY_AGAIN: Duration = Duration::from_millis(20);

/// How late Redis may answer a WAIT after its timeout (see `answered`).
const WAIT_LATE: Duration = Duration::from_millis(250);

/// Answers kept for requests nobody has asked about yet (a request sent
/// without waiting, a reply that came after its round).
const KEPT: usize = 256;

/// A request of the node's, as bytes.
pub(crate) struct Req {
    pub(super) ticket: u64,
    /// Shared by the nodes asked alike (see `Request::asks_alike`).
    pub(super) bytes: Arc<Vec<u8>>,
    /// The hash slot of its keys, for a Cluster.
    pub(super) slot: u16,
    /// A Sentinel group asks its sentinels where the primary is first.
    pub(super) recheck: bool,
    /// The last word on what came before (a release, an undo): see
    /// `State::submit`.
    pub(super) last_word: bool,
    /// --replicas N: once the write is answered, a WAIT for N replicas
    /// follows it on the same connection (WAIT counts the writes of its own
    /// connection). Not written with it: a server blocked in WAIT reads a
    /// connection's end before the release written behind, and drops it.
    pub(super) wait: Option<u32>,
    /// --durable, for a vote: a WAITAOF follows the write the same way,
    /// where the server has it.
    pub(super) durable: bool,
    pub(super) submitted: Instant,
    /// The write's reply, while its WAIT or WAITAOF is owed, and whether
    /// WAITAOF was asked.
    partial: Option<(Value, bool)>,
    redirects: u8,
    /// A Cluster's ASK: this try goes to that node, after ASKING.
    ask: Option<Place>,
    /// Sent with ASKING ahead of it: its first reply is ASKING's.
    asking: bool,
    not_before: Option<Instant>,
    /// Its time ran out and was reported: its reply, if it comes, is late.
    overdue: bool,
}

impl Req {
    /// The command, as written.
    pub(crate) fn bytes(&self) -> &Arc<Vec<u8>> {
        &self.bytes
    }

    pub(super) fn new(ticket: u64, bytes: Arc<Vec<u8>>, slot: u16, now: Instant) -> Req {
        Req {
            ticket,
            bytes,
            slot,
            recheck: false,
            last_word: false,
            wait: None,
            durable: false,
            submitted: now,
            partial: None,
            redirects: 0,
            ask: None,
            asking: false,
            not_before: None,
            overdue: false,
        }
    }
}

/// What decides where a request goes.
struct Want {
    slot: u16,
    /// A Sentinel group is to be asked first.
    recheck: bool,
    ask: Option<Place>,
}

/// A connection to a data server.
struct Data {
    place: Place,
    link: Link,
    steps: Vec<Step>,
    /// The ticket of `server::questions`, until they are answered.
    asked: Option<u64>,
    /// What the server said of itself on this connection.
    server: Option<Arc<Server>>,
}

/// A request's replies, with what its server said of itself.
pub(crate) struct Answered {
    pub(super) reply: Value,
    /// WAIT's answer (--replicas), where one was asked.
    pub(super) acked: Option<Value>,
    /// WAITAOF's answer (--durable), where one was asked.
    pub(super) synced: Option<Value>,
    pub(crate) server: Option<Arc<Server>>,
}

/// A connection to a sentinel or a cluster seed, asked where the data is.
struct Probe {
    place: Place,
    link: Link,
    steps: Vec<Step>,
}

/// A search for the primary (a Sentinel group) or the slot map (a
/// Cluster) under way.
struct Search {
    until: Instant,
    /// The probes asked, and the ticket of each question.
    asked: Vec<(Place, u64)>,
    /// How many places there are to ask.
    places: usize,
    /// Why each place that failed did.
    failed: Vec<(Place, String)>,
    /// A place answered (with an error, or an answer of no use): the
    /// search did not fail for want of time alone.
    heard: bool,
    /// Only to check a primary already known: when no sentinel answers,
    /// that one is kept.
    recheck: bool,
}

/// How a node has fared in this run, for rounds and reports.
#[derive(Default)]
pub(super) struct Health {
    /// A request timed out: rounds that wait for every reply do not wait for
    /// this node again.
    pub(super) timed_out: bool,
    /// The first error it answered (or its first timeout), for the report.
    pub(super) first_error: Option<String>,
    /// It answered at least one request without an error.
    pub(super) answered: bool,
    /// A vote of its did not count: it sat out its restart grace (see
    /// `Node::uncounted`). Not a failure of the node's.
    pub(super) sat_out: Option<String>,
    /// It answered without an error after its last failure.
    pub(super) recovered: bool,
}

impl Health {
    fn note<T>(&mut self, result: &Result<T, NodeError>) {
        match result {
            Ok(_) => {
                self.answered = true;
                self.recovered = self.first_error.is_some();
            }
            // This run's own doing: nothing about the node.
            Err(e) if e.kind() == Kind::Withdrawn => {}
            Err(e) if e.kind() == Kind::Restarted => {
                self.sat_out.get_or_insert_with(|| e.to_string());
            }
            Err(e) => {
                self.recovered = false;
                self.timed_out |= e.is_timeout();
                if self.first_error.is_none() {
                    self.first_error = Some(e.to_string());
                }
            }
        }
    }
}

/// One node's connections and requests.
#[derive(Default)]
pub(crate) struct State {
    data: Vec<Data>,
    probes: Vec<Probe>,
    /// A Sentinel group's primary, once named.
    primary: Option<Place>,
    /// A Cluster's slot map, once known: (first, last, master).
    slots: Vec<(u16, u16, Place)>,
    search: Option<Search>,
    /// Requests not written yet, in the order they were made.
    waiting: VecDeque<Req>,
    /// Requests written and owed a reply, with where they went.
    flight: Vec<(Req, Place)>,
    done: VecDeque<(u64, Result<Answered, NodeError>)>,
    next: u64,
    /// What the server that answered last said of itself.
    pub(super) server: Option<Arc<Server>>,
    /// What happened to the topology, for the log.
    pub(super) notes: Vec<String>,
    /// The primary the sentinels named last, for the notes (`primary` is
    /// given up on when it fails; this stays).
    named: Option<Place>,
    pub(super) health: Health,
    /// A subscriber's: its data connection carries messages (see `watch`).
    push: bool,
    messages: Vec<Value>,
}

impl State {
    /// The state of a connection of its own for a subscription.
    pub(super) fn subscriber() -> State {
        State {
            push: true,
            ..State::default()
        }
    }

    /// Whether a data connection stands (or is being made).
    pub(super) fn connected(&self) -> bool {
        self.data.iter().any(|d| d.link.alive())
    }

    /// For `check`, read only: the server a request for hash `slot` goes
    /// to now, where that is known (the server; a Sentinel group's primary;
    /// a Cluster slot's master), as `host:port`.
    pub(super) fn serving(&self, node: &Node, slot: u16) -> Option<String> {
        match &node.topology {
            Topology::Server { place, .. } => Some(place.authority()),
            Topology::Sentinel { .. } => self.primary.as_ref().map(Place::authority),
            Topology::Cluster { .. } => self.master_of(slot).map(|p| p.authority()),
        }
    }

    /// For `check`, read only: the certificate of each TLS data connection
    /// standing, with the server's `host:port`.
    pub(super) fn peer_certificates(&self) -> Vec<(String, Vec<u8>)> {
        self.data
            .iter()
            .filter_map(|d| Some((d.place.authority(), d.link.peer_certificate()?)))
            .collect()
    }

    /// The messages a subscribed connection has received since the last
    /// call.
    pub(super) fn messages(&mut self) -> Vec<Value> {
        std::mem::take(&mut self.messages)
    }

    /// A number for the next request.
    pub(crate) fn ticket(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Starts the data connection of a plain server ahead of its first
    /// request (see `Nodes::connect`). One that failed at once is dropped
    /// unsaid: the first request opens another, and fails with it.
    pub(super) fn connect(&mut self, node: &Node, now: Instant) {
        let Topology::Server { place, .. } = &node.topology else {
            return;
        };
        let place = place.clone();
        if let Ok(at) = self.data_link(node, &place, now)
            && !self.data[at].link.alive()
        {
            self.data.remove(at);
        }
    }

    /// Queues `req`: written at once where its connection stands.
    pub(crate) fn submit(&mut self, node: &Node, req: Req, now: Instant) {
        if req.last_word {
            // What was asked before it and is not written yet never will
            // be: it goes out alone, now, instead of waiting for a
            // connection or a search the others need. Withdrawn, they were
            // never applied.
            for old in std::mem::take(&mut self.waiting) {
                let why = error::withdrawn(&node.name);
                self.finish(node, old.ticket, Err(why));
            }
        }
        self.waiting.push_back(req);
        self.route(node, now);
    }

    /// A failure that a reply meant (an error reply, a vote that does not
    /// count: see `Node::answer`) counts in the node's part of the run as
    /// a failed connection does.
    pub(crate) fn note_failure(&mut self, e: &NodeError) {
        self.health.note::<()>(&Err(e.clone()));
    }

    /// The answer to `ticket`, once it has come (an error when it could not).
    pub(crate) fn take(&mut self, ticket: u64) -> Option<Result<Answered, NodeError>> {
        let at = self.done.iter().position(|(t, _)| *t == ticket)?;
        self.done.remove(at).map(|(_, r)| r)
    }

    /// When the oldest request not yet answered (nor given up on) was made.
    pub(super) fn waiting_since(&self) -> Option<Instant> {
        let waiting = self.waiting.iter().map(|r| r.submitted);
        let flying = self
            .flight
            .iter()
            .filter(|(r, _)| !r.overdue)
            .map(|(r, _)| r.submitted);
        waiting.chain(flying).min()
    }

    /// The descriptors to wait on, and for what.
    pub(super) fn interest(&self) -> Vec<(BorrowedFd<'_>, PollFlags)> {
        self.data
            .iter()
            .map(|d| &d.link)
            .chain(self.probes.iter().map(|p| &p.link))
            .filter_map(Link::interest)
            .collect()
    }

    /// When `progress` must run next even if no descriptor is ready.
    pub(super) fn wake(&self, node: &Node) -> Option<Instant> {
        let links = self
            .data
            .iter()
            .map(|d| &d.link)
            .chain(self.probes.iter().map(|p| &p.link))
            .filter_map(Link::wake);
        let waiting = self
            .waiting
            .iter()
            .map(|r| r.not_before.unwrap_or(r.submitted + node.expiry()));
        links
            .chain(waiting)
            .chain(self.search.as_ref().map(|s| s.until))
            .min()
    }

    /// Does what can be done now: answers, failures, searches, writes.
    pub(crate) fn progress(&mut self, node: &Node, now: Instant) {
        self.probe(node, now);
        self.route(node, now);
        let mut events = Vec::new();
        let mut i = 0;
        while i < self.data.len() {
            self.data[i].link.progress(now, &mut events);
            let place = self.data[i].place.clone();
            let steps = self.data[i].steps.clone();
            let alive = self.data[i].link.alive();
            for e in events.drain(..) {
                self.on_data(node, &place, &steps, e, now);
            }
            if alive {
                i += 1;
            } else {
                self.data.remove(i);
            }
        }
        // Redirected requests go out now.
        self.route(node, now);
        self.expire(node, now);
        while self.done.len() > KEPT {
            self.done.pop_front();
        }
    }

    /// Ends every connection without losing what was written on it (see
    /// `Link::close`).
    pub(super) fn close(&mut self, now: Instant) {
        for d in &mut self.data {
            d.link.close(now);
        }
        for p in &mut self.probes {
            p.link.close(now);
        }
    }

    /// Writes what waits, in order, where its connection is known; starts
    /// a search where it is not.
    fn route(&mut self, node: &Node, now: Instant) {
        while let Some(front) = self.waiting.front() {
            if front.not_before.is_some_and(|t| now < t) {
                return;
            }
            // One request at a time on a node, as on a server that answers
            // in order anyway: a node that stopped answering does not pile
            // up requests (an extension's WAIT each) that a release would
            // have to wait behind when it resumes. The last word goes out
            // behind the one in flight.
            if !front.last_word && !self.flight.is_empty() {
                return;
            }
            let ticket = front.ticket;
            let want = Want {
                slot: front.slot,
                recheck: front.recheck && front.redirects == 0,
                ask: front.ask.clone(),
            };
            let place = match self.place_for(node, want, now) {
                Some(Ok(place)) => place,
                Some(Err(e)) => {
                    // Unless a search that gave up failed it already.
                    if self.waiting.front().is_some_and(|r| r.ticket == ticket) {
                        self.waiting.pop_front();
                        self.finish(node, ticket, Err(e));
                    }
                    continue;
                }
                // A search is under way.
                None => return,
            };
            let Some(mut req) = self.waiting.pop_front() else {
                return;
            };
            let at = match self.data_link(node, &place, now) {
                Ok(at) => at,
                Err(e) => {
                    self.finish(node, req.ticket, Err(e));
                    continue;
                }
            };
            let link = &mut self.data[at].link;
            req.asking = req.ask.take().is_some();
            if req.asking {
                let mut bytes = redis::cmd("ASKING").get_packed_command();
                bytes.extend_from_slice(&req.bytes);
                link.send(Tag::Ticket(req.ticket), &bytes, 2, Duration::ZERO);
            } else {
                link.send(Tag::Ticket(req.ticket), &req.bytes, 1, Duration::ZERO);
            }
            // Written now if it can be: a round that does not wait for this
            // node still gets its request onto the wire.
            let mut events = Vec::new();
            link.push(now, &mut events);
            let steps = self.data[at].steps.clone();
            self.flight.push((req, place.clone()));
            for e in events {
                self.on_data(node, &place, &steps, e, now);
            }
            if !self.data.get(at).is_some_and(|d| d.link.alive()) && at < self.data.len() {
                self.data.remove(at);
            }
        }
    }

    /// Where `req` goes: None while a search for it is under way (started
    /// here if need be).
    fn place_for(
        &mut self,
        node: &Node,
        req: Want,
        now: Instant,
    ) -> Option<Result<Place, NodeError>> {
        match &node.topology {
            Topology::Server { place, .. } => Some(Ok(place.clone())),
            Topology::Sentinel { .. } => {
                match (&self.primary, req.recheck) {
                    (Some(p), false) => Some(Ok(p.clone())),
                    _ if self.search.is_some() => None,
                    _ => {
                        self.start_search(node, now, self.primary.is_some());
                        // A search that could not even start leaves the
                        // request to fail by its own time.
                        if self.search.is_none() {
                            return self.primary.clone().map(Ok);
                        }
                        None
                    }
                }
            }
            Topology::Cluster { .. } => {
                if let Some(ask) = req.ask {
                    return Some(Ok(ask));
                }
                if let Some(p) = self.master_of(req.slot) {
                    return Some(Ok(p));
                }
                if self.search.is_none() {
                    // Its answer may be in at once (a seed on this host).
                    self.start_search(node, now, false);
                    if let Some(p) = self.master_of(req.slot) {
                        return Some(Ok(p));
                    }
                }
                if self.search.is_none() {
                    return Some(Err(NodeError::new(
                        Kind::Topology,
                        format!(
                            "{}: no node of the cluster serves the lock's hash slot {} \
                             (cluster_state not ok?)",
                            node.name, req.slot
                        ),
                        false,
                    )));
                }
                None
            }
        }
    }

    /// The master of a Cluster's `slot`, as far as the slot map says.
    fn master_of(&self, slot: u16) -> Option<Place> {
        self.slots
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, p)| p.clone())
    }

    /// The data connection to `place`, opened (with its set-up) if there is
    /// none.
    fn data_link(&mut self, node: &Node, place: &Place, now: Instant) -> Result<usize, NodeError> {
        if let Some(at) = self
            .data
            .iter()
            .position(|d| d.place == *place && d.link.alive())
        {
            return Ok(at);
        }
        let dest = node.names.dest(place, node.timeout, &node.name)?;
        let tls = match &node.topology {
            Topology::Server {
                tls: Some(insecure),
                ..
            } => tls_to(&node.tls, place, *insecure, &node.name)?,
            t if t.tls() => tls_to(&node.tls, place, false, &node.name)?,
            _ => None,
        };
        let (setup, steps) = node.topology.data_setup();
        let mut link = Link::open(&dest, tls.as_ref(), setup, node.timeout, now);
        if self.push {
            link.subscribed();
        }
        // What the server is, ahead of the first reply: its run_id (one
        // server under two names must not get two votes, see
        // `Lock::same_voter`), and whether it may have forgotten a lock
        // (see `Node::uncounted`).
        let asked = (!self.push).then(|| {
            let ticket = self.ticket();
            link.send(
                Tag::Ticket(ticket),
                &server::questions(),
                server::ANSWERS,
                Duration::ZERO,
            );
            ticket
        });
        self.data.push(Data {
            place: place.clone(),
            link,
            steps,
            asked,
            server: None,
        });
        Ok(self.data.len() - 1)
    }

    /// What a data connection reported.
    fn on_data(&mut self, node: &Node, place: &Place, steps: &[Step], e: Event, now: Instant) {
        match e {
            Event::Answered(Tag::Ticket(t), values) if self.asked_at(place) == Some(t) => {
                let server = Server::read(&values, now);
                if let Some(what) = server.describe(now) {
                    // Behind a Sentinel group or a Cluster, which server.
                    let at = match node.topology {
                        Topology::Server { .. } => String::new(),
                        _ => format!(" at {}", place.authority()),
                    };
                    self.notes.push(format!("{}: {what}{at}", node.name));
                }
                if let Some(d) = self.data_at(place) {
                    d.asked = None;
                    d.server = Some(Arc::new(server));
                }
            }
            Event::Answered(Tag::Ticket(t), values) => self.answered(node, t, values, now),
            Event::Overdue(Tag::Ticket(t)) => {
                if let Some((req, _)) = self.flight.iter_mut().find(|(r, _)| r.ticket == t) {
                    req.overdue = true;
                    self.finish(node, t, Err(error::timed_out(&node.name, node.timeout)));
                }
            }
            Event::Failed(broken, tags) => {
                for (tag, sent) in tags {
                    let Tag::Ticket(t) = tag else { continue };
                    if self.asked_at(place) == Some(t) {
                        continue;
                    }
                    let Some(at) = self.flight.iter().position(|(r, _)| r.ticket == t) else {
                        continue;
                    };
                    let (req, _) = self.flight.remove(at);
                    if !req.overdue {
                        let err = error::broken(&node.name, node.timeout, &broken, steps, sent);
                        self.finish(node, t, Err(err));
                    }
                }
                self.lost(node, place, &broken);
            }
            Event::Push(v) => self.messages.push(v),
            Event::Answered(Tag::Setup, _) | Event::Overdue(Tag::Setup) => {}
        }
    }

    /// A data connection to `place` broke: the topology is looked up again.
    fn lost(&mut self, node: &Node, place: &Place, broken: &Broken) {
        let setup_refused = matches!(broken, Broken::Setup(..));
        match &node.topology {
            // A primary that refuses us for good (a password) is not looked
            // for again and again.
            Topology::Sentinel { .. }
                if self.primary.as_ref() == Some(place)
                    && (!setup_refused || broken_role(broken)) =>
            {
                self.primary = None;
            }
            Topology::Cluster { .. } => self.slots.retain(|(_, _, p)| p != place),
            _ => {}
        }
    }

    /// A reply to request `t`: its answer, or where to send it again.
    fn answered(&mut self, node: &Node, t: u64, mut values: Vec<Value>, now: Instant) {
        let Some(at) = self.flight.iter().position(|(r, _)| r.ticket == t) else {
            return;
        };
        let (mut req, place) = self.flight.remove(at);
        let server = self.data_at(&place).and_then(|d| d.server.clone());
        if let Some((reply, synced)) = req.partial.take() {
            // The follow-ups' answers, in the order they were asked.
            let mut follow = values.into_iter();
            let acked = req.wait.and_then(|_| follow.next());
            let synced = if synced { follow.next() } else { None };
            let answered = Answered {
                reply,
                acked,
                synced,
                server,
            };
            self.finish(node, t, Ok(answered));
            return;
        }
        if req.asking && !values.is_empty() {
            values.remove(0);
        }
        let first = values.first();
        if first.is_some_and(|v| !matches!(v, Value::ServerError(_)))
            && !req.overdue
            && let Some((bytes, count, synced)) = follow_ups(node, &req, server.as_deref(), now)
            && let Some(d) = self.data_at(&place).filter(|d| d.link.alive())
        {
            // Whatever is left of the node timeout, and the reply up to 1/hz
            // (100 ms by default) late: Redis checks blocked clients'
            // timeouts from its event loop, and a slow replica (or disk) must
            // read as a write not acknowledged, not as a node that did not
            // answer.
            d.link.send(Tag::Ticket(t), &bytes, count, WAIT_LATE);
            req.partial = values.into_iter().next().map(|v| (v, synced));
            self.flight.push((req, place));
            return;
        }
        if let Some(Value::ServerError(e)) = values.first()
            && !req.overdue
            && req.redirects < REDIRECTS
            && now < req.submitted + node.expiry()
            && self.redirect(node, &mut req, e, now)
        {
            req.redirects += 1;
            // Back in the order it was made: ahead of anything made later.
            let at = self
                .waiting
                .iter()
                .position(|r| r.ticket > req.ticket)
                .unwrap_or(self.waiting.len());
            self.waiting.insert(at, req);
            return;
        }
        let answered = Answered {
            reply: values.into_iter().next().unwrap_or_default(),
            acked: None,
            synced: None,
            server,
        };
        self.finish(node, t, Ok(answered));
    }

    /// The data connection to `place` that stands, if any.
    fn data_at(&mut self, place: &Place) -> Option<&mut Data> {
        self.data
            .iter_mut()
            .find(|d| d.place == *place && d.link.alive())
    }

    /// The ticket of the questions still owed on the connection to `place`.
    fn asked_at(&self, place: &Place) -> Option<u64> {
        self.data
            .iter()
            .find(|d| d.place == *place && d.link.alive())
            .and_then(|d| d.asked)
    }

    /// Whether error `e` means "send it elsewhere, or again": then `req` is
    /// made ready for that.
    fn redirect(
        &mut self,
        node: &Node,
        req: &mut Req,
        e: &redis::ServerError,
        now: Instant,
    ) -> bool {
        let target = || -> Option<Place> {
            let addr = e.details()?.split_whitespace().nth(1)?;
            let (host, port) = addr.rsplit_once(':')?;
            Some(Place::tcp(host, port.parse().ok()?))
        };
        match (&node.topology, e.code()) {
            (Topology::Sentinel { .. }, "READONLY") => {
                // Demoted by a failover: ask the sentinels again.
                self.primary = None;
                true
            }
            (Topology::Cluster { .. }, "MOVED") => match target() {
                Some(p) => {
                    self.slots.insert(0, (req.slot, req.slot, p));
                    true
                }
                None => false,
            },
            (Topology::Cluster { .. }, "ASK") => match target() {
                Some(p) => {
                    req.ask = Some(p);
                    true
                }
                None => false,
            },
            (Topology::Cluster { .. }, "TRYAGAIN") => {
                req.not_before = Some(now + TRY_AGAIN);
                true
            }
            (Topology::Cluster { .. }, "CLUSTERDOWN") => {
                self.slots.clear();
                req.not_before = Some(now + TRY_AGAIN);
                true
            }
            _ => false,
        }
    }

    /// Requests that waited their whole time without being written: they
    /// fail, unsent.
    fn expire(&mut self, node: &Node, now: Instant) {
        let expiry = node.expiry();
        let mut kept = VecDeque::with_capacity(self.waiting.len());
        for req in std::mem::take(&mut self.waiting) {
            if now >= req.submitted + expiry {
                self.finish(
                    node,
                    req.ticket,
                    Err(error::timed_out(&node.name, node.timeout).for_request(false)),
                );
            } else {
                kept.push_back(req);
            }
        }
        self.waiting = kept;
    }

    /// Request `ticket` is answered (or failed): the answer is kept for
    /// whoever asks, and counts in the node's health whether or not anyone
    /// does (a reply that came after its round is an answer all the same).
    fn finish(&mut self, node: &Node, ticket: u64, result: Result<Answered, NodeError>) {
        let result = result.map_err(|e| e.without(&node.secrets));
        self.health.note(&result);
        if let Ok(a) = &result
            && a.server.is_some()
        {
            self.server = a.server.clone();
        }
        self.done.push_back((ticket, result));
    }

    /// Asks the sentinels (or the cluster's seeds) where the data is.
    fn start_search(&mut self, node: &Node, now: Instant, recheck: bool) {
        let (places, question) = match &node.topology {
            Topology::Sentinel {
                sentinels, master, ..
            } => (
                sentinels.clone(),
                redis::cmd("SENTINEL")
                    .arg("get-master-addr-by-name")
                    .arg(master)
                    .get_packed_command(),
            ),
            Topology::Cluster { seeds, .. } => (
                seeds.clone(),
                redis::cmd("CLUSTER").arg("SLOTS").get_packed_command(),
            ),
            Topology::Server { .. } => return,
        };
        let mut search = Search {
            until: now + node.timeout,
            asked: Vec::new(),
            places: places.len(),
            failed: Vec::new(),
            heard: false,
            recheck,
        };
        for place in places {
            match self.probe_link(node, &place, now) {
                Ok(at) => {
                    let ticket = self.ticket();
                    self.probes[at]
                        .link
                        .send(Tag::Ticket(ticket), &question, 1, Duration::ZERO);
                    search.asked.push((place, ticket));
                }
                Err(e) => {
                    search.heard |= !e.is_timeout();
                    let why = e.to_string();
                    let why = why
                        .strip_prefix(&format!("{}: ", node.name))
                        .unwrap_or(&why);
                    search.failed.push((place, why.to_string()));
                }
            }
        }
        self.search = Some(search);
        self.probe(node, now);
    }

    /// The connection to a sentinel or seed at `place`, opened if need be.
    fn probe_link(&mut self, node: &Node, place: &Place, now: Instant) -> Result<usize, NodeError> {
        if let Some(at) = self
            .probes
            .iter()
            .position(|p| p.place == *place && p.link.alive())
        {
            return Ok(at);
        }
        let (setup, steps) = match &node.topology {
            Topology::Sentinel { .. } => node.topology.sentinel_setup(),
            _ => node.topology.data_setup(),
        };
        let dest = node.names.dest(place, node.timeout, &node.name)?;
        let tls = if node.topology.tls() {
            tls_to(&node.tls, place, false, &node.name)?
        } else {
            None
        };
        let link = Link::open(&dest, tls.as_ref(), setup, node.timeout, now);
        self.probes.retain(|p| p.place != *place);
        self.probes.push(Probe {
            place: place.clone(),
            link,
            steps,
        });
        Ok(self.probes.len() - 1)
    }

    /// Drives the search under way: the first answer settles it.
    fn probe(&mut self, node: &Node, now: Instant) {
        let mut events = Vec::new();
        let mut heard = Vec::new();
        for p in self.probes.iter_mut() {
            p.link.progress(now, &mut events);
            for e in events.drain(..) {
                heard.push((p.place.clone(), p.steps.clone(), e));
            }
        }
        let Some(mut search) = self.search.take() else {
            return;
        };
        for (place, steps, e) in heard {
            let asked = |t: u64| search.asked.iter().any(|(p, x)| *p == place && *x == t);
            match e {
                Event::Answered(Tag::Ticket(t), values) if asked(t) => {
                    search.heard = true;
                    match self.adopt(node, &place, values) {
                        Ok(()) => {
                            self.settled();
                            return;
                        }
                        Err(why) => search.failed.push((place, why.to_string())),
                    }
                }
                Event::Failed(broken, tags)
                    if tags
                        .iter()
                        .any(|(tag, _)| matches!(tag, Tag::Ticket(t) if asked(*t))) =>
                {
                    search.heard |= !matches!(broken, Broken::ConnectTimeout);
                    let why = match (&node.topology, &broken) {
                        (Topology::Sentinel { .. }, Broken::Setup(..)) => {
                            error::SENTINEL_AUTH.to_string()
                        }
                        _ => error::broken("", node.timeout, &broken, &steps, false)
                            .to_string()
                            .trim_start_matches(": ")
                            .to_string(),
                    };
                    search.failed.push((place, why));
                }
                _ => {}
            }
        }
        self.probes.retain(|p| p.link.alive());
        if now >= search.until || search.failed.len() >= search.places {
            self.gave_up(node, search);
        } else {
            self.search = Some(search);
        }
    }

    /// A probe's answer: the primary, or the slot map.
    fn adopt(&mut self, node: &Node, via: &Place, values: Vec<Value>) -> Result<(), NodeError> {
        let reply = values.into_iter().next().unwrap_or(Value::Nil);
        match &node.topology {
            Topology::Sentinel { master, .. } => {
                let primary = primary_of(&reply, master)?;
                if self.primary.as_ref() != Some(&primary) {
                    // Against the primary named last, even if it was given up
                    // on since (it stopped answering): a failover is "now".
                    let note = match &self.named {
                        Some(was) if was != &primary => format!(
                            "{}: the primary of '{master}' is now {} (was {}; named by sentinel {})",
                            node.name,
                            primary.authority(),
                            was.authority(),
                            via.authority()
                        ),
                        _ => format!(
                            "{}: the primary of '{master}' is {} (named by sentinel {})",
                            node.name,
                            primary.authority(),
                            via.authority()
                        ),
                    };
                    if self.named.as_ref() != Some(&primary) {
                        self.notes.push(note);
                    }
                    self.named = Some(primary.clone());
                    self.primary = Some(primary);
                }
                Ok(())
            }
            Topology::Cluster { .. } => {
                self.slots = slots_of(&reply, via)?;
                Ok(())
            }
            Topology::Server { .. } => Ok(()),
        }
    }

    /// The search found what it looked for: the requests it held go on.
    fn settled(&mut self) {
        for req in self.waiting.iter_mut() {
            req.recheck = false;
        }
    }

    /// No probe answered: a recheck keeps the primary it had; otherwise the
    /// requests waiting for an answer fail.
    fn gave_up(&mut self, node: &Node, search: Search) {
        if search.recheck && self.primary.is_some() {
            self.settled();
            return;
        }
        let parts: Vec<String> = match &node.topology {
            Topology::Sentinel { sentinels, .. } => sentinels.clone(),
            Topology::Cluster { seeds, .. } => seeds.clone(),
            Topology::Server { .. } => Vec::new(),
        }
        .iter()
        .map(|place| {
            let why = search
                .failed
                .iter()
                .find(|(p, _)| p == place)
                .map_or("no answer", |(_, w)| w.as_str());
            format!("{}: {why}", place.authority())
        })
        .collect();
        let what = match &node.topology {
            Topology::Sentinel { master, .. } => format!(
                "no sentinel named a primary for '{master}' within {} ({})",
                humantime::format_duration(node.timeout),
                parts.join("; ")
            ),
            _ => format!(
                "no seed node of the cluster could be reached: {}",
                parts.join("; ")
            ),
        };
        // Nobody answered in time: the node is not waited for again in this
        // run (or subcommand), as a request that timed out is not.
        let timeout = !search.heard;
        let err = NodeError::new(
            if timeout {
                Kind::Timeout
            } else {
                Kind::Topology
            },
            format!("{}: {what}", node.name),
            false,
        );
        for req in std::mem::take(&mut self.waiting) {
            self.finish(node, req.ticket, Err(err.clone()));
        }
    }
}

/// What follows a write once it is answered, on its connection, as bytes
/// with their count of replies and whether WAITAOF is among them: WAIT for
/// --replicas; WAITAOF for a --durable vote, where the server has it (where
/// it has not, `Node::uncounted` goes by its appendfsync). None: nothing.
fn follow_ups(
    node: &Node,
    req: &Req,
    server: Option<&Server>,
    now: Instant,
) -> Option<(Vec<u8>, usize, bool)> {
    let left = super::millis((req.submitted + node.timeout).saturating_duration_since(now));
    let mut bytes = Vec::new();
    if let Some(n) = req.wait {
        bytes.extend(redis::cmd("WAIT").arg(n).arg(left).get_packed_command());
    }
    let synced = req.durable && server.is_some_and(Server::has_waitaof);
    if synced {
        bytes.extend(
            redis::cmd("WAITAOF")
                .arg(1)
                .arg(0)
                .arg(left)
                .get_packed_command(),
        );
    }
    let count = usize::from(req.wait.is_some()) + usize::from(synced);
    (count > 0).then_some((bytes, count, synced))
}

/// Whether a set-up was refused because the server is not a primary.
fn broken_role(b: &Broken) -> bool {
    matches!(b, Broken::Setup(_, why) if why.contains("not one"))
}

/// Why a sentinel or a seed did not say where the data is, in words of
/// the answer (the search names the place asked).
fn unfound(why: impl Into<String>) -> NodeError {
    NodeError::new(Kind::Topology, why.into(), false)
}

fn unexpected_answer(what: impl std::fmt::Debug) -> NodeError {
    unfound(format!("unexpected answer: {what:?}"))
}

/// `SENTINEL get-master-addr-by-name`'s answer.
fn primary_of(reply: &Value, master: &str) -> Result<Place, NodeError> {
    match reply {
        Value::Array(parts) => match parts.as_slice() {
            [Value::BulkString(host), Value::BulkString(port)] => {
                let host = String::from_utf8_lossy(host);
                let port = std::str::from_utf8(port)
                    .ok()
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| unfound("unexpected answer: a primary with no port"))?;
                Ok(Place::tcp(&host, port))
            }
            _ => Err(unexpected_answer(reply)),
        },
        Value::Nil => Err(unfound(format!(
            "knows no healthy primary named '{master}' (is the name right? during a failover, \
             none is named until a replica is promoted)"
        ))),
        Value::ServerError(e) if matches!(e.code(), "NOAUTH" | "WRONGPASS") => {
            Err(unfound(error::SENTINEL_AUTH))
        }
        Value::ServerError(e) => Err(unfound(error::one_line(&e.to_string()))),
        other => Err(unexpected_answer(other)),
    }
}

/// `CLUSTER SLOTS`' answer: each range with its master. A master named
/// with an empty host is at the address of the node asked.
fn slots_of(reply: &Value, asked: &Place) -> Result<Vec<(u16, u16, Place)>, NodeError> {
    let Value::Array(ranges) = reply else {
        return match reply {
            Value::ServerError(e) => Err(unfound(error::one_line(&e.to_string()))),
            other => Err(unexpected_answer(other)),
        };
    };
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let mut slots = Vec::new();
    for range in ranges {
        let Value::Array(parts) = range else { continue };
        let (Some(first), Some(last), Some(Value::Array(master))) = (
            parts.first().and_then(int),
            parts.get(1).and_then(int),
            parts.get(2),
        ) else {
            continue;
        };
        let (Some(Value::BulkString(host)), Some(port)) =
            (master.first(), master.get(1).and_then(int))
        else {
            continue;
        };
        let host = String::from_utf8_lossy(host);
        let place = match (host.as_ref(), asked) {
            ("" | "?", Place::Tcp { host, .. }) => Place::tcp(host, port),
            _ => Place::tcp(&host, port),
        };
        slots.push((first, last, place));
    }
    if slots.is_empty() {
        return Err(unfound(
            "the cluster serves no slot yet (cluster_state not ok?)",
        ));
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_slot_map_names_each_range_master() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(8191),
                Value::Array(vec![bulk("10.0.0.1"), Value::Int(7000), bulk("id1")]),
            ]),
            Value::Array(vec![
                Value::Int(8192),
                Value::Int(16383),
                Value::Array(vec![bulk(""), Value::Int(7001), bulk("id2")]),
            ]),
        ]);
        let asked = Place::tcp("127.0.0.1", 7000);
        let slots = slots_of(&reply, &asked).expect("parses");
        assert_eq!(slots[0], (0, 8191, Place::tcp("10.0.0.1", 7000)));
        assert_eq!(slots[1], (8192, 16383, Place::tcp("127.0.0.1", 7001)));
    }

    #[test]
    fn a_sentinels_answer_names_the_primary_or_why_not() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            primary_of(&Value::Array(vec![bulk("127.0.0.1"), bulk("6380")]), "m").ok(),
            Some(Place::tcp("127.0.0.1", 6380))
        );
        let none = primary_of(&Value::Nil, "m").err().map(|e| e.to_string());
        assert!(
            none.as_deref()
                .is_some_and(|e| e.starts_with("knows no healthy primary named 'm'")),
            "{none:?}"
        );
    }
}
