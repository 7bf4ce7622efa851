//! redlock-run: run a command under a lock held on one Redis node or a
//! Redlock quorum of independent nodes.

pub mod admin;
pub mod child;
pub mod cli;
pub mod exit;
pub mod lock;
pub mod log;
pub mod node;
pub mod quorum;
pub mod redlock;
pub mod report;
pub mod run;
pub mod signals;
pub mod supervise;
