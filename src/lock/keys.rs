//! Where a lock keeps its keys in Redis.
//!
//! The lock itself is the *main key* `<prefix><name>` holding the token, as
//! redis-py's `Lock`, node-redlock and the like write it, so they and
//! redlock-run exclude each other on the same key. Everything else a lock
//! needs (holder record, fence counter, once-per markers, semaphore slots,
//! the `--wait` queue, the run history, the release channel) is a *helper
//! key*, named after the main key in braces:
//!
//! ```text
//! {<prefix><name>}:<kind>          {lock:deploy-prod}:fence
//!                                  {lock:deploy-prod}:slot:3:holder
//! ```
//!
//! A main key must be printable ASCII without `{` or `}` (`Keys::new`
//! refuses any other, before anything is sent). That rule is what makes the
//! layout safe:
//!
//! * One Cluster slot per lock. Redis Cluster hashes only the part of a key
//!   between its first `{` and the next `}` when there is one. A main key has
//!   no brace, so it is hashed whole; a helper key's tag is exactly the main
//!   key, so every helper key is in the main key's slot, and a script may
//!   name all of a lock's keys at once.
//! * No helper key is another lock's main key: every helper key starts with
//!   `{`, and no main key may.
//! * No two (main key, kind) pairs share a helper key: the main key holds no
//!   `}`, so the first `}` of a helper key ends it, and the kind is what
//!   follows the `:` after it.
//! * Operators can read and find them: every key is printable, so
//!   `redis-cli --scan` prints each once, and the glob `{<main key>}:*`
//!   (metacharacters escaped, see `pattern`) finds one lock's helper keys and
//!   no other lock's: `{lock:deploy}:` and `{lock:deploy-prod}:` part at the
//!   `}`. ACL patterns `~lock:*` and `~{lock:*` cover main and helper keys.
//!
//! The layout before this one put a NUL byte after the main key and two
//! solved bytes after the kind (`<main> NUL fence NUL <2 bytes>`), keys no
//! operator could type. Its fence counter is still read, so that `--fence`
//! tokens keep rising across the upgrade (`legacy_fence`); its other keys
//! expire by themselves, and `forget` removes them (`legacy_pattern`).

use std::fmt;

/// One lock's keys.
#[derive(Clone, PartialEq, Eq)]
pub struct Keys {
    main: Vec<u8>,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Keys({})", show(&self.main))
    }
}

impl Keys {
    /// The keys of the lock `<prefix><name>`; an error (one line, for a usage
    /// error) when the name or prefix breaks the rule of the module's doc.
    pub fn new(prefix: &[u8], name: &[u8]) -> Result<Keys, BadName> {
        if name.is_empty() {
            return Err(BadName::Empty);
        }
        allowed("--prefix", prefix)?;
        allowed("--key", name)?;
        Ok(Keys {
            main: [prefix, name].concat(),
        })
    }

    /// `<prefix><name>`: the lock, holding the token.
    pub fn lock(&self) -> &[u8] {
        &self.main
    }

    /// With `--limit N`: slot `i`'s key, a lock of its own.
    pub(crate) fn slot(&self, i: u32) -> Vec<u8> {
        self.helper(&format!("slot:{i}"))
    }

    /// The key a holder takes: the lock, or one of its slots.
    pub fn taken(&self, slot: Option<u32>) -> Vec<u8> {
        match slot {
            None => self.main.clone(),
            Some(i) => self.slot(i),
        }
    }

    /// Who holds the lock (or slot): information for `status`.
    pub fn holder(&self, slot: Option<u32>) -> Vec<u8> {
        match slot {
            None => self.helper("holder"),
            Some(i) => self.helper(&format!("slot:{i}:holder")),
        }
    }

    /// The `--fence` counter.
    pub fn fence(&self) -> Vec<u8> {
        self.helper("fence")
    }

    /// The `--fence` counter as the previous layout named it, in the main
    /// key's slot: the acquire reads it beside `fence` and takes the larger,
    /// so that a counter kept there carries over; nothing writes it.
    pub fn legacy_fence(&self) -> Vec<u8> {
        legacy_helper(&self.main, "fence")
    }

    /// The `--once-per` marker of the window starting at `start` (unix s).
    pub fn once(&self, start: u64) -> Vec<u8> {
        self.helper(&format!("once:{start}"))
    }

    /// The --limit holders that hold a slot now: a sorted set of
    /// `<N>:<token>`, each scored by when its slot lapses (server ms). A
    /// plain holder and a --limit holder exclude each other by it, and runs
    /// with different N refuse each other (see `scripts::ACQUIRE`).
    pub fn slots(&self) -> Vec<u8> {
        self.helper("slots")
    }

