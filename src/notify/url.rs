//! A `--ping` URL: checked when the run's settings are, and never shown
//! whole. Its path (and query) is the secret: whoever has it can report a
//! run, so logs, errors and `config` show `https://hc-ping.com/***`.

use std::fmt;

/// The longest URL taken: far more than any ping service gives out.
const MAX_LEN: usize = 2048;

/// A checked `--ping` base URL (`https://hc-ping.com/<uuid>`).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PingUrl {
    /// `scheme://authority`, as given.
    origin: String,
    /// The path without its trailing slashes ("" for none).
    path: String,
    /// The query without its `?`, if any (`create=1`).
    query: Option<String>,
    https: bool,
    /// The host as the proxy rules match it, without brackets.
    host: String,
}

impl PingUrl {
    /// `given` if it is an http:// or https:// URL with a host; the error
    /// shows the URL masked.
    pub(crate) fn parse(given: &str) -> Result<PingUrl, String> {
        let shown = mask(given);
        let refuse = |why: &str| Err(format!("--ping {shown}: {why}"));
        if given.len() > MAX_LEN {
            return refuse(&format!("longer than {MAX_LEN} bytes"));
        }
        if given.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return refuse("a URL has no spaces or control characters");
        }
        let lower = given.to_ascii_lowercase();
        let https = lower.starts_with("https://");
        if !https && !lower.starts_with("http://") {
            return refuse("not an http:// or https:// URL");
        }
        if given.contains('#') {
            return refuse("a ping URL has no #fragment");
        }
        let uri: ureq::http::Uri = match given.parse() {
            Ok(u) => u,
            Err(_) => return refuse("not a URL"),
        };
        let Some(host) = uri.host().filter(|h| !h.is_empty()) else {
            return refuse("no host in it");
        };
        let start = given.find("://").map_or(0, |i| i + 3);
        let end = given[start..]
            .find(['/', '?'])
            .map_or(given.len(), |i| start + i);
        let rest = &given[end..];
        let (path, query) = match rest.split_once('?') {
            Some((p, q)) => (p, Some(q.to_string()).filter(|q| !q.is_empty())),
            None => (rest, None),
        };
        Ok(PingUrl {
            origin: given[..end].to_string(),
            path: path.trim_end_matches('/').to_string(),
            query,
            https,
            host: host.trim_matches(['[', ']']).to_ascii_lowercase(),
        })
    }

    /// The URL of one ping: `<base>/<suffix>?<query>&rid=<run id>`.
    pub(crate) fn ping(&self, suffix: &str, rid: &str) -> String {
        let query = match &self.query {
            Some(q) => format!("{q}&rid={rid}"),
            None => format!("rid={rid}"),
        };
        format!("{}{}/{suffix}?{query}", self.origin, self.path)
    }

    pub(crate) fn is_https(&self) -> bool {
        self.https
    }

    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// `text` (an error from the HTTP client, say) with the secret masked
    /// wherever it appears.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        let secrets = std::iter::once(self.path.trim_start_matches('/'))
            .chain(self.path.split('/'))
            .chain(self.query.as_deref());
        for secret in secrets.filter(|s| s.len() >= 4) {
            out = out.replace(secret, "***");
        }
        out
    }
}

/// The URL as logs show it: the user-info's password, the path and the
/// query masked (`https://hc-ping.com/***`).
impl fmt::Display for PingUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secret = !self.path.is_empty() || self.query.is_some();
        write!(
            f,
            "{}{}",
            masked_origin(&self.origin),
            if secret { "/***" } else { "" }
        )
    }
}

/// Masked as in `Display`: `Config` derives Debug.
impl fmt::Debug for PingUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PingUrl({self})")
    }
}

/// Any text given as a ping URL, masked as `PingUrl`'s Display masks it:
/// for `config` and for errors about a URL that does not parse.
pub(crate) fn mask(given: &str) -> String {
    let start = given.find("://").map_or(0, |i| i + 3);
    let end = given[start..]
        .find(['/', '?', '#'])
        .map_or(given.len(), |i| start + i);
    let rest = given[end..].trim_matches('/');
    let origin = masked_origin(&given[..end]);
    if rest.is_empty() {
        origin
    } else {
        format!("{origin}/***")
    }
}

/// `scheme://authority` with any user-info masked.
fn masked_origin(origin: &str) -> String {
    let start = origin.find("://").map_or(0, |i| i + 3);
    match origin[start..].rfind('@') {
        Some(at) => format!("{}***{}", &origin[..start], &origin[start + at..]),
        None => origin.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pings_add_their_suffix_and_the_run_id() {
        let u = PingUrl::parse("https://hc-ping.com/5f1c0b7e-aaaa/").expect("valid");
        assert_eq!(
            u.ping("start", "r1"),
            "https://hc-ping.com/5f1c0b7e-aaaa/start?rid=r1"
        );
        assert!(u.is_https());
        assert_eq!(u.host(), "hc-ping.com");
        let u = PingUrl::parse("http://[::1]:8000/key/slug?create=1").expect("valid");
        assert_eq!(
            u.ping("0", "r2"),
            "http://[::1]:8000/key/slug/0?create=1&rid=r2"
        );
        assert_eq!(u.host(), "::1");
        let u = PingUrl::parse("http://hc.local").expect("valid");
        assert_eq!(u.ping("fail", "r"), "http://hc.local/fail?rid=r");
        assert_eq!(u.to_string(), "http://hc.local");
    }

    #[test]
    fn the_path_and_query_are_never_shown() {
        let u = PingUrl::parse("https://user:pw@hc-ping.com/s3cret-uuid?create=1").expect("ok");
        let shown = format!("{u} {u:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("pw"),
            "{shown}"
        );
        assert_eq!(u.to_string(), "https://***@hc-ping.com/***");
        assert_eq!(
            u.scrub("GET https://hc-ping.com/s3cret-uuid/start?create=1&rid=x: 500"),
            "GET https://hc-ping.com/***/start?***&rid=x: 500"
        );
        assert_eq!(mask("ftp://h/s3cret"), "ftp://h/***");
        assert_eq!(mask("nonsense"), "nonsense");
    }

    #[test]
    fn what_is_not_an_http_url_is_refused_without_its_secret() {
        for bad in [
            "hc-ping.com/s3cret",
            "ftp://h/s3cret",
            "https:///s3cret",
            "https://h/s3cret#x",
            "https://h/s3 cret",
        ] {
            let e = PingUrl::parse(bad).expect_err(bad);
            assert!(e.starts_with("--ping "), "{e}");
            assert!(!e.contains("s3cret") && !e.contains("s3 cret"), "{e}");
        }
        assert!(PingUrl::parse(&format!("https://h/{}", "a".repeat(3000))).is_err());
    }
}
