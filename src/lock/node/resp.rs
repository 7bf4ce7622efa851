//! Replies as they arrive: where one whole RESP2 reply ends in a buffer that
//! grows a read at a time, within bounds a hostile or broken server cannot
//! stretch. The bytes of a whole reply are then decoded by the redis crate.
//!
//! A reply's length is the server's word, so it is checked before anything
//! is kept for it: a bulk string longer than [`MAX_BULK`], more than
//! [`MAX_VALUES`] values in one reply, a reply of more than [`MAX_REPLY`]
//! bytes in all, or a line longer than [`MAX_LINE`] is a protocol error for
//! that node. The scan resumes where the last one
//! stopped, so a reply that trickles in costs time linear in its bytes.

use redis::Value;

use super::broken::Broken;

/// The longest bulk string a node may send: far above any reply of
/// redlock-run's (a holder record, a history entry, an INFO section).
pub(super) const MAX_BULK: usize = 1 << 20;

/// The most values one reply may hold, nested ones included: a SCAN page
/// of a thousand keys, a history of a hundred runs, a few hundred readers.
pub(super) const MAX_VALUES: u64 = 64 * 1024;

/// The most bytes one reply may take in all: a hundred history records at
/// their cap (`scripts::RECORD_CAP`) fit, and a node's replies cannot add
/// up to more than this each, whatever it holds.
pub(super) const MAX_REPLY: usize = 1 << 20;

/// The longest line (a status, an error, a length) a node may send.
pub(super) const MAX_LINE: usize = 64 * 1024;

/// Where the scan of the reply at the front of a buffer stands.
#[derive(Debug)]
pub(super) struct Framer {
    /// The start of the next value's header line.
    pos: usize,
    /// Values still to come before the reply is whole.
    todo: u64,
    /// Values announced so far (the reply's own included).
    values: u64,
    /// Bytes up to here hold no line end of the header at `pos`.
    searched: usize,
    /// A bulk string's end (its CRLF included), once its header is read.
    bulk_end: Option<usize>,
}

impl Default for Framer {
    fn default() -> Framer {
        Framer {
            pos: 0,
            todo: 1,
            values: 1,
            searched: 0,
            bulk_end: None,
        }
    }
}

impl Framer {
    /// The length of the whole reply at the front of `buf`, once all of it
    /// is there. `buf` must only have grown since the last call; after a
    /// reply is taken off its front, the framer starts afresh.
    pub(super) fn scan(&mut self, buf: &[u8]) -> Result<Option<usize>, Broken> {
        loop {
            if let Some(end) = self.bulk_end {
                if buf.len() < end {
                    return Ok(None);
                }
                if &buf[end - 2..end] != b"\r\n" {
                    return Err(Broken::Malformed);
                }
                self.bulk_end = None;
                self.pos = end;
                self.searched = end;
            }
            if self.todo == 0 {
                let len = self.pos;
                *self = Framer::default();
                return Ok(Some(len));
            }
            let from = self.searched.max(self.pos);
            let Some(nl) = buf[from..].iter().position(|b| *b == b'\n') else {
                if buf.len() - self.pos > MAX_LINE {
                    return Err(Broken::Line { max: MAX_LINE });
                }
                if let Some(&first) = buf.get(self.pos)
                    && !b"+-:$*".contains(&first)
                {
                    return Err(Broken::NotResp(buf[self.pos..].to_vec()));
                }
                self.searched = buf.len();
                return Ok(None);
            };
            let end = from + nl + 1;
            self.header(&buf[self.pos..end])?;
            self.pos = end;
            self.searched = end;
        }
    }

    /// Takes in one header line (CRLF included).
    fn header(&mut self, line: &[u8]) -> Result<(), Broken> {
        if line.len() > MAX_LINE {
            return Err(Broken::Line { max: MAX_LINE });
        }
        if self.pos + line.len() > MAX_REPLY {
            return Err(Broken::Reply {
                got: self.pos + line.len(),
                max: MAX_REPLY,
            });
        }
        let Some(text) = line.strip_suffix(b"\r\n") else {
            return Err(Broken::NotResp(line.to_vec()));
        };
        let (kind, rest) = match text.split_first() {
            Some((k, rest)) => (*k, rest),
            None => return Err(Broken::Malformed),
        };
        self.todo -= 1;
        match kind {
            b'+' | b'-' | b':' => Ok(()),
            b'$' => match length(rest)? {
                None => Ok(()),
                Some(n) if n > MAX_BULK as u64 => Err(Broken::Bulk {
                    got: n,
                    max: MAX_BULK,
                }),
                Some(n) => {
                    // n is at most MAX_BULK: it fits.
                    let end = self.pos + line.len() + n as usize + 2;
                    if end > MAX_REPLY {
                        return Err(Broken::Reply {
                            got: end,
                            max: MAX_REPLY,
                        });
                    }
                    self.bulk_end = Some(end);
                    Ok(())
                }
            },
            b'*' => match length(rest)? {
                None => Ok(()),
                Some(n) => {
                    self.values = self.values.saturating_add(n);
                    if self.values > MAX_VALUES {
                        return Err(Broken::Values {
                            got: self.values,
                            max: MAX_VALUES,
                        });
                    }
                    self.todo += n;
                    Ok(())
                }
            },
            _ => Err(Broken::NotResp(line.to_vec())),
        }
    }
}

