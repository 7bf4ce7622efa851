//! Integration tests for `redlock-run`.
//!
//! One test binary: every module below shares the fixtures in `support`
//! (real `redis-server` processes, a fault-injecting TCP proxy and a builder
//! around the compiled binary). Each test starts its own Redis nodes, so the
//! tests are independent and may run in parallel.

mod support;

mod bookkeeping;
mod check;
mod clocks;
mod completion;
mod config_file;
mod connect;
mod containers;
mod containment;
mod containment_edges;
mod cron;
mod degraded;
mod fairness;
mod fence;
mod foundation;
mod fresh_machine;
mod generated;
mod keys;
mod messages;
mod metrics_format;
mod node_io;
mod old_kernel;
mod one_name;
mod one_timeout;
mod operability;
mod operator;
mod option_files;
mod outcomes;
mod pings;
mod readme;
mod restarts;
mod safety;
mod shared;
mod terminal;
mod topologies;
mod topologies_tls;
mod topology_fixtures;
