//! Every subcommand finishes within one `--node-timeout` of its slowest
//! node, as a run does: a seed or sentinel whose TCP connect never
//! completes is waited for once, not once per question, and nodes are
//! asked side by side.

use std::time::Duration;

use crate::support::*;

const TIMEOUT: Duration = Duration::from_millis(700);

/// A port whose connects never complete: a listener with a backlog of one,
/// already full, whose SYNs the kernel drops. Closed on drop.
struct Stuck {
    port: u16,
    _sockets: Vec<socket2::Socket>,
}

impl Stuck {
    fn new() -> Stuck {
        use socket2::{Domain, Socket, Type};
        let listener = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        let any: std::net::SocketAddr = "127.0.0.1:0".parse().expect("address");
        listener.bind(&any.into()).expect("bind");
        listener.listen(0).expect("listen");
        let port = listener
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .expect("a port")
            .port();
        let to: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("address");
        let mut sockets = vec![listener];
        for _ in 0..4 {
            let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
            s.set_nonblocking(true).expect("non-blocking");
            let _ = s.connect(&to.into());
            sockets.push(s);
        }
        // The queue is full once a connect from here hangs.
        let probe = std::net::TcpStream::connect_timeout(&to, Duration::from_millis(300));
        assert!(probe.is_err(), "a connect to {port} completed");
        Stuck {
            port,
            _sockets: sockets,
        }
    }
}

#[test]
fn a_seed_or_sentinel_that_never_connects_costs_each_subcommand_one_timeout() {
    let stuck = Stuck::new();
    let healthy = Cluster::new(2);
    let p = stuck.port;
    let shapes = [
        format!("redis+cluster://127.0.0.1:{p}"),
        format!("redis+sentinel://127.0.0.1:{p}/mymaster"),
        format!("redis+cluster://127.0.0.1:{p},{}", healthy.urls()),
    ];
    let subcommands: [&[&str]; 7] = [
        &["status"],
        &["status", "--keys"],
        &["check"],
        &["unlock", "--force"],
        &["forget"],
        &["history"],
        &["config"],
    ];
    let mut slow = Vec::new();
    for urls in &shapes {
        for sub in subcommands {
            let out = Test::new()
                .args(sub.iter().copied())
                .args(["-k", "job", "-r", urls, "--node-timeout", "700ms"])
                .run();
            assert!(out.code.is_some(), "{out}");
            if out.elapsed > TIMEOUT * 3 / 2 {
                slow.push(format!("{sub:?} on {urls}: {:?}", out.elapsed));
            }
        }
    }
    assert!(
        slow.is_empty(),
        "over 1.5 x the node timeout:\n{}",
        slow.join("\n")
    );
}