/// A length from a header: None for -1 (a nil bulk or array).
fn length(digits: &[u8]) -> Result<Option<u64>, Broken> {
    let text = std::str::from_utf8(digits).map_err(|_| Broken::Malformed)?;
    match text.parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(n) => u64::try_from(n).map(Some).map_err(|_| Broken::Malformed),
        Err(_) => Err(Broken::Malformed),
    }
}

/// Decodes one whole reply (as `Framer::scan` measured it).
pub(super) fn decode(frame: &[u8]) -> Result<Value, Broken> {
    redis::parse_redis_value(frame).map_err(|_| Broken::Malformed)
}

/// Decodes a reply once in this process, while the first request is in
/// flight: the decoder's first use costs tens of µs (the CPU feature
/// detection behind its byte search, code not yet paged in), and a wait for
/// a node is the one time nothing else is to be done.
pub(super) fn warm() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        let _ = std::hint::black_box(decode(b"*1\r\n$1\r\nx\r\n"));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> Result<Option<usize>, Broken> {
        Framer::default().scan(bytes)
    }

    #[test]
    fn replies_are_whole_or_nothing() {
        for reply in [
            &b"+OK\r\n"[..],
            b"-ERR no\r\n",
            b":12\r\n",
            b"$-1\r\n",
            b"$3\r\na\r\n\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n$2\r\nab\r\n*2\r\n$0\r\n\r\n:5\r\n",
        ] {
            assert_eq!(whole(reply), Ok(Some(reply.len())), "{reply:?}");
            // Fed a byte at a time, to one framer: whole only at the end.
            let mut f = Framer::default();
            for cut in 0..reply.len() {
                assert_eq!(f.scan(&reply[..cut]), Ok(None), "{:?}", &reply[..cut]);
            }
            assert_eq!(f.scan(reply), Ok(Some(reply.len())));
            let mut two = reply.to_vec();
            two.extend_from_slice(b":7\r\n");
            assert_eq!(whole(&two), Ok(Some(reply.len())));
        }
    }

    #[test]
    fn lengths_past_the_caps_are_refused_before_anything_is_kept() {
        assert_eq!(
            whole(b"$99999999999\r\n"),
            Err(Broken::Bulk {
                got: 99999999999,
                max: MAX_BULK
            })
        );
        assert_eq!(
            whole(b"*100000000\r\n"),
            Err(Broken::Values {
                got: 100_000_001,
                max: MAX_VALUES
            })
        );
        // Nested arrays count together.
        let mut nested = b"*2\r\n*40000\r\n".to_vec();
        nested.extend(std::iter::repeat_n(&b":1\r\n"[..], 40000).flatten());
        nested.extend_from_slice(b"*40000\r\n");
        assert!(matches!(whole(&nested), Err(Broken::Values { .. })));
        let long = vec![b'+'; MAX_LINE + 2];
        assert_eq!(whole(&long), Err(Broken::Line { max: MAX_LINE }));
        assert_eq!(whole(b"$-5\r\n"), Err(Broken::Malformed));
        // Bulks each within their cap, too many bytes together: refused at
        // the header that would pass the total, before its bytes are kept.
        let mut many = b"*300\r\n".to_vec();
        many.extend_from_slice(format!("${}\r\n", 600_000).as_bytes());
        many.resize(many.len() + 600_000, b'x');
        many.extend_from_slice(b"\r\n$600000\r\n");
        assert_eq!(
            whole(&many),
            Err(Broken::Reply {
                got: 1_200_028,
                max: MAX_REPLY
            })
        );
        assert_eq!(whole(b"$3\r\nabcXY"), Err(Broken::Malformed));
    }

    #[test]
    fn what_no_reply_starts_with_is_named_at_once() {
        let Err(Broken::NotResp(start)) = whole(b"HTTP/1.1 400 Bad") else {
            panic!("not named");
        };
        assert_eq!(start, b"HTTP/1.1 400 Bad");
    }

    #[test]
    fn a_reply_that_trickles_in_is_scanned_once() {
        // A bulk string of nearly a megabyte fed in small pieces: each call
        // looks only at what is new (a rescan from the start would take
        // minutes in a debug build).
        let size = MAX_REPLY - 64;
        let mut reply = format!("${size}\r\n").into_bytes();
        reply.resize(reply.len() + size, b'x');
        reply.extend_from_slice(b"\r\n");
        let mut f = Framer::default();
        let mut n = 0;
        while n < reply.len() {
            n = (n + 7).min(reply.len());
            let got = f.scan(&reply[..n]);
            if n < reply.len() {
                assert_eq!(got, Ok(None));
            } else {
                assert_eq!(got, Ok(Some(reply.len())));
            }
        }
        // A line that never ends: found too long once it passes the cap.
        let mut f = Framer::default();
        let mut line = b"+".to_vec();
        let mut result = Ok(None);
        while result == Ok(None) {
            line.extend_from_slice(&[b'a'; 1000]);
            result = f.scan(&line);
        }
        assert_eq!(result, Err(Broken::Line { max: MAX_LINE }));
        assert!(line.len() < MAX_LINE + 2000);
    }

    #[test]
    fn whole_replies_decode() {
        assert_eq!(decode(b":5\r\n"), Ok(Value::Int(5)));
        assert_eq!(
            decode(b"*2\r\n$1\r\na\r\n$-1\r\n"),
            Ok(Value::Array(vec![
                Value::BulkString(b"a".to_vec()),
                Value::Nil
            ]))
        );
    }
}