    /// The `--shared` readers that hold a share now: a sorted set of their
    /// tokens, each scored by when its share lapses (server ms). A writer is
    /// refused while it has a live entry (see `scripts::ACQUIRE`).
    pub fn readers(&self) -> Vec<u8> {
        self.helper("readers")
    }

    /// Who each reader is (a hash: token → its record as a JSON object), for
    /// `status`; a reader's field goes with its share.
    pub fn reader_records(&self) -> Vec<u8> {
        self.helper("readers:records")
    }

    /// The `--wait` queue: queued waiters' tokens, scored by arrival (a
    /// sorted set).
    pub fn queue(&self) -> Vec<u8> {
        self.helper("queue")
    }

    /// When each queued waiter's place lapses unless it renews it, in the
    /// server's milliseconds (a hash).
    pub fn waiters(&self) -> Vec<u8> {
        self.helper("waiters")
    }

    /// The channel a release is announced on (every slot shares it); a
    /// queued waiter listens on `<channel>:<token>`.
    pub fn released(&self) -> Vec<u8> {
        self.helper("released")
    }

    /// The run history: a capped list of the runs that took the lock (every
    /// slot's runs in one list), newest first.
    pub fn history(&self) -> Vec<u8> {
        self.helper("history")
    }

    /// The SCAN pattern of every helper key of this lock and of no other:
    /// `{<main key>}:*` with the main key's glob metacharacters escaped.
    pub(crate) fn pattern(&self) -> Vec<u8> {
        let mut p = b"{".to_vec();
        p.extend(glob_escape(&self.main));
        p.extend_from_slice(b"}:*");
        p
    }

    /// The SCAN pattern of this lock's --once-per markers.
    pub(crate) fn once_pattern(&self) -> Vec<u8> {
        let mut p = b"{".to_vec();
        p.extend(glob_escape(&self.main));
        p.extend_from_slice(b"}:once:*");
        p
    }

    /// The SCAN pattern of this lock's keys in the previous layout: the main
    /// key, a NUL byte, anything.
    pub(crate) fn legacy_pattern(&self) -> Vec<u8> {
        let mut p = glob_escape(&self.main);
        p.extend_from_slice(b"\0*");
        p
    }

    /// The kind of `key` when it is one of this lock's helper keys
    /// (`slot:3` for `{lock:x}:slot:3`).
    pub(crate) fn kind_of<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        key.strip_prefix(b"{")?
            .strip_prefix(self.main.as_slice())?
            .strip_prefix(b"}:")
    }

    /// `{<main key>}:<kind>`.
    fn helper(&self, kind: &str) -> Vec<u8> {
        debug_assert!(!kind.contains(['{', '}']) && !kind.is_empty());
        let mut key = Vec::with_capacity(self.main.len() + kind.len() + 3);
        key.push(b'{');
        key.extend_from_slice(&self.main);
        key.extend_from_slice(b"}:");
        key.extend_from_slice(kind.as_bytes());
        key
    }
}

/// What breaks the rule on `<prefix><name>` (see the module's doc): a usage
/// error, naming the flag at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BadName {
    /// An empty --key.
    Empty,
    /// A byte outside printable ASCII.
    NotPrintable { flag: &'static str, text: Vec<u8> },
    /// A brace, which only helper keys hold.
    Brace { flag: &'static str, text: Vec<u8> },
}

impl fmt::Display for BadName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadName::Empty => f.write_str("--key must not be empty"),
            BadName::NotPrintable { flag, text } => write!(
                f,
                "{flag} must be printable ASCII (space to '~'): '{}' is not",
                show(text)
            ),
            BadName::Brace { flag, text } => {
                let braces = match (text.contains(&b'{'), text.contains(&b'}')) {
                    (true, true) => "'{' and '}' are",
                    (true, false) => "'{' is",
                    _ => "'}' is",
                };
                write!(
                    f,
                    "{flag} '{}': {braces} reserved for redlock-run's helper keys (they keep a \
                     lock's keys in one Cluster slot)",
                    show(text)
                )
            }
        }
    }
}

impl std::error::Error for BadName {}

/// The rule on `<prefix><name>`, checked on each part so that the message
/// names the flag at fault.
fn allowed(flag: &'static str, text: &[u8]) -> Result<(), BadName> {
    if !text.iter().all(|b| (0x20..=0x7e).contains(b)) {
        return Err(BadName::NotPrintable {
            flag,
            text: text.to_vec(),
        });
    }
    if text.contains(&b'{') || text.contains(&b'}') {
        return Err(BadName::Brace {
            flag,
            text: text.to_vec(),
        });
    }
    Ok(())
}

