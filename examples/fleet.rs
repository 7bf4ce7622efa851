//! A fleet in one process: N hosts firing one cron job at the same instant,
//! each a thread doing what one `redlock-run -q -k KEY -r NODES -- job` does
//! against Redis, without N processes (bench section 10).
//!
//! ```text
//! fleet --redis redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
//!       --hosts 1000 --keys 50 --name fleet-run1
//! ```
//!
//! Each host gets its own `Lock`, built as `run.rs` builds it: its argument
//! list goes through the real command-line parser (so TTL, node timeout,
//! holder record and the rest are redlock-run's defaults), its nodes are
//! `Node::new` of the same URLs (a connection per node per host, opened on
//! the first request, as a fresh process would), and its one try is
//! `Lock::acquire` with the queue mode a try-once run uses. So the commands
//! on the wire are redlock-run's own. All hosts wait on a barrier, built
//! and idle, and the barrier lets them go together.
//!
//! Host `i` contends for key `i mod --keys` (hosts spread evenly over the
//! keys). The winner of a key holds it until every host of that key has
//! decided (so nobody can win it a second time after a quick release; a
//! real job outlasts the burst), then releases it, as the CLI does when its
//! command exits. Losers, and the winner after its release, call
//! `Lock::outcomes` as every run does before it exits, then drop the lock
//! (closing its connections).
//!
//! What differs from N processes: no fork/exec, guard or signal thread per
//! host, and one process-wide record of the slowest node answer (the
//! degraded-mode bookkeeping in `quorum`, which decides how long a release
//! waits for a slow node, never which requests are sent).
//!
//! Output: one JSON object on stdout, times in milliseconds.

use std::ffi::OsString;
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use clap::{FromArgMatches, Parser};
use redlock_run::cli::{self, Cli, Config, Wait};
use redlock_run::lock::node::{Nodes, Queue};
use redlock_run::lock::{Acquired, Lock, record};
use redlock_run::log::Log;

#[derive(Parser)]
#[command(about = "N simulated hosts fire one cron job at once against the same nodes")]
struct Args {
    /// The nodes, as redlock-run's --redis takes them (comma-separated URLs)
    #[arg(long)]
    redis: String,
    /// Simulated hosts (one thread each, plus redlock-run's worker thread per node)
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Distinct job keys; host i contends for key i mod KEYS
    #[arg(long, default_value_t = 1)]
    keys: usize,
    /// Key names are NAME-0 .. NAME-(KEYS-1)
    #[arg(long, default_value = "fleet")]
    name: String,
    /// Longest a winner waits for the rest of its key's hosts to decide before releasing
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    hold_cap: Duration,
    /// Extra redlock-run options for every host, e.g. "--ttl 10s" (split on spaces)
    #[arg(long, default_value = "")]
    options: String,
}

/// How one host's run went.
struct Outcome {
    key: usize,
    /// Barrier → this host's thread running again (scheduling on this box).
    started: Duration,
    /// Its own start → the acquire's verdict.
    decision: Duration,
    kind: Kind,
    /// Winners: the release round.
    release: Option<Duration>,
}

enum Kind {
    Won,
    Busy,
    Unavailable(String),
}

/// What all hosts share: the start signal, and per key how many decided.
struct Shared {
    go: Barrier,
    /// When the barrier let everyone go.
    t0: Mutex<Option<Instant>>,
    decided: Vec<Decided>,
    /// The longest a winner holds waiting for the others.
    cap: Duration,
}

/// Hosts of one key that have decided, for the winner to wait on.
struct Decided {
    count: Mutex<usize>,
    cv: Condvar,
    hosts: usize,
}

/// The configuration a host's `redlock-run -q -k KEY -r NODES OPTIONS -- job`
/// resolves to, through the CLI's own parser and checks.
fn config(key: &str, args: &Args) -> Result<Config, String> {
    let mut argv: Vec<OsString> = ["redlock-run", "-q", "-k", key, "-r", &args.redis]
        .iter()
        .map(OsString::from)
        .collect();
    argv.extend(args.options.split_whitespace().map(OsString::from));
    argv.extend(["--", "job"].iter().map(OsString::from));
    let matches = cli::command()
        .try_get_matches_from(&argv)
        .map_err(|e| e.to_string())?;
    let parsed = Cli::from_arg_matches(&matches).map_err(|e| e.to_string())?;
    parsed.into_config().map_err(|e| e.to_string())
}

/// The lock as `run::run_locked` builds it.
fn build(config: &Config) -> Result<Lock, String> {
    let nodes = Nodes::new(&config.urls, &config.options).map_err(|e| e.to_string())?;
    Lock::new(
        nodes,
        config.keys.clone(),
        config.ttl,
        config.node_timeout,
        record::holder(&config.program, config.record_command, config.ttl),
        config.taking(),
    )
    .map_err(|e| e.to_string())
}

/// The queue mode of the first (and, without --wait, only) attempt, as
/// `run::acquire` picks it.
fn queue_of(config: &Config) -> Result<Queue, String> {
    match config.wait {
        _ if config.wait_unfair => Ok(Queue::Ignore),
        Wait::Once => Ok(Queue::Check),
        _ => Err("the fleet makes one try per host: no --wait".into()),
    }
}

