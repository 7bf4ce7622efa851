//! The two fields of an X.509 certificate that redlock-run reads: its
//! version (rustls presents only v3 client certificates, see `cli`) and
//! when it expires (`check`). Both sit at the start of the DER encoding's
//! TBSCertificate, before any extension, so a walk over a few elements
//! reads them; the certificate itself is checked by rustls and webpki
//! when it is used. A full X.509 parser would bring two dozen crates for
//! these two fields.
//!
//! ```text
//! Certificate ::= SEQUENCE { tbsCertificate TBSCertificate, ... }
//! TBSCertificate ::= SEQUENCE {
//!     version [0] EXPLICIT INTEGER DEFAULT v1, serialNumber INTEGER,
//!     signature AlgorithmIdentifier, issuer Name,
//!     validity SEQUENCE { notBefore Time, notAfter Time }, ... }
//! Time ::= CHOICE { UTCTime, GeneralizedTime }
//! ```

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const EXPLICIT_0: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The DER element at the start of `b`: its tag, its contents and what
/// follows it. None when it is cut short or its length is not DER's.
fn element(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *b.first()?;
    let first = usize::from(*b.get(1)?);
    let (len, start) = if first < 0x80 {
        (first, 2)
    } else {
        // Long form: 1 to 4 length bytes (a certificate is far below 4 GiB).
        let n = first & 0x7f;
        if !(1..=4).contains(&n) {
            return None;
        }
        let len = b
            .get(2..2 + n)?
            .iter()
            .fold(0usize, |acc, x| (acc << 8) | usize::from(*x));
        (len, 2 + n)
    };
    let end = start.checked_add(len)?;
    Some((tag, b.get(start..end)?, b.get(end..)?))
}

/// The contents of the element at the start of `b` if it has tag `tag`,
/// and what follows it.
fn expect(b: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (t, contents, rest) = element(b)?;
    (t == tag).then_some((contents, rest))
}

/// TBSCertificate's fields, its version's (if any) split off.
fn tbs(der: &[u8]) -> Option<(Option<&[u8]>, &[u8])> {
    let (cert, _) = expect(der, SEQUENCE)?;
    let (tbs, _) = expect(cert, SEQUENCE)?;
    match expect(tbs, EXPLICIT_0) {
        Some((version, rest)) => Some((Some(version), rest)),
        None => Some((None, tbs)),
    }
}

/// The version of a DER certificate: 1 when TBSCertificate has no explicit
/// version field, else the field's value + 1. None if it does not parse.
pub(crate) fn version(der: &[u8]) -> Option<u8> {
    match tbs(der)? {
        (None, _) => Some(1),
        (Some(v), _) => expect(v, INTEGER)?.0.last().map(|x| x + 1),
    }
}

/// When a DER certificate expires (its notAfter), in seconds since the
/// Unix epoch. None if it does not parse.
pub(crate) fn not_after(der: &[u8]) -> Option<i64> {
    let (_, fields) = tbs(der)?;
    let (_, rest) = expect(fields, INTEGER)?; // serialNumber
    let (_, rest) = expect(rest, SEQUENCE)?; // signature
    let (_, rest) = expect(rest, SEQUENCE)?; // issuer
    let (validity, _) = expect(rest, SEQUENCE)?;
    let (_, _, after) = element(validity)?; // notBefore
    let (tag, time, _) = element(after)?;
    let text = std::str::from_utf8(time).ok()?;
    match tag {
        // YYMMDDHHMMSSZ: 50-99 are 1950-1999 (RFC 5280).
        UTC_TIME if text.len() == 13 => {
            let yy: i64 = text.get(..2)?.parse().ok()?;
            let year = if yy >= 50 { 1900 + yy } else { 2000 + yy };
            seconds(year, text.get(2..)?)
        }
        // YYYYMMDDHHMMSSZ.
        GENERALIZED_TIME if text.len() == 15 => seconds(text.get(..4)?.parse().ok()?, &text[4..]),
        _ => None,
    }
}

