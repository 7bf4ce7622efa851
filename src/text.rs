//! Small pieces of text for people, shared by every layer: the bottom of
//! the crate, depending on nothing of it.

use std::io;

/// The OS's description without Rust's " (os error N)" suffix.
pub fn os_message(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_errors_lose_their_number_and_others_are_kept() {
        assert_eq!(
            os_message(&io::Error::from_raw_os_error(libc::ENOENT)),
            "No such file or directory"
        );
        assert_eq!(os_message(&io::Error::other("too long")), "too long");
    }
}