fn host(lock: Lock, queue: Queue, log: Log, key: usize, shared: &Shared) -> Outcome {
    shared.go.wait();
    let start = Instant::now();
    let decided = &shared.decided[key];
    let started = shared
        .t0
        .lock()
        .unwrap()
        .map_or(Duration::ZERO, |t| start.saturating_duration_since(t));
    let acquired = lock.acquire(&queue, &log);
    let decision = start.elapsed();
    {
        let mut n = decided.count.lock().unwrap();
        *n += 1;
        decided.cv.notify_all();
    }
    let mut release = None;
    let kind = match acquired {
        Acquired::Yes(_) => {
            let n = decided.count.lock().unwrap();
            let _ = decided
                .cv
                .wait_timeout_while(n, shared.cap, |n| *n < decided.hosts)
                .unwrap();
            let r = Instant::now();
            lock.release(&log);
            release = Some(r.elapsed());
            Kind::Won
        }
        Acquired::Busy(_) => Kind::Busy,
        Acquired::Unavailable(why) | Acquired::SameServer(why) => Kind::Unavailable(why),
        Acquired::FenceExhausted => Kind::Unavailable("the fence counter is at its maximum".into()),
    };
    // What every run does last (it reads only replies already in).
    let _ = lock.outcomes(&log);
    drop(lock);
    Outcome {
        key,
        started,
        decision,
        kind,
        release,
    }
}

/// Nearest-rank percentile of sorted milliseconds.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((p / 100.0 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[k - 1]
}

fn summary(mut ms: Vec<f64>) -> String {
    if ms.is_empty() {
        return r#"{"n": 0}"#.into();
    }
    ms.sort_by(f64::total_cmp);
    let mean = ms.iter().sum::<f64>() / ms.len() as f64;
    format!(
        r#"{{"n": {}, "min": {:.3}, "p50": {:.3}, "p90": {:.3}, "p99": {:.3}, "max": {:.3}, "mean": {:.3}}}"#,
        ms.len(),
        ms[0],
        pct(&ms, 50.0),
        pct(&ms, 90.0),
        pct(&ms, 99.0),
        ms[ms.len() - 1],
        mean
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let args = Args::parse();
    if args.hosts == 0 || args.keys == 0 || args.keys > args.hosts {
        eprintln!("fleet: need 1 <= --keys <= --hosts");
        std::process::exit(64);
    }
    let names: Vec<String> = (0..args.keys)
        .map(|k| format!("{}-{k}", args.name))
        .collect();
    let shared = Arc::new(Shared {
        go: Barrier::new(args.hosts + 1),
        t0: Mutex::new(None),
        decided: (0..args.keys)
            .map(|k| Decided {
                count: Mutex::new(0),
                cv: Condvar::new(),
                hosts: (0..args.hosts).filter(|i| i % args.keys == k).count(),
            })
            .collect(),
        cap: args.hold_cap,
    });
    let mut threads = Vec::with_capacity(args.hosts);
    let built = Instant::now();
    for i in 0..args.hosts {
        let key = i % args.keys;
        let config = match config(&names[key], &args) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("fleet: {e}");
                std::process::exit(64);
            }
        };
        let (lock, queue) = match (build(&config), queue_of(&config)) {
            (Ok(l), Ok(q)) => (l, q),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("fleet: {e}");
                std::process::exit(64);
            }
        };
        let log = Log::new(config.verbosity, config.log_format, &config.name);
        let shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name(format!("host {i}"))
            .spawn(move || host(lock, queue, log, key, &shared));
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                eprintln!("fleet: cannot start host thread {i}: {e} (raise ulimit -u?)");
                std::process::exit(70);
            }
        }
    }
    let setup = built.elapsed();
    let start = Instant::now();
    *shared.t0.lock().unwrap() = Some(start);
    shared.go.wait();
    let outcomes: Vec<Outcome> = threads
        .into_iter()
        .map(|t| t.join().expect("host thread"))
        .collect();
    let wall = start.elapsed();

    let mut winners = vec![0usize; args.keys];
    let (mut busy, mut unavailable, mut samples) = (0, 0, Vec::<String>::new());
    for o in &outcomes {
        match &o.kind {
            Kind::Won => winners[o.key] += 1,
            Kind::Busy => busy += 1,
            Kind::Unavailable(why) => {
                unavailable += 1;
                if samples.len() < 5 && !samples.contains(why) {
                    samples.push(why.clone());
                }
            }
        }
    }
    let decision = summary(outcomes.iter().map(|o| ms(o.decision)).collect());
    // On this one box the hosts' threads do not all run at once: the time
    // from the barrier to each verdict includes waiting for a CPU.
    let since_barrier = summary(
        outcomes
            .iter()
            .map(|o| ms(o.started + o.decision))
            .collect(),
    );
    let started = summary(outcomes.iter().map(|o| ms(o.started)).collect());
    let release = summary(outcomes.iter().filter_map(|o| o.release.map(ms)).collect());
    let one = winners.iter().filter(|&&w| w == 1).count();
    let hist = |w: usize| winners.iter().filter(|&&x| x == w).count();
    println!(
        "{{\"hosts\": {}, \"keys\": {}, \"nodes\": {}, \"setup_ms\": {:.1}, \"wall_ms\": {:.1}, \
         \"decision_ms\": {decision}, \"barrier_to_decision_ms\": {since_barrier}, \
         \"barrier_to_start_ms\": {started}, \"release_ms\": {release}, \
         \"winners\": {}, \"keys_with_one_winner\": {one}, \"keys_with_no_winner\": {}, \
         \"keys_with_several_winners\": {}, \"busy\": {busy}, \"unavailable\": {unavailable}, \
         \"unavailable_samples\": [{}]}}",
        args.hosts,
        args.keys,
        args.redis.split(',').count(),
        ms(setup),
        ms(wall),
        winners.iter().sum::<usize>(),
        hist(0),
        args.keys - one - hist(0),
        samples
            .iter()
            .map(|s| serde_json::Value::from(s.as_str()).to_string())
            .collect::<Vec<_>>()
            .join(", "),
    );
}
