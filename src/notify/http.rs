//! One ping over HTTP(S), through ureq with the rustls (and ring) the nodes'
//! TLS uses: the system's roots and `--tls-ca`'s, the proxy curl would use
//! (see `proxy`), and up to three tries within the ping's own time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};

use super::proxy;
use super::url::PingUrl;

/// Tries of one ping: the first, and two more after a failure that another
/// try may cure (no answer, a refused connection, a 5xx, a 429).
const TRIES: u32 = 3;

/// The pauses after the first and the second failed try, at most: a ping's
/// time is shared by its tries and these.
const PAUSES: [Duration; 2] = [Duration::from_millis(250), Duration::from_millis(500)];

/// Less than this left, and a try is not worth starting.
const TOO_LITTLE: Duration = Duration::from_millis(20);

/// The response a service sends is read up to this much, and dropped.
const REPLY_CAP: u64 = 4096;

/// An HTTP client for the pings of one run.
pub(super) struct Client {
    agent: ureq::Agent,
}

impl Client {
    /// The client for pings to `url`. An https URL loads the system's roots
    /// (reading files): never done before the command starts or while the
    /// lock waits on it.
    pub(super) fn new(url: &PingUrl, tls_ca: Option<&[u8]>) -> Result<Client, String> {
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .user_agent(concat!("redlock-run/", env!("CARGO_PKG_VERSION")))
            .proxy(proxy_for(url)?);
        if url.is_https() {
            config = config.tls_config(tls(tls_ca)?);
        }
        Ok(Client {
            agent: config.build().new_agent(),
        })
    }
}

/// The proxy as curl would choose it, or none.
fn proxy_for(url: &PingUrl) -> Result<Option<ureq::Proxy>, String> {
    match proxy::choose(url.is_https(), url.host(), |v| std::env::var(v).ok()) {
        None => Ok(None),
        Some(p) => ureq::Proxy::new(&p)
            .map(Some)
            .map_err(|e| format!("the proxy {} cannot be used: {e}", super::url::mask(&p))),
    }
}

/// rustls with ring, trusting the system's roots and `--tls-ca`'s: the
/// nodes may have a private CA while the ping service has a public one.
fn tls(tls_ca: Option<&[u8]>) -> Result<TlsConfig, String> {
    let mut roots: Vec<Certificate<'static>> = rustls_native_certs::load_native_certs()
        .certs
        .iter()
        .map(|c| Certificate::from_der(c.as_ref()).to_owned())
        .collect();
    if let Some(pem) = tls_ca {
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("--tls-ca: {e}"))?;
            roots.push(Certificate::from_der(cert.as_ref()).to_owned());
        }
    }
    Ok(TlsConfig::builder()
        .provider(TlsProvider::Rustls)
        .root_certs(RootCerts::Specific(Arc::new(roots)))
        .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .build())
}

/// How a ping went.
#[derive(Debug)]
pub(super) enum Delivery {
    /// The service answered 2xx.
    Sent { status: u16, tries: u32 },
    /// Given up: why (the secret masked), after `tries` tries in `took`.
    Failed {
        why: String,
        tries: u32,
        took: Duration,
    },
}

/// Why one try failed, and whether another may do better.
enum Fault {
    Again(String),
    Final(String),
}

/// Sends a ping (`body`: a POST, else a GET) to `target`, trying up to three
/// times before `deadline`, with a pause between tries; each try gets an
/// even share of the time left after the pauses still to come.
pub(super) fn deliver(
    client: &Client,
    url: &PingUrl,
    target: &str,
    body: Option<&[u8]>,
    deadline: Instant,
) -> Delivery {
    let first = Instant::now();
    let budget = deadline.saturating_duration_since(first);
    // Short budgets get shorter pauses: a tenth of the time, at most.
    let pauses = PAUSES.map(|p| p.min(budget / 10));
    let failed = |why: String, tries: u32| Delivery::Failed {
        why: url.scrub(&why),
        tries,
        took: first.elapsed(),
    };
    let mut why = String::from("no time was left for it");
    for tried in 0..TRIES {
        let to_come: Duration = pauses[(tried as usize).min(pauses.len())..].iter().sum();
        let left = deadline
            .saturating_duration_since(Instant::now())
            .saturating_sub(to_come);
        if left < TOO_LITTLE {
            return failed(why, tried);
        }
        let share = left / (TRIES - tried);
        // A socket timeout of seconds fires up to an eighth late (the
        // kernel's timer wheel is that coarse for them): asked for less,
        // it ends within its share.
        match once(client, target, body, share - share / 8) {
            Ok(status) => {
                return Delivery::Sent {
                    status,
                    tries: tried + 1,
                };
            }
            Err(Fault::Final(w)) => return failed(w, tried + 1),
            Err(Fault::Again(w)) => why = w,
        }
        if let Some(pause) = pauses.get(tried as usize) {
            std::thread::sleep((*pause).min(deadline.saturating_duration_since(Instant::now())));
        }
    }
    failed(why, TRIES)
}

/// One request, bounded by `limit` as a whole (name lookup, connect, TLS,
/// the request and the answer).
fn once(client: &Client, target: &str, body: Option<&[u8]>, limit: Duration) -> Result<u16, Fault> {
    let sent = match body {
        Some(b) => client
            .agent
            .post(target)
            .config()
            .timeout_global(Some(limit))
            .build()
            .header("content-type", "text/plain; charset=utf-8")
            .send(b),
        None => client
            .agent
            .get(target)
            .config()
            .timeout_global(Some(limit))
            .build()
            .call(),
    };
    let mut reply = sent.map_err(fault)?;
    // Read so that the connection may serve the next ping; what it says
    // is not needed.
    let _ = reply
        .body_mut()
        .with_config()
        .limit(REPLY_CAP)
        .read_to_vec();
    let status = reply.status().as_u16();
    match status {
        200..=299 => Ok(status),
        // Too many requests, or the service's own trouble: another try may
        // find it well. Any other answer will not change.
        408 | 429 | 500..=599 => Err(Fault::Again(format!("HTTP {status}"))),
        _ => Err(Fault::Final(format!("HTTP {status}"))),
    }
}

/// A client error in a few words.
fn fault(e: ureq::Error) -> Fault {
    match e {
        ureq::Error::Timeout(_) => Fault::Again("no answer".into()),
        // A certificate refused, and the like: no other try will differ.
        ureq::Error::Io(e) if tls_error(&e).is_some() => Fault::Final(format!(
            "TLS: {}",
            tls_error(&e).map_or(String::new(), |t| t.to_string())
        )),
        ureq::Error::Io(e) => Fault::Again(lower_first(&crate::text::os_message(&e))),
        ureq::Error::HostNotFound => Fault::Again("host not found".into()),
        ureq::Error::ConnectionFailed => Fault::Again("cannot connect".into()),
        ureq::Error::Rustls(e) => Fault::Final(format!("TLS: {e}")),
        ureq::Error::Tls(e) => Fault::Final(format!("TLS: {e}")),
        ureq::Error::BadUri(_) | ureq::Error::Http(_) => Fault::Final("not a usable URL".into()),
        other => Fault::Again(other.to_string()),
    }
}

/// The TLS library's error inside an I/O error, if that is what it is.
fn tls_error(e: &std::io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// "Connection refused" as the node errors say it: "connection refused".
fn lower_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}
