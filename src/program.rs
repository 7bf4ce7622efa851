//! The command a run starts, as given: a shell snippet (`-c`) or a program
//! and its arguments (after `--`).

use std::ffi::OsString;

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    Shell(String),
    Argv(Vec<OsString>),
}

impl Program {
    /// How to name the command in messages.
    pub(crate) fn describe(&self) -> String {
        match self {
            Program::Shell(_) => "/bin/sh -c".into(),
            Program::Argv(argv) => format!("'{}'", argv[0].to_string_lossy()),
        }
    }
}
