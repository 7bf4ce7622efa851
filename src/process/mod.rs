//! The command's side of a run: starting it, keeping its whole process tree
//! under watch, passing signals on, and stopping it in time.

pub mod signals;
pub mod spawn;
pub mod supervise;
