//! Small pieces of text for people, shared by every layer: the bottom of
//! the crate, depending on nothing of it.

use std::io;

/// The OS's description without Rust's " (os error N)" suffix.
pub(crate) fn os_message(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// `cell` followed by spaces up to `width` characters, for a column of a
/// table. By hand: `format!("{:<w$}")` panics on a width above 65,535, and
/// a cell read from a node may be that long.
pub(crate) fn pad(cell: &str, width: usize) -> String {
    let fill = width.saturating_sub(cell.chars().count());
    let mut out = String::with_capacity(cell.len() + fill);
    out.push_str(cell);
    out.extend(std::iter::repeat_n(' ', fill));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_padded_to_any_width() {
        assert_eq!(pad("ab", 4), "ab  ");
        assert_eq!(pad("ünï", 4), "ünï ");
        assert_eq!(pad("long", 2), "long");
        assert_eq!(pad("", 70_000).len(), 70_000);
    }

    #[test]
    fn os_errors_lose_their_number_and_others_are_kept() {
        assert_eq!(
            os_message(&io::Error::from_raw_os_error(libc::ENOENT)),
            "No such file or directory"
        );
        assert_eq!(os_message(&io::Error::other("too long")), "too long");
    }
}
