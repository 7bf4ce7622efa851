//! The URL forms of a node, and their redaction.
//!
//! - `redis://[USER:PASSWORD@]HOST[:PORT][/DB]`, `rediss://...`,
//!   `unix:///PATH[?db=N&pass=...]`: one server;
//! - `redis+cluster://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]` and
//!   `rediss+cluster://...`: a Redis Cluster, through any of these seeds;
//! - `redis+sentinel://[USER:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB]`
//!   and `rediss+sentinel://...`: the primary that the sentinels at these
//!   addresses name MASTER. USER:PASSWORD are the data nodes' (as in a
//!   `redis://` URL); the sentinels' own come from the options.

use super::BadNode;

/// What a URL names, parsed but not yet checked against the crate.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Spec {
    /// The URL as given, for the crate to parse.
    Server { url: String, tls: bool },
    Cluster {
        seeds: Vec<Host>,
        userinfo: Option<String>,
        tls: bool,
    },
    Sentinel {
        sentinels: Vec<Host>,
        userinfo: Option<String>,
        master: String,
        db: i64,
        tls: bool,
    },
}

/// One address of a host list; `host` without IPv6 brackets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Host {
    pub host: String,
    pub port: u16,
}

impl Host {
    /// `host:port`, with brackets around an IPv6 address.
    pub(super) fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

const FORMS: &str = "expected redis://HOST[:PORT][/DB], rediss://..., unix:///PATH, \
                     redis+cluster://HOST[:PORT][,HOST[:PORT]...] or \
                     redis+sentinel://HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB]";

/// What is wrong with the URLs of one `--redis` value (a comma-separated
/// list, where a piece without a scheme continues the URL before it: a
/// Cluster's seeds, a Sentinel group's sentinels), if anything: the line a
/// run would give for the first that does not parse, found before any node
/// is tried (the configuration file names its line with it).
pub(crate) fn check_list(value: &str) -> Result<(), String> {
    let mut urls: Vec<String> = Vec::new();
    for piece in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match urls.last_mut() {
            Some(last) if !piece.contains("://") => {
                last.push(',');
                last.push_str(piece);
            }
            _ => urls.push(piece.to_string()),
        }
    }
    for url in &urls {
        parse(url, &redact(url)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Parses `url`; errors name it as `name` (redacted).
pub(super) fn parse(url: &str, name: &str) -> Result<Spec, BadNode> {
    let bad = |why: &str| BadNode::url(name, why);
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(bad(FORMS));
    };
    let (kind, tls) = match scheme {
        "redis" | "unix" | "redis+unix" => ("server", false),
        "rediss" => ("server", true),
        "redis+cluster" => ("cluster", false),
        "rediss+cluster" => ("cluster", true),
        "redis+sentinel" => ("sentinel", false),
        "rediss+sentinel" => ("sentinel", true),
        _ => return Err(bad(FORMS)),
    };
    // Everything before the last `@` is user-info, so that a password may
    // hold `/`, `?`, `#` or `@`: those are escaped for the crate's URL
    // parser, which would read them as the end of the authority.
    let (userinfo, after) = match rest.rfind('@') {
        Some(at) if scheme != "unix" && scheme != "redis+unix" => {
            (Some(escape_userinfo(&rest[..at])), &rest[at + 1..])
        }
        _ => (None, rest),
    };
    if kind == "server" {
        if scheme != "unix" && scheme != "redis+unix" {
            check_port(after).map_err(|why| bad(&why.0))?;
        }
        return Ok(Spec::Server {
            url: match &userinfo {
                Some(u) => format!("{scheme}://{u}@{after}"),
                None => url.to_string(),
            },
            tls,
        });
    }
    let authority_end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (hosts, path) = after.split_at(authority_end);
    let default_port = if kind == "cluster" { 6379 } else { 26379 };
    let hosts = hosts
        .split(',')
        .map(|h| host(h, default_port))
        .collect::<Result<Vec<Host>, BadHost>>()
        .map_err(|why| bad(&why.0))?;
    if path.contains(['?', '#']) {
        return Err(bad(
            "a cluster or sentinel URL takes no ?query or #fragment",
        ));
    }
    if kind == "cluster" {
        return match path.trim_end_matches('/') {
            "" | "/0" => Ok(Spec::Cluster {
                seeds: hosts,
                userinfo,
                tls,
            }),
            _ => Err(bad("a Redis Cluster has only database 0")),
        };
    }
    let mut parts = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .split('/');
    let master = parts.next().unwrap_or_default();
    if master.is_empty() {
        return Err(bad(
            "expected redis+sentinel://HOST[:PORT][,HOST[:PORT]...]/MASTER[/DB]: the name the \
             sentinels monitor is missing",
        ));
    }
    let db = match parts.next() {
        None => 0,
        Some(db) => db
            .parse::<i64>()
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| bad(&format!("'{db}' is not a database number")))?,
    };
    if parts.next().is_some() {
        return Err(bad("expected /MASTER[/DB] after the sentinels"));
    }
    Ok(Spec::Sentinel {
        sentinels: hosts,
        userinfo,
        master: master.to_string(),
        db,
        tls,
    })
}

/// What is wrong with one address of a host list, worded.
struct BadHost(String);

/// The port of a server URL's authority (`host:port` before any `/`, `?`
/// or `#`), when one is given, must be one: the URL parser would only say
/// that the URL does not parse.
fn check_port(after_userinfo: &str) -> Result<(), BadHost> {
    let authority = &after_userinfo[..after_userinfo
        .find(['/', '?', '#'])
        .unwrap_or(after_userinfo.len())];
    let port = match authority.rsplit_once(']') {
        Some((_, rest)) => rest.strip_prefix(':'),
        None => authority.rsplit_once(':').map(|(_, p)| p),
    };
    match port {
        None | Some("") => Ok(()),
        Some(p) => match p.parse::<u64>() {
            Ok(n) if (1..=65535).contains(&n) => Ok(()),
            Ok(n) => Err(BadHost(format!("port {n} is out of range (1 to 65535)"))),
            Err(_) => Err(BadHost(format!("'{p}' is not a port"))),
        },
    }
}

fn host(text: &str, default_port: u16) -> Result<Host, BadHost> {
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| BadHost(format!("'{text}' has no closing ']'")))?;
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(p) => (host, Some(p)),
                None => return Err(BadHost(format!("'{text}': expected :PORT after ']'"))),
            },
        }
    } else {
        match text.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(BadHost(if text.is_empty() {
            "an empty host in the list".to_string()
        } else {
            format!("'{text}' has no host")
        }));
    }
    if host.contains(['@', ' ', '/']) {
        return Err(BadHost(format!("'{host}' is not a host name")));
    }
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| BadHost(format!("'{p}' is not a port")))?,
    };
    Ok(Host {
        host: host.to_string(),
        port,
    })
}