/// `text` with Redis glob metacharacters (`*?[]\`) escaped, so that a
/// pattern built from it matches it literally.
fn glob_escape(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 4);
    for b in text {
        if b"*?[]\\".contains(b) {
            out.push(b'\\');
        }
        out.push(*b);
    }
    out
}

/// A helper key of the previous layout, for a main key without braces:
/// `<main> NUL <kind> NUL <pad>`, the pad solved so that the key's CRC16
/// equals the main key's (its slot), led by one more byte while the two
/// solved bytes contained `}`.
fn legacy_helper(main: &[u8], kind: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(main.len() + kind.len() + 5);
    key.extend_from_slice(main);
    key.push(0);
    key.extend_from_slice(kind.as_bytes());
    key.push(0);
    let target = crc16(0, main);
    let mut pad = solve(crc16(0, &key), target);
    let mut lead = b'a';
    while pad.contains(&b'}') {
        key.truncate(main.len() + kind.len() + 2);
        key.push(lead);
        pad = solve(crc16(0, &key), target);
        lead += 1;
    }
    key.extend_from_slice(&pad);
    key
}

/// The part of `key` Redis Cluster hashes when it has one: the bytes between
/// the first `{` and the first `}` after it, if not empty.
pub(crate) fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|b| *b == b'{')?;
    let close = key[open + 1..].iter().position(|b| *b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The Redis Cluster hash slot of `key`.
pub(crate) fn hash_slot(key: &[u8]) -> u16 {
    crc16(0, hash_tag(key).unwrap_or(key)) % 16384
}

/// CRC-16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster uses it.
const TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 0x8000 != 0 {
                (c << 1) ^ 0x1021
            } else {
                c << 1
            };
            bit += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

fn crc16(mut crc: u16, bytes: &[u8]) -> u16 {
    for b in bytes {
        crc = (crc << 8) ^ TABLE[usize::from((crc >> 8) as u8 ^ b)];
    }
    crc
}

/// For each low byte, the table index whose entry ends in it (the low bytes
/// of the table are a permutation of 0..=255).
const BY_LOW_BYTE: [u8; 256] = {
    let mut inv = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        inv[(TABLE[i] & 0xff) as usize] = i as u8;
        i += 1;
    }
    inv
};

/// The two bytes that take the CRC register from `state` to `target`.
///
/// One step is `c' = (c << 8) ^ T[(c >> 8) ^ b]`: the low byte of `c'` is the
/// low byte of the table entry, which picks the entry, and so the byte.
fn solve(state: u16, target: u16) -> [u8; 2] {
    // Second step: its entry must end in target's low byte.
    let i2 = BY_LOW_BYTE[usize::from(target as u8)];
    // ... and the register before it must then have this low byte.
    let mid_low = (target >> 8) as u8 ^ (TABLE[usize::from(i2)] >> 8) as u8;
    let i1 = BY_LOW_BYTE[usize::from(mid_low)];
    let b1 = i1 ^ (state >> 8) as u8;
    let mid = (state << 8) ^ TABLE[usize::from(i1)];
    let b2 = i2 ^ (mid >> 8) as u8;
    [b1, b2]
}

