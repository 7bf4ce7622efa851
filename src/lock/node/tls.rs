//! TLS for `rediss://` nodes, through rustls (no OpenSSL): the client
//! configuration (`--tls-ca` or the system's roots, `--tls-cert` and
//! `--tls-key`, `--tls-insecure`), made once per run and shared by every
//! connection. rustls does no I/O of its own, so a TLS connection is driven
//! by the same poll loop as a plain one (see `link`).

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::Options;

/// How the run's `rediss://` nodes are checked, and the configuration built
/// from it on first use (loading the system's roots costs milliseconds: a
/// run over plain nodes never pays it).
pub(super) struct Tls {
    ca: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
    insecure: bool,
    config: OnceLock<Result<Arc<ClientConfig>, Unusable>>,
    insecure_config: OnceLock<Result<Arc<ClientConfig>, Unusable>>,
}

impl Tls {
    pub(super) fn new(opts: &Options) -> Tls {
        Tls {
            ca: opts.tls_ca.clone(),
            client: opts.tls_client.clone(),
            insecure: opts.tls_insecure,
            config: OnceLock::new(),
            insecure_config: OnceLock::new(),
        }
    }

    /// The configuration for a connection; `insecure` from the URL
    /// (`#insecure`) or `--tls-insecure`.
    pub(super) fn config(&self, insecure: bool) -> Result<Arc<ClientConfig>, Unusable> {
        let insecure = insecure || self.insecure;
        let cell = if insecure {
            &self.insecure_config
        } else {
            &self.config
        };
        cell.get_or_init(|| self.build(insecure)).clone()
    }

    fn build(&self, insecure: bool) -> Result<Arc<ClientConfig>, Unusable> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| Unusable::new("TLS", e))?;
        let builder = if insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Unchecked(
                    provider.signature_verification_algorithms,
                )))
        } else {
            builder.with_root_certificates(self.roots()?)
        };
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| Unusable::new("--tls-cert", e))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| Unusable::new("--tls-key", e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| Unusable::new("--tls-cert/--tls-key", e))?
            }
        };
        Ok(Arc::new(config))
    }

    /// `--tls-ca`'s certificates, or the system's.
    fn roots(&self) -> Result<RootCertStore, Unusable> {
        let mut roots = RootCertStore::empty();
        match &self.ca {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert = cert.map_err(|e| Unusable::new("--tls-ca", e))?;
                    roots.add(cert).map_err(|e| Unusable::new("--tls-ca", e))?;
                }
            }
            None => {
                // Certificates the system has and rustls cannot use are
                // skipped, as a browser skips them.
                let found = rustls_native_certs::load_native_certs();
                roots.add_parsable_certificates(found.certs);
            }
        }
        Ok(roots)
    }
}

/// The name a server's certificate is checked against: the host as given
/// (a name or an address).
pub(super) fn server_name(host: &str) -> Result<ServerName<'static>, Unusable> {
    ServerName::try_from(host.trim_matches(['[', ']']).to_string()).map_err(|e| Unusable {
        what: "a host name",
        why: format!("'{host}' cannot be checked against a certificate: {e}"),
    })
}

/// Why a TLS configuration cannot be made: which part, and the error.
#[derive(Clone, Debug)]
pub(super) struct Unusable {
    what: &'static str,
    why: String,
}

impl Unusable {
    fn new(what: &'static str, e: impl std::fmt::Display) -> Unusable {
        Unusable {
            what,
            why: e.to_string(),
        }
    }
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.what, self.why)
    }
}

/// `--tls-insecure`: any certificate for any name. The handshake's
/// signatures are still checked, so the server holds the key of the
/// certificate it shows.
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