/// User-info as a URL must spell it: `/`, `?`, `#` and `@` percent-escaped
/// (the crate decodes them again). A `%` is left alone: it already starts an
/// escape in a user-info written for a URL parser.
fn escape_userinfo(userinfo: &str) -> String {
    let mut out = String::with_capacity(userinfo.len());
    for c in userinfo.chars() {
        match c {
            '/' => out.push_str("%2F"),
            '?' => out.push_str("%3F"),
            '#' => out.push_str("%23"),
            '@' => out.push_str("%40"),
            c => out.push(c),
        }
    }
    out
}

/// Appends a URL's authority (`user:password@host:port`) with the password
/// replaced by `***`; a lone user-info (`redis://secret@host`,
/// `https://TOKEN@host`) is taken for a password.
pub(crate) fn push_masked_authority(out: &mut String, authority: &str) {
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***");
                }
                None if userinfo.is_empty() => {}
                None => out.push_str("***"),
            }
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
}

/// Where `url`'s authority (user-info, host, port) is: after `://`; in text
/// that does not parse as a URL (`redis:/:pw@h`, `:pw@h`, `redis//:pw@h`),
/// after its leading scheme-like word and the `:` and `/` that follow it,
/// since whatever comes before an `@` there may be user-info too. It ends at
/// the first `/`, `?` or `#` after the last `@` (or after its start, when
/// there is no `@`): everything between `://` and the last `@` is user-info,
/// as a password may hold `/`, `?`, `#` and `@`, and a URL parser (ours or
/// the crate's) that cut the authority at the first of them would show the
/// rest.
fn authority(url: &str) -> std::ops::Range<usize> {
    let start = match url.find("://") {
        Some(i) => i + 3,
        None => {
            let word = url
                .find(|c: char| !(c.is_ascii_alphanumeric() || "+.-".contains(c)))
                .unwrap_or(url.len());
            let lead = word
                + url[word..]
                    .find(|c: char| c != ':' && c != '/')
                    .unwrap_or(url.len() - word);
            // A word with no `:` or `/` after it is no scheme (`pw@h`).
            if lead == word { 0 } else { lead }
        }
    };
    let rest = &url[start..];
    let len = match rest.rfind('@') {
        Some(at) => {
            at + 1
                + rest[at + 1..]
                    .find(['/', '?', '#'])
                    .unwrap_or(rest.len() - at - 1)
        }
        None => rest.find(['/', '?', '#']).unwrap_or(rest.len()),
    };
    start..start + len
}

