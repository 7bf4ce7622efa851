//! How a connection went wrong: what `link` reports of a connection that
//! failed (`resp` of a reply no Redis server would send), which `error`
//! words for the requests it carried. Below all three.

use std::fmt;
use std::io;

use redis::Value;

/// How a connection went wrong.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Broken {
    /// Connecting (TLS handshake included) took longer than the timeout.
    ConnectTimeout,
    /// The connect failed (refused, unreachable).
    Connect(io::ErrorKind, String),
    /// The TLS handshake failed.
    Tls(String),
    /// The server refused the set-up, or its answer failed the check: the
    /// set-up's replies.
    Setup(Vec<Value>, &'static str),
    /// The server ended the connection: `first`, before any reply on it;
    /// `reset`, with a reset; `partial`, in the middle of a reply.
    Closed {
        first: bool,
        reset: bool,
        partial: bool,
    },
    /// Reading or writing failed.
    Io(String),
    /// A bulk string of `got` bytes, over `max`.
    Bulk { got: u64, max: usize },
    /// A reply of at least `got` values, over `max`.
    Values { got: u64, max: u64 },
    /// A reply of at least `got` bytes in all, over `max`.
    Reply { got: usize, max: usize },
    /// A line longer than `max`.
    Line { max: usize },
    /// A byte that starts no RESP2 value: the start of what came.
    NotResp(Vec<u8>),
    /// A length that is no number, or a value not ended by CRLF.
    Malformed,
    /// A reply that answers nothing redlock-run asked.
    Unasked,
}

/// In a clause. What the server sent is said here; `error::broken` words
/// the rest with the node's timeout and set-up, for the request at hand.
impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Broken::Bulk { got, max } => write!(
                f,
                "the server sent a reply of {got} bytes; redlock-run expects at most {max}"
            ),
            Broken::Values { got, max } => write!(
                f,
                "the server sent a reply of {got} values; redlock-run expects at most {max}"
            ),
            Broken::Reply { got, max } => write!(
                f,
                "the server sent a reply of more than {got} bytes in all; redlock-run expects \
                 at most {max}"
            ),
            Broken::Line { max } => write!(
                f,
                "the server sent a line of more than {max} bytes; redlock-run expects less"
            ),
            Broken::NotResp(start) => f.write_str(&not_resp(start)),
            Broken::Malformed => f.write_str("the server sent a malformed reply"),
            Broken::ConnectTimeout => f.write_str("connecting took too long"),
            Broken::Connect(_, e) | Broken::Io(e) | Broken::Tls(e) => f.write_str(e),
            Broken::Setup(_, why) => f.write_str(why),
            Broken::Closed { .. } => f.write_str("the server ended the connection"),
            Broken::Unasked => f.write_str("a reply to nothing asked"),
        }
    }
}

/// What is wrong when a server's first bytes are no Redis reply (a web
/// server's `HTTP/1.1 400 Bad Request`, an SSH banner, a TLS alert): one
/// clause, showing the start of the answer.
fn not_resp(buf: &[u8]) -> String {
    if matches!(buf.first(), Some(0x15 | 0x16)) && buf.get(1) == Some(&0x03) {
        return "answered in TLS: it wants rediss://".into();
    }
    let line = buf
        .split(|b| *b == b'\r' || *b == b'\n')
        .next()
        .unwrap_or(buf);
    let text: String = String::from_utf8_lossy(line)
        .chars()
        .take(60)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    format!(
        "does not speak the Redis protocol: it answered \"{text}\" (another service on that \
         port?)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_no_redis_reply_starts_with_is_named() {
        assert_eq!(
            not_resp(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"),
            "does not speak the Redis protocol: it answered \"HTTP/1.1 400 Bad Request\" \
             (another service on that port?)"
        );
        assert!(not_resp(b"SSH-2.0-OpenSSH_9.2p1\x07\r\n").contains("\"SSH-2.0-OpenSSH_9.2p1?\""));
        assert_eq!(
            not_resp(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x32]),
            "answered in TLS: it wants rediss://"
        );
    }
}
