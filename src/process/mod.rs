//! The command's side of a run: starting it through the guard, keeping its
//! whole process tree under watch, passing signals on, and stopping it in time.

pub mod attempts;
pub mod events;
pub mod guard;
pub mod heartbeat;
pub mod signals;
pub mod spawn;
pub mod supervise;
pub mod tree;