/// Whether a query's key names a password (`unix:///path?pass=secret`).
fn is_password_key(k: &str) -> bool {
    k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password")
}

/// The URL with any password replaced by `***`, for logs and errors.
/// Works on text that does not parse, since that is when it gets printed
/// (see `authority`).
pub(crate) fn redact(url: &str) -> String {
    let authority = authority(url);
    let mut out = url[..authority.start].to_string();
    push_masked_authority(&mut out, &url[authority.clone()]);
    out.push_str(&url[authority.end..]);
    if let Some(q) = out.find('?') {
        let (base, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if is_password_key(k) => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{base}{}", query.join("&"));
    }
    out
}

/// The secrets in `url`, the parts `redact` hides: the password of its
/// user-info (all of a lone user-info), as written and percent-decoded, and
/// a query's `pass` or `password`.
pub(super) fn secrets(url: &str) -> Vec<String> {
    let authority = authority(url);
    let mut found = Vec::new();
    if let Some(at) = url[authority.clone()].rfind('@') {
        let info = &url[authority.start..authority.start + at];
        found.push(info.split_once(':').map_or(info, |(_, pw)| pw).to_string());
    }
    if let Some((_, query)) = url[authority.end..].split_once('?') {
        found.extend(
            query
                .split('&')
                .filter_map(|kv| kv.split_once('=').filter(|(k, _)| is_password_key(k)))
                .map(|(_, v)| v.to_string()),
        );
    }
    let decoded: Vec<String> = found.iter().map(|s| percent_decoded(s)).collect();
    found.extend(decoded);
    found.retain(|s| !s.is_empty());
    found
}

/// `%XX` escapes decoded (an invalid one left as it is).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_passwords_only() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("redis://u:s3cret@h"), "redis://u:***@h");
        assert_eq!(redact("rediss://u:p@ss:w@h/2"), "rediss://u:***@h/2");
        assert_eq!(redact("redis://s3cret@h"), "redis://***@h");
        assert_eq!(
            redact("unix:///run/r.sock?db=1&pass=s3cret"),
            "unix:///run/r.sock?db=1&pass=***"
        );
        assert_eq!(redact("not a url"), "not a url");
        // All before the last `@` is user-info, whatever it holds.
        assert_eq!(redact("redis://h/0#frag@x"), "redis://***@x");
        for (url, shown) in [
            ("redis://:pa/ss@h:1/0", "redis://:***@h:1/0"),
            ("redis://u:pa?ss@h", "redis://u:***@h"),
            ("redis://u:pa#ss@h/2", "redis://u:***@h/2"),
            (
                "redis://:p@s/s?x#y@h:6379/0?a=1",
                "redis://:***@h:6379/0?a=1",
            ),
            ("rediss://u:a/b@h/#insecure", "rediss://u:***@h/#insecure"),
            ("redis+cluster://:p/w@h1,h2", "redis+cluster://:***@h1,h2"),
            (
                "redis+sentinel://:p#w@s1,s2/m",
                "redis+sentinel://:***@s1,s2/m",
            ),
            ("redis://:p/w@h:notaport", "redis://:***@h:notaport"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
        assert_eq!(
            redact("redis+sentinel://u:s3cret@h1:1,h2:2/m"),
            "redis+sentinel://u:***@h1:1,h2:2/m"
        );
        assert_eq!(
            redact("rediss+cluster://:s3cret@h1,h2"),
            "rediss+cluster://:***@h1,h2"
        );
    }

    #[test]
    fn redact_hides_what_may_be_user_info_in_text_that_does_not_parse() {
        for (text, shown) in [
            ("redis:/:PW@h", "redis:/:***@h"),
            (":PW@h", ":***@h"),
            ("redis//:PW@h", "redis//:***@h"),
            ("redis:/u:PW@h/0", "redis:/u:***@h/0"),
            ("PW@h", "***@h"),
            ("redis:/:P@W/x@h:1", "redis:/:***@h:1"),
            ("redis:/h?password=PW", "redis:/h?password=***"),
            ("lock1:6379", "lock1:6379"),
        ] {
            assert_eq!(redact(text), shown, "{text}");
        }
    }

    #[test]
    fn secrets_are_what_redact_hides() {
        assert_eq!(secrets("redis://h:1"), Vec::<String>::new());
        assert_eq!(secrets("redis://u:s3cret@h"), ["s3cret", "s3cret"]);
        assert_eq!(secrets("redis://:p%40ss@h"), ["p%40ss", "p@ss"]);
        assert_eq!(secrets("redis:/:PW@h"), ["PW", "PW"]);
        assert_eq!(
            secrets("unix:///r.sock?db=1&pass=s3cret"),
            ["s3cret", "s3cret"]
        );
    }

    fn h(host: &str, port: u16) -> Host {
        Host {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn cluster_urls() {
        assert_eq!(
            parse("redis+cluster://a:1,b,[::1]:3", "n"),
            Ok(Spec::Cluster {
                seeds: vec![h("a", 1), h("b", 6379), h("::1", 3)],
                userinfo: None,
                tls: false
            })
        );
        assert_eq!(
            parse("rediss+cluster://u:p@a/", "n"),
            Ok(Spec::Cluster {
                seeds: vec![h("a", 6379)],
                userinfo: Some("u:p".into()),
                tls: true
            })
        );
        for bad in [
            "redis+cluster://a:1/2",
            "redis+cluster://a:0",
            "redis+cluster://a:99999",
            "redis+cluster://",
            "redis+cluster://a,",
            "redis+cluster://[::1",
            "redis+cluster://a?x=1",
        ] {
            assert!(parse(bad, "n").is_err(), "{bad}");
        }
    }

    #[test]
    fn sentinel_urls() {
        assert_eq!(
            parse("redis+sentinel://:pw@s1,s2:5/mymaster/3", "n"),
            Ok(Spec::Sentinel {
                sentinels: vec![h("s1", 26379), h("s2", 5)],
                userinfo: Some(":pw".into()),
                master: "mymaster".into(),
                db: 3,
                tls: false
            })
        );
        assert!(matches!(
            parse("rediss+sentinel://s/m/", "n"),
            Ok(Spec::Sentinel {
                tls: true,
                db: 0,
                ..
            })
        ));
        for bad in [
            "redis+sentinel://s1",
            "redis+sentinel://s1/",
            "redis+sentinel://s1/m/x",
            "redis+sentinel://s1/m/-1",
            "redis+sentinel://s1/m/1/2",
            "redis+sentinel://s1:x/m",
        ] {
            assert!(parse(bad, "n").is_err(), "{bad}");
        }
    }

    #[test]
    fn passwords_with_url_delimiters_are_escaped_for_the_crate() {
        assert_eq!(
            parse("redis://:pa/ss?w#d@h:1/2", "n"),
            Ok(Spec::Server {
                url: "redis://:pa%2Fss%3Fw%23d@h:1/2".into(),
                tls: false
            })
        );
        assert_eq!(
            parse("redis+cluster://u:p@ss/w@a:1,b", "n"),
            Ok(Spec::Cluster {
                seeds: vec![h("a", 1), h("b", 6379)],
                userinfo: Some("u:p%40ss%2Fw".into()),
                tls: false
            })
        );
        let err = parse("redis+sentinel://:pa/ss@s1:x/m", "shown")
            .expect_err("bad port")
            .to_string();
        assert!(!err.contains("pa") && err.contains("shown"), "{err}");
    }

    #[test]
    fn servers_pass_through() {
        assert_eq!(
            parse("rediss://h:1/2", "n"),
            Ok(Spec::Server {
                url: "rediss://h:1/2".into(),
                tls: true
            })
        );
        assert!(parse("http://h", "n").is_err());
        assert!(parse("h:1", "n").is_err());
    }
}
