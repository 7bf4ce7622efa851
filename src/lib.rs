//! redlock-run: run a command under a lock held on one Redis node or a
//! Redlock quorum of independent nodes.

pub mod admin;
pub mod cli;
pub mod clock;
pub mod config;
pub mod exit;
pub mod files;
pub mod host;
pub mod lock;
pub mod log;
pub mod metrics;
pub mod option_file;
pub mod outcome;
pub mod process;
pub mod program;
pub mod report;
pub mod run;
pub mod run_record;
pub mod signals;
pub mod text;
pub mod wall;