/// Bytes as text for messages: printable ASCII as is, the rest escaped.
pub(crate) fn show(key: &[u8]) -> String {
    key.escape_ascii().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn crc16_and_slots_match_redis() {
        assert_eq!(crc16(0, b"123456789"), 0x31c3);
        // From the Redis Cluster specification's hash tag examples.
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        assert_eq!(hash_slot(b"foo{}{bar}"), crc16(0, b"foo{}{bar}") % 16384);
        assert_eq!(hash_slot(b"foo{{bar}}zap"), hash_slot(b"{bar"));
        assert_eq!(hash_slot(b"foo{bar}{zap}"), hash_slot(b"bar"));
        assert_eq!(hash_slot(b"foo"), 12182);
    }

    #[test]
    fn solve_reaches_any_target() {
        for state in [0u16, 1, 0x1234, 0xffff, 0x8000] {
            for target in [0u16, 0x31c3, 0xffff, 7, 0x8001] {
                let pad = solve(state, target);
                assert_eq!(crc16(state, &pad), target, "{state:#x} -> {target:#x}");
            }
        }
    }

    /// Every helper key of `k` (a few windows and slots), main key first.
    fn keys_of(k: &Keys) -> Vec<Vec<u8>> {
        let mut v = vec![
            k.lock().to_vec(),
            k.holder(None),
            k.fence(),
            k.released(),
            k.once(0),
            k.once(3600),
            k.slots(),
            k.queue(),
            k.waiters(),
            k.history(),
        ];
        for i in 0..3 {
            v.push(k.slot(i));
            v.push(k.holder(Some(i)));
        }
        v
    }

    /// Names built from the pieces that collided in older layouts (a kind
    /// after a colon), what would be braces, glob characters and bytes
    /// outside printable ASCII.
    fn adversarial_names() -> Vec<Vec<u8>> {
        let pieces: [&[u8]; 19] = [
            b"x",
            b":",
            b"{",
            b"}",
            b"{x}",
            b"}:",
            b":holder",
            b":fence",
            b":once:0",
            b":slot:1",
            b":released",
            b"slot:1",
            b"\0",
            b"\n",
            b"\xff",
            b"*",
            b"[a]",
            b"\\",
            b" ",
        ];
        let mut names: Vec<Vec<u8>> = pieces.iter().map(|p| p.to_vec()).collect();
        for a in &pieces {
            for b in &pieces {
                names.push([*a, *b].concat());
                for c in [b"x".as_slice(), b"}", b":holder", b"?"] {
                    names.push([*a, *b, c].concat());
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }

    fn refusable(text: &[u8]) -> bool {
        text.iter()
            .any(|b| !(0x20..=0x7e).contains(b) || *b == b'{' || *b == b'}')
    }

    #[test]
    fn no_two_locks_share_a_key_and_each_lock_is_one_slot() {
        let prefixes: [&[u8]; 5] = [b"lock:", b"", b"{", b"a}", b"lock:x"];
        // Every key, with the lock (main key) it belongs to.
        let mut owner: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut locks = 0;
        for prefix in prefixes {
            for name in adversarial_names() {
                let keys = match Keys::new(prefix, &name) {
                    Ok(k) => k,
                    Err(_) => {
                        assert!(refusable(&name) || refusable(prefix), "{}", show(&name));
                        continue;
                    }
                };
                assert!(!refusable(&name) && !refusable(prefix));
                locks += 1;
                let main = keys.lock();
                let slot = hash_slot(main);
                assert_eq!(slot, crc16(0, main) % 16384, "a main key has no tag");
                let all = keys_of(&keys);
                for (i, key) in all.iter().enumerate() {
                    assert_eq!(hash_slot(key), slot, "{} in another slot", show(key));
                    assert!(key.iter().all(|b| (0x20..=0x7e).contains(b)));
                    if i > 0 {
                        assert!(key.starts_with(b"{"), "{}", show(key));
                        assert_eq!(hash_tag(key), Some(main));
                        // The key gives its lock and kind back.
                        let close = key.iter().position(|b| *b == b'}').expect("a }");
                        assert_eq!(&key[1..close], main);
                        assert!(keys.kind_of(key).is_some_and(|k| !k.is_empty()));
                    } else {
                        assert!(!key.starts_with(b"{"));
                        assert!(keys.kind_of(key).is_none());
                    }
                    if let Some(other) = owner.insert(key.clone(), main.to_vec()) {
                        assert_eq!(
                            other,
                            main,
                            "{} belongs to both {} and {}",
                            show(key),
                            show(&other),
                            show(main)
                        );
                    }
                }
                let mut distinct = all.clone();
                distinct.sort();
                distinct.dedup();
                assert_eq!(distinct.len(), all.len(), "{keys:?} reuses a key");
            }
        }
        assert!(locks > 1000, "only {locks} locks tried");
    }

    #[test]
    fn random_and_huge_names() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut owner: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for _ in 0..3000 {
            let len = rng.random_range(1..12);
            // Mostly colons and glob characters, where collisions would hide.
            let name: Vec<u8> = (0..len)
                .map(|_| *b":ab*?\\ ".get(rng.random_range(0..8)).unwrap_or(&b'a'))
                .collect();
            let keys = Keys::new(b"lock:", &name).expect("printable");
            for key in keys_of(&keys) {
                assert_eq!(hash_slot(&key), hash_slot(keys.lock()));
                let prev = owner.insert(key.clone(), keys.lock().to_vec());
                assert!(prev.is_none_or(|p| p == keys.lock()), "{}", show(&key));
            }
        }
        let huge = vec![b':'; 1 << 20];
        let keys = Keys::new(b"lock:", &huge).expect("1 MB name");
        for key in keys_of(&keys) {
            assert_eq!(hash_slot(&key), hash_slot(keys.lock()));
        }
    }

    #[test]
    fn keys_read_as_documented() {
        let k = Keys::new(b"lock:", b"deploy-prod").expect("valid");
        let s = |v: Vec<u8>| String::from_utf8(v).expect("ASCII");
        assert_eq!(k.lock(), b"lock:deploy-prod");
        assert_eq!(s(k.holder(None)), "{lock:deploy-prod}:holder");
        assert_eq!(s(k.fence()), "{lock:deploy-prod}:fence");
        assert_eq!(s(k.history()), "{lock:deploy-prod}:history");
        assert_eq!(s(k.queue()), "{lock:deploy-prod}:queue");
        assert_eq!(s(k.waiters()), "{lock:deploy-prod}:waiters");
        assert_eq!(s(k.slots()), "{lock:deploy-prod}:slots");
        assert_eq!(s(k.slot(3)), "{lock:deploy-prod}:slot:3");
        assert_eq!(s(k.taken(Some(3))), "{lock:deploy-prod}:slot:3");
        assert_eq!(s(k.holder(Some(3))), "{lock:deploy-prod}:slot:3:holder");
        assert_eq!(s(k.once(1733112000)), "{lock:deploy-prod}:once:1733112000");
        assert_eq!(s(k.released()), "{lock:deploy-prod}:released");
        assert_eq!(
            k.kind_of(b"{lock:deploy-prod}:slot:3"),
            Some(&b"slot:3"[..])
        );
        assert_eq!(k.kind_of(b"{lock:deploy-prod-2}:fence"), None);
        assert_eq!(k.kind_of(b"{lock:deploy}:fence"), None);
    }

    #[test]
    fn names_outside_the_rule_are_refused_with_the_reason() {
        for ok in [
            &b"a b"[..],
            b"\"quoted'",
            b"');redis.call('flushall');--",
            b"*",
            b"~ !",
        ] {
            assert!(Keys::new(b"lock:", ok).is_ok(), "{}", show(ok));
        }
        let err = |p: &[u8], n: &[u8]| Keys::new(p, n).expect_err("refused").to_string();
        assert_eq!(err(b"lock:", b""), "--key must not be empty");
        assert_eq!(
            err(b"lock:", b"a{b}"),
            "--key 'a{b}': '{' and '}' are reserved for redlock-run's helper keys (they keep a \
             lock's keys in one Cluster slot)"
        );
        assert!(err(b"lock:", b"a}b").starts_with("--key 'a}b': '}' is reserved"));
        assert!(err(b"lock:{", b"x").starts_with("--prefix 'lock:{': '{' is reserved"));
        for bad in [&b"x\ny"[..], "é".as_bytes(), b"\0", b"\x7f", b"tab\there"] {
            let e = err(b"lock:", bad);
            assert!(e.starts_with("--key must be printable ASCII"), "{e}");
            assert!(!e.contains('\n') && e.is_ascii(), "{e}");
        }
        assert!(err(b"l\x01", b"x").starts_with("--prefix must be printable ASCII"));
    }

    #[test]
    fn scan_patterns_escape_glob_characters() {
        let k = Keys::new(b"lock:", b"a*b?[c]\\d").expect("valid");
        assert_eq!(k.pattern(), b"{lock:a\\*b\\?\\[c\\]\\\\d}:*");
        assert_eq!(k.legacy_pattern(), b"lock:a\\*b\\?\\[c\\]\\\\d\0*");
        let k = Keys::new(b"lock:", b"deploy").expect("valid");
        assert_eq!(k.pattern(), b"{lock:deploy}:*");
    }

    /// The bytes the previous layout gave these counters (taken from its
    /// code, which was checked against a real cluster's CLUSTER KEYSLOT).
    #[test]
    fn legacy_fence_is_the_previous_layouts_counter() {
        let legacy = |name: &[u8]| Keys::new(b"lock:", name).expect("valid").legacy_fence();
        assert_eq!(legacy(b"report"), b"lock:report\0fence\x002\x1e");
        assert_eq!(legacy(b"deploy-prod"), b"lock:deploy-prod\0fence\0\xb2\xb9");
        // Two solved bytes would have held a `}`: one more byte leads them.
        assert_eq!(legacy(b"job-2"), b"lock:job-2\0fence\0a\x87\x88");
        for name in [&b"report"[..], b"deploy-prod", b"job-2", b"x", b"a:b c"] {
            let k = Keys::new(b"lock:", name).expect("valid");
            assert_eq!(hash_slot(&k.legacy_fence()), hash_slot(k.lock()));
            assert!(!k.legacy_fence().contains(&b'}'));
        }
    }
}
