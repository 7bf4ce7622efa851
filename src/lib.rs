//! redlock-run: run a command under a lock held on one Redis node or a
//! Redlock quorum of independent nodes.

pub(crate) mod admin;
pub mod cli;
pub(crate) mod clock;
pub(crate) mod config;
pub(crate) mod error;
pub mod exit;
pub(crate) mod files;
pub(crate) mod host;
pub mod lock;
pub mod log;
pub mod metrics;
pub(crate) mod notify;
pub(crate) mod option_file;
pub mod outcome;
pub(crate) mod process;
pub(crate) mod program;
pub(crate) mod report;
pub mod run;
pub(crate) mod run_record;
pub mod signals;
pub(crate) mod text;
pub(crate) mod wall;
pub(crate) mod x509;
