//! Where a lock keeps its books in Redis.
//!
//! The lock itself is the key `<prefix><name>` holding the token, as
//! redis-py's `Lock`, node-redlock and the like write it, so they and
//! redlock-run exclude each other on the same key. Everything else a lock
//! needs (holder record, fence counter, once-per markers, semaphore slots,
//! the release channel, the run history) is a *helper key*:
//!
//! ```text
//! <key> NUL <kind> [NUL <2 or 3 slot bytes>]
//! ```
//!
//! * A NUL byte cannot come from a command line or an environment variable,
//!   so no lock name under any prefix yields a key with one: no helper key is
//!   ever the main key of another lock. (The layout refuses keys with a NUL.)
//! * The main key ends at the first NUL and the kind at the next one, so two
//!   different (key, kind) pairs never give the same helper key.
//! * Every helper key starts with `<key>`, so an ACL pattern `~lock:*` that
//!   covers the lock covers its books.
//! * All of a lock's keys are in the main key's Redis Cluster hash slot. When
//!   the main key has a hash tag (`lock:{report}`) its helper keys carry the
//!   same tag. When it has none, the slot is CRC16 of the whole key, and two
//!   bytes appended after a second NUL are solved so that the helper key's
//!   CRC16 equals the main key's; they never contain `}`, so they cannot form
//!   a tag. CRC16 of 16 appended bits is a bijection, so the solution is
//!   exact and takes a few table look-ups.

use std::fmt;

/// One lock's keys.
#[derive(Clone, PartialEq, Eq)]
pub struct Keys {
    main: Vec<u8>,
    /// The main key has a hash tag of its own.
    tagged: bool,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Keys({})", show(&self.main))
    }
}

impl Keys {
    /// The keys of the lock `<prefix><name>`.
    pub fn new(prefix: &[u8], name: &[u8]) -> Result<Keys, String> {
        if name.is_empty() {
            return Err("--key must not be empty".into());
        }
        let main = [prefix, name].concat();
        if main.contains(&0) {
            return Err("--key and --prefix must not contain a NUL byte".into());
        }
        Ok(Keys {
            tagged: hash_tag(&main).is_some(),
            main,
        })
    }

    /// `<prefix><name>`: the lock, holding the token.
    pub fn lock(&self) -> &[u8] {
        &self.main
    }

