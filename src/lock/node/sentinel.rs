//! A Sentinel group as one node of the quorum (`redis+sentinel://`): the
//! primary its sentinels name, found again whenever a request to it fails or
//! it answers READONLY, so that heartbeats follow a failover.
//!
//! The sentinels are asked all at once, one thread each, through the
//! crate's Sentinel client (which also checks, with ROLE, that the server
//! named is a primary); the first answer wins and the search is bounded by
//! the node timeout. The crate's sentinel connections have no timeouts of
//! their own, so a stopped sentinel would hold its thread: such a thread is
//! left to finish by itself, and that sentinel is skipped until it has.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
use redis::{Client, ConnectionAddr, IntoConnectionInfo, TlsMode};

use super::error::{self, NodeError};
use super::url::Host;
use super::{Options, lock, server};

pub(super) struct Group {
    master: String,
    sentinels: Vec<Sentinel>,
    tls: Option<TlsMode>,
    certs: Option<redis::TlsCertificates>,
    sentinel_auth: (Option<String>, Option<String>),
    data_auth: (Option<String>, Option<String>),
    db: i64,
    /// The primary found last; dropped by `forget`.
    primary: Mutex<Option<Client>>,
    /// Its address, to tell a failover from a reconnect in the log.
    known: Mutex<Option<String>>,
}

struct Sentinel {
    host: Host,
    /// A search through this sentinel is under way (it may hang).
    busy: Arc<AtomicBool>,
}

/// Everything a search needs, moved into its thread.
#[derive(Clone)]
struct Search {
    master: String,
    addr: ConnectionAddr,
    tls: Option<TlsMode>,
    certs: Option<redis::TlsCertificates>,
    sentinel_auth: (Option<String>, Option<String>),
    data_auth: (Option<String>, Option<String>),
    db: i64,
}

impl Group {
    pub(super) fn new(
        sentinels: Vec<Host>,
        userinfo: Option<String>,
        master: String,
        db: i64,
        tls: bool,
        name: &str,
        opts: &Options,
    ) -> Result<Group, String> {
        if tls {
            super::tls_provider();
        }
        // The URL's user-info is the data nodes', read the way a redis://
        // URL's is (percent-decoded); the options fill in when it has none.
        let (mut user, mut password) = (None, None);
        if let Some(userinfo) = userinfo {
            let info = format!("redis://{userinfo}@localhost")
                .as_str()
                .into_connection_info()
                .map_err(|_| format!("invalid Redis URL '{name}': it does not parse"))?;
            user = info.redis_settings().username().map(str::to_string);
            password = info.redis_settings().password().map(str::to_string);
        }
        if password.is_none() {
            password.clone_from(&opts.password);
            if user.is_none() {
                user.clone_from(&opts.username);
            }
        }
        Ok(Group {
            master,
            sentinels: sentinels
                .into_iter()
                .map(|host| Sentinel {
                    host,
                    busy: Arc::new(AtomicBool::new(false)),
                })
                .collect(),
            tls: tls.then_some(if opts.tls_insecure {
                TlsMode::Insecure
            } else {
                TlsMode::Secure
            }),
            certs: if tls { opts.certificates() } else { None },
            sentinel_auth: (
                opts.sentinel_username.clone(),
                opts.sentinel_password.clone(),
            ),
            data_auth: (user, password),
            db,
            primary: Mutex::new(None),
            known: Mutex::new(None),
        })
    }

