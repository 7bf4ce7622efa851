//! Which proxy a ping goes through, chosen from the environment as curl
//! chooses: `https_proxy` (or `HTTPS_PROXY`) for https:// URLs, only the
//! lower-case `http_proxy` for http:// ones (the upper-case one can be set
//! by a CGI request's `Proxy:` header), then `all_proxy` (or `ALL_PROXY`);
//! none for a host that `no_proxy` (or `NO_PROXY`) names.

use std::net::IpAddr;

/// The proxy URL for a ping to `host` (without brackets) over https or
/// not; `var` reads the environment.
pub(super) fn choose(
    https: bool,
    host: &str,
    var: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    if let Some(list) = set("no_proxy").or_else(|| set("NO_PROXY"))
        && bypasses(&list, host)
    {
        return None;
    }
    let own = if https {
        set("https_proxy").or_else(|| set("HTTPS_PROXY"))
    } else {
        set("http_proxy")
    };
    own.or_else(|| set("all_proxy"))
        .or_else(|| set("ALL_PROXY"))
        .map(|p| p.trim().to_string())
}

/// Whether the `no_proxy` list names `host`: `*` names every host; a name
/// names itself and its subdomains (a leading dot changes nothing); an
/// address names itself, and `ADDRESS/BITS` the addresses in that range.
fn bypasses(list: &str, host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let ip: Option<IpAddr> = host.parse().ok();
    list.split([',', ' ']).map(str::trim).any(|entry| {
        let entry = entry.trim_matches(['[', ']']).to_ascii_lowercase();
        if entry == "*" {
            return true;
        }
        match ip {
            Some(ip) => in_range(ip, &entry),
            None => {
                let name = entry.trim_start_matches('.').trim_end_matches('.');
                !name.is_empty()
                    && (host == name
                        || host
                            .strip_suffix(name)
                            .is_some_and(|head| head.ends_with('.')))
            }
        }
    })
}

/// Whether `ip` is the address `entry`, or in its `/BITS` range.
fn in_range(ip: IpAddr, entry: &str) -> bool {
    let (addr, bits) = match entry.split_once('/') {
        Some((a, b)) => match b.parse::<u32>() {
            Ok(bits) => (a, Some(bits)),
            Err(_) => return false,
        },
        None => (entry, None),
    };
    let Ok(net) = addr.trim_matches(['[', ']']).parse::<IpAddr>() else {
        return false;
    };
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            same_prefix(a.to_bits().into(), b.to_bits().into(), 32, bits)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => same_prefix(a.to_bits(), b.to_bits(), 128, bits),
        _ => false,
    }
}

/// Whether the first `bits` (all `width` when None) of `a` and `b` agree.
fn same_prefix(a: u128, b: u128, width: u32, bits: Option<u32>) -> bool {
    let bits = bits.unwrap_or(width);
    if bits > width {
        return false;
    }
    let shift = width - bits;
    if shift >= 128 {
        return true;
    }
    (a >> shift) == (b >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn each_scheme_has_its_variable_as_curl_reads_them() {
        let e = env(&[
            ("https_proxy", "http://tls-proxy:3128"),
            ("HTTP_PROXY", "http://cgi:1"),
            ("ALL_PROXY", "http://any:8080"),
        ]);
        assert_eq!(
            choose(true, "hc-ping.com", &e).as_deref(),
            Some("http://tls-proxy:3128")
        );
        // The upper-case HTTP_PROXY is not read: all_proxy serves.
        assert_eq!(
            choose(false, "hc-ping.com", &e).as_deref(),
            Some("http://any:8080")
        );
        let e = env(&[("HTTPS_PROXY", "http://upper:1"), ("https_proxy", "")]);
        assert_eq!(choose(true, "h", &e).as_deref(), Some("http://upper:1"));
        assert_eq!(choose(false, "h", &e), None);
        assert_eq!(choose(true, "h", env(&[])), None);
    }

    #[test]
    fn no_proxy_names_hosts_their_subdomains_and_address_ranges() {
        let list = "example.com, .internal,10.0.0.0/8 ,::1,192.168.1.7";
        for host in [
            "example.com",
            "a.example.com",
            "hc.internal",
            "internal",
            "10.2.3.4",
            "::1",
            "192.168.1.7",
            "EXAMPLE.com.",
        ] {
            assert!(bypasses(list, host), "{host}");
        }
        for host in [
            "badexample.com",
            "example.org",
            "11.0.0.1",
            "::2",
            "192.168.1.8",
        ] {
            assert!(!bypasses(list, host), "{host}");
        }
        assert!(bypasses("*", "anything"));
        assert!(!bypasses("", "anything"));
        assert!(bypasses("0.0.0.0/0", "8.8.8.8"));
        assert!(!bypasses("10.0.0.0/33", "10.0.0.1"));
        let e = env(&[("https_proxy", "http://p:1"), ("NO_PROXY", "hc-ping.com")]);
        assert_eq!(choose(true, "hc-ping.com", &e), None);
        assert!(choose(true, "other.com", &e).is_some());
        let e = env(&[
            ("https_proxy", "http://p:1"),
            ("no_proxy", "x"),
            ("NO_PROXY", "*"),
        ]);
        assert!(
            choose(true, "h", &e).is_some(),
            "the lower-case one is read first"
        );
    }
}