    /// With `--limit N`: slot `i`'s key, a lock of its own.
    pub fn slot(&self, i: u32) -> Vec<u8> {
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

    /// The `--once-per` marker of the window starting at `start` (unix s).
    pub fn once(&self, start: u64) -> Vec<u8> {
        self.helper(&format!("once:{start}"))
    }

    /// Where versions before the `slots` set recorded N for `status` (a
    /// string); still read by `status`, no longer written.
    pub fn limit(&self) -> Vec<u8> {
        self.helper("limit")
    }

    /// The --limit holders that hold a slot now: a sorted set of
    /// `<N>:<token>`, each scored by when its slot lapses (server ms). A
    /// plain holder and a --limit holder exclude each other by it, and runs
    /// with different N refuse each other (see `scripts::ACQUIRE`).
    pub fn slots(&self) -> Vec<u8> {
        self.helper("slots")
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

    /// The channel a release is announced on (every slot shares it).
    pub fn released(&self) -> Vec<u8> {
        self.helper("released")
    }

    /// The run history: a capped list of the runs that took the lock (every
    /// slot's runs in one list), newest first.
    pub fn history(&self) -> Vec<u8> {
        self.helper("history")
    }

    /// `<key> NUL <kind>`, with slot bytes where the key has no tag.
    fn helper(&self, kind: &str) -> Vec<u8> {
        debug_assert!(!kind.contains(['\0', '{', '}']));
        let mut key = Vec::with_capacity(self.main.len() + kind.len() + 5);
        key.extend_from_slice(&self.main);
        key.push(0);
        key.extend_from_slice(kind.as_bytes());
        if !self.tagged {
            key.push(0);
            let target = crc16(0, &self.main);
            let state = crc16(0, &key);
            let mut pad = solve(state, target);
            // A `}` could close a `{` left open in the key, forming a tag:
            // lead with one more byte and solve again.
            let mut lead = b'a';
            while pad.contains(&b'}') {
                key.truncate(self.main.len() + kind.len() + 2);
                key.push(lead);
                pad = solve(crc16(0, &key), target);
                lead += 1;
            }
            key.extend_from_slice(&pad);
        }
        key
    }
}

/// The part of `key` Redis Cluster hashes when it has one: the bytes between
/// the first `{` and the first `}` after it, if not empty.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|b| *b == b'{')?;
    let close = key[open + 1..].iter().position(|b| *b == b'}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The Redis Cluster hash slot of `key`.
pub fn hash_slot(key: &[u8]) -> u16 {
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
pub fn show(key: &[u8]) -> String {
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

    fn keys_of(k: &Keys) -> Vec<Vec<u8>> {
        let mut v = vec![
            k.lock().to_vec(),
            k.holder(None),
            k.fence(),
            k.released(),
            k.once(0),
            k.once(3600),
            k.limit(),
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

    /// Names built from the pieces that collided in the old layout, braces,
    /// colons, NUL and high bytes.
    fn adversarial_names() -> Vec<Vec<u8>> {
        let pieces: [&[u8]; 17] = [
            b"x",
            b":",
            b"{",
            b"}",
            b"{x}",
            b"{}",
            b":holder",
            b":fence",
            b":once:0",
            b":slot:1",
            b":released",
            b":history",
            b"\0",
            b"\0holder",
            b"\xff",
            b"slot:1",
            b"}{",
        ];
        let mut names: Vec<Vec<u8>> = pieces.iter().map(|p| p.to_vec()).collect();
        for a in &pieces {
            for b in &pieces {
                names.push([*a, *b].concat());
                for c in [b"x".as_slice(), b"{", b"}", b":holder"] {
                    names.push([*a, *b, c].concat());
                }
            }
        }
        names.sort();
        names.dedup();
        names
    }

    #[test]
    fn no_two_locks_share_a_key_and_each_lock_is_one_slot() {
        let prefixes: [&[u8]; 5] = [b"lock:", b"", b"{", b"a{b}", b"lock:x"];
        // Every key, with the lock (main key) it belongs to.
        let mut owner: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut locks = 0;
        for prefix in prefixes {
            for name in adversarial_names() {
                let keys = match Keys::new(prefix, &name) {
                    Ok(k) => k,
                    Err(_) => {
                        assert!(
                            name.is_empty() || name.contains(&0) || prefix.contains(&0),
                            "refused {}",
                            show(&name)
                        );
                        continue;
                    }
                };
                locks += 1;
                let slot = hash_slot(keys.lock());
                let all = keys_of(&keys);
                for (i, key) in all.iter().enumerate() {
                    assert_eq!(hash_slot(key), slot, "{} in another slot", show(key));
                    if i > 0 {
                        assert!(key.contains(&0), "helper key without NUL");
                        assert!(key.starts_with(keys.lock()), "{}", show(key));
                    }
                    if let Some(other) = owner.insert(key.clone(), keys.lock().to_vec()) {
                        assert_eq!(
                            other,
                            keys.lock(),
                            "{} belongs to both {} and {}",
                            show(key),
                            show(&other),
                            show(keys.lock())
                        );
                    }
                }
                let mut distinct = all.clone();
                distinct.sort();
                distinct.dedup();
                assert_eq!(distinct.len(), all.len(), "{keys:?} reuses a key");
            }
        }
        assert!(locks > 4000, "only {locks} locks tried");
    }

    #[test]
    fn random_and_huge_names() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut owner: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        for _ in 0..3000 {
            let len = rng.random_range(1..12);
            // Mostly braces and colons, where collisions would hide.
            let name: Vec<u8> = (0..len)
                .map(|_| {
                    *b"{}:ab\x01\xfe"
                        .get(rng.random_range(0..7))
                        .unwrap_or(&b'a')
                })
                .collect();
            let keys = Keys::new(b"lock:", &name).expect("no NUL");
            for key in keys_of(&keys) {
                assert_eq!(hash_slot(&key), hash_slot(keys.lock()));
                let prev = owner.insert(key.clone(), keys.lock().to_vec());
                assert!(prev.is_none_or(|p| p == keys.lock()), "{}", show(&key));
            }
        }
        let huge = vec![b'}'; 1 << 20];
        let keys = Keys::new(b"lock:", &huge).expect("1 MB name");
        for key in keys_of(&keys) {
            assert_eq!(hash_slot(&key), hash_slot(keys.lock()));
        }
    }

    #[test]
    fn readable_where_it_can_be() {
        let k = Keys::new(b"lock:", b"{report}").expect("valid");
        assert_eq!(k.holder(None), b"lock:{report}\0holder");
        assert_eq!(k.once(3600), b"lock:{report}\0once:3600");
        assert_eq!(k.history(), b"lock:{report}\0history");
        let k = Keys::new(b"lock:", b"report").expect("valid");
        let h = k.holder(None);
        assert!(h.starts_with(b"lock:report\0holder\0"));
        assert!(h.len() <= b"lock:report\0holder\0".len() + 3);
        assert!(Keys::new(b"lock:", b"").is_err());
        assert!(Keys::new(b"lo\0", b"x").is_err());
    }
}