    /// The primary's client: the one found last, or a new search's. With a
    /// note for the log when the primary is not the one found before.
    pub(super) fn primary(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<(Client, Option<String>), NodeError> {
        if let Some(c) = lock(&self.primary).clone() {
            return Ok((c, None));
        }
        let (client, via) = self.search(name, timeout)?;
        let note = self.adopt(&client, &via, name);
        Ok((client, note))
    }

    /// Asks the sentinels which server is the primary now. A graceful
    /// failover leaves the old primary a master (accepting our extensions)
    /// for a moment after a replica was promoted, and a client that asks the
    /// sentinels would take the lock on the new one: so every extension
    /// asks first. Returns whether the primary changed (with a note); when
    /// no sentinel answers, the primary we have is kept.
    pub(super) fn recheck(&self, name: &str, timeout: Duration) -> Option<String> {
        let (client, via) = self.search(name, timeout).ok()?;
        self.adopt(&client, &via, name)
    }

    /// Makes `client` the primary; a note when it is not the one before.
    fn adopt(&self, client: &Client, via: &str, name: &str) -> Option<String> {
        let at = match client.get_connection_info().addr() {
            ConnectionAddr::Tcp(h, p)
            | ConnectionAddr::TcpTls {
                host: h, port: p, ..
            } => Host {
                host: h.clone(),
                port: *p,
            }
            .authority(),
            other => other.to_string(),
        };
        *lock(&self.primary) = Some(client.clone());
        let before = lock(&self.known).replace(at.clone());
        match before {
            Some(b) if b == at => None,
            Some(b) => Some(format!(
                "{name}: the primary of '{}' is now {at} (was {b}; named by sentinel {via})",
                self.master
            )),
            None => Some(format!(
                "{name}: the primary of '{}' is {at} (named by sentinel {via})",
                self.master
            )),
        }
    }

    /// Search again on the next request: the primary failed or is one no more.
    pub(super) fn forget(&self) {
        lock(&self.primary).take();
    }

    fn search(&self, name: &str, timeout: Duration) -> Result<(Client, String), NodeError> {
        let until = Instant::now() + timeout;
        let (tx, rx) = mpsc::channel();
        let mut asked = Vec::new();
        for (i, s) in self.sentinels.iter().enumerate() {
            if s.busy.swap(true, Ordering::AcqRel) {
                continue;
            }
            let search = Search {
                master: self.master.clone(),
                addr: match self.tls {
                    None => ConnectionAddr::Tcp(s.host.host.clone(), s.host.port),
                    Some(mode) => ConnectionAddr::TcpTls {
                        host: s.host.host.clone(),
                        port: s.host.port,
                        insecure: mode == TlsMode::Insecure,
                        tls_params: None,
                    },
                },
                tls: self.tls,
                certs: self.certs.clone(),
                sentinel_auth: self.sentinel_auth.clone(),
                data_auth: self.data_auth.clone(),
                db: self.db,
            };
            let (tx, busy) = (tx.clone(), Arc::clone(&s.busy));
            let spawned = std::thread::Builder::new()
                .name("sentinel".into())
                .spawn(move || {
                    let found = search.run();
                    busy.store(false, Ordering::Release);
                    let _ = tx.send((i, found));
                });
            match spawned {
                Ok(_) => asked.push(i),
                Err(_) => s.busy.store(false, Ordering::Release),
            }
        }
        drop(tx);
        let mut failures: Vec<(usize, redis::RedisError)> = Vec::new();
        while failures.len() < asked.len() {
            let left = until.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok((i, Ok(client))) => {
                    return Ok((
                        Client::open(server::lean(client.get_connection_info().clone()))
                            .map_err(|e| NodeError::new(format!("{name}: {e}")))?,
                        self.sentinels[i].host.authority(),
                    ));
                }
                Ok((i, Err(e))) => failures.push((i, e)),
                Err(_) => break,
            }
        }
        let mut parts: Vec<String> = Vec::new();
        for (i, s) in self.sentinels.iter().enumerate() {
            let at = s.host.authority();
            match failures.iter().find(|(j, _)| *j == i) {
                Some((_, e)) => parts.push(format!("{at}: {}", self.wording(e))),
                None if asked.contains(&i) => parts.push(format!("{at}: no answer")),
                None => parts.push(format!("{at}: still not answering an earlier search")),
            }
        }
        // Said once, however many sentinels it concerns.
        let tls_hint = if failures.iter().any(|(_, e)| error::is_tls_error(e)) {
            " (check --tls-ca, that the host names the sentinels are given by and the one they \
             name the primary by are in the certificates, and --tls-cert/--tls-key if the \
             servers want a client certificate)"
        } else {
            ""
        };
        let what = format!(
            "no sentinel named a primary for '{}' within {} ({}){tls_hint}",
            self.master,
            humantime::format_duration(timeout),
            parts.join("; ")
        );
        if failures.is_empty() {
            Err(NodeError::timed_out(format!("{name}: {what}")))
        } else {
            Err(NodeError::new(format!("{name}: {what}")))
        }
    }

    fn wording(&self, e: &redis::RedisError) -> String {
        if e.is_connection_refusal() {
            "connection refused".into()
        } else if e.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
        {
            "authentication failed at the sentinel or at the server it named (the sentinels' \
             password comes from --sentinel-password-file or REDLOCK_SENTINEL_PASSWORD, the \
             data nodes' from the URL, --password-file or REDLOCK_PASSWORD)"
                .into()
        } else if e.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel {
            format!(
                "knows no healthy primary named '{}' (is the name right? during a failover, \
                 none is named until a replica is promoted)",
                self.master
            )
        } else if error::is_tls_error(e) {
            format!("TLS handshake failed: {e}")
        } else if let Some(what) = error::not_redis(e) {
            what
        } else {
            error::one_line(&e.to_string())
        }
    }
}

impl Search {
    fn run(self) -> redis::RedisResult<Client> {
        let mut b =
            SentinelClientBuilder::new([self.addr], &self.master, SentinelServerType::Master)?
                .set_client_to_redis_db(self.db);
        if let Some(u) = &self.data_auth.0 {
            b = b.set_client_to_redis_username(u);
        }
        if let Some(p) = &self.data_auth.1 {
            b = b.set_client_to_redis_password(p);
        }
        if let Some(u) = &self.sentinel_auth.0 {
            b = b.set_client_to_sentinel_username(u);
        }
        if let Some(p) = &self.sentinel_auth.1 {
            b = b.set_client_to_sentinel_password(p);
        }
        if let Some(mode) = self.tls {
            b = b
                .set_client_to_redis_tls_mode(mode)
                .set_client_to_sentinel_tls_mode(mode);
            if let Some(certs) = self.certs {
                b = b
                    .set_client_to_redis_certificates(certs.clone())
                    .set_client_to_sentinel_certificates(certs);
            }
        }
        b.build()?.get_client()
    }
}