/// `year` and "MMDDHHMMSSZ" as seconds since the Unix epoch (UTC).
fn seconds(year: i64, rest: &str) -> Option<i64> {
    if !rest.ends_with('Z') || !rest[..rest.len() - 1].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let field = |at: usize| rest.get(at..at + 2)?.parse::<i64>().ok();
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DER element of `tag` around `contents` (short or long form).
    fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match contents.len() {
            n if n < 0x80 => out.push(n as u8),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend(contents);
        out
    }

    /// A certificate whose TBSCertificate has `version` (None: v1) and
    /// `not_after` (tag and text), padded long enough for long-form lengths.
    fn cert(version: Option<u8>, not_after: (u8, &str)) -> Vec<u8> {
        let mut tbs = Vec::new();
        if let Some(v) = version {
            tbs.extend(tlv(EXPLICIT_0, &tlv(INTEGER, &[v])));
        }
        tbs.extend(tlv(INTEGER, &[0x01, 0x02]));
        tbs.extend(tlv(SEQUENCE, &tlv(0x06, &[0x2a; 8])));
        tbs.extend(tlv(SEQUENCE, &[0x31; 200]));
        let validity = [
            tlv(UTC_TIME, b"240101000000Z"),
            tlv(not_after.0, not_after.1.as_bytes()),
        ]
        .concat();
        tbs.extend(tlv(SEQUENCE, &validity));
        tbs.extend(tlv(SEQUENCE, &[0x05; 300]));
        tlv(
            SEQUENCE,
            &[tlv(SEQUENCE, &tbs), tlv(SEQUENCE, &[0; 10])].concat(),
        )
    }

    #[test]
    fn versions() {
        assert_eq!(
            version(&cert(Some(2), (UTC_TIME, "300101000000Z"))),
            Some(3)
        );
        assert_eq!(version(&cert(None, (UTC_TIME, "300101000000Z"))), Some(1));
        // The smallest TBSCertificates with and without the version field.
        let v3 = [
            0x30, 0x0a, 0x30, 0x08, 0xa0, 0x03, 0x02, 0x01, 0x02, 0x02, 0x01, 0x01,
        ];
        assert_eq!(version(&v3), Some(3));
        assert_eq!(
            version(&[0x30, 0x05, 0x30, 0x03, 0x02, 0x01, 0x01]),
            Some(1)
        );
        assert_eq!(version(&[0x04, 0x00]), None);
        assert_eq!(version(&[0x30, 0x82, 0xff]), None, "length past the end");
        assert_eq!(version(&[0x30, 0x85, 1, 1, 1, 1, 1]), None);
    }

    #[test]
    fn expiry_in_either_time_form() {
        let utc = cert(Some(2), (UTC_TIME, "300101000000Z"));
        assert_eq!(not_after(&utc), Some(1_893_456_000));
        let generalized = cert(Some(2), (GENERALIZED_TIME, "20500301123456Z"));
        assert_eq!(not_after(&generalized), Some(2_529_750_896));
        // 1950-1999 in UTCTime; a v1 certificate has the same fields.
        let old = cert(None, (UTC_TIME, "991231235959Z"));
        assert_eq!(not_after(&old), Some(946_684_799));
        for bad in [
            "300101000000",
            "30013100000Z",
            "301301000000Z",
            "3001010000+0Z",
        ] {
            assert_eq!(not_after(&cert(Some(2), (UTC_TIME, bad))), None, "{bad}");
        }
        assert_eq!(not_after(&cert(Some(2), (INTEGER, "300101000000Z"))), None);
        assert_eq!(not_after(b"not a certificate"), None);
    }

    #[test]
    fn leap_days_count() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(
            days_from_civil(2024, 2, 29) + 1,
            days_from_civil(2024, 3, 1)
        );
    }
}
