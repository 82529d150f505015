//! The test CA and the server side of TLS, shared by the test binaries that speak
//! `https://` (the certificates are in `tests/fixtures/tls/`, made as its README says).

use std::sync::Arc;

use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The CA that signed the test server's certificate.
#[allow(dead_code)] // not every test binary trusts it directly
pub fn ca() -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(include_bytes!("../fixtures/tls/ca.pem")).unwrap()
}

/// A TLS acceptor with the leaf certificate (IP 127.0.0.1 and DNS localhost).
pub fn acceptor() -> tokio_rustls::TlsAcceptor {
    let chain = CertificateDer::pem_slice_iter(include_bytes!("../fixtures/tls/leaf.pem"))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(include_bytes!("../fixtures/tls/leaf.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}
