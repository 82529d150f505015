//! The test CA and the server side of TLS, shared by the test binaries that speak
//! `https://` (the certificates are in `tests/fixtures/tls/`, made as its README says).
//! The servers are blocking ones on threads of their own, so this is plain rustls.

use std::net::TcpStream;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A server-side TLS stream over a blocking socket.
pub type TlsStream = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

/// The CA that signed the test server's certificate.
#[allow(dead_code)] // not every test binary trusts it directly
pub fn ca() -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(include_bytes!("../fixtures/tls/ca.pem")).unwrap()
}

/// The server's settings: the leaf certificate (IP 127.0.0.1 and DNS localhost).
pub fn server_config() -> Arc<rustls::ServerConfig> {
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
    Arc::new(config)
}

/// The server's end of a TLS connection, handshake done; `None` when the handshake
/// failed (the client refused the certificate, or hung up).
pub fn accept(config: &Arc<rustls::ServerConfig>, mut tcp: TcpStream) -> Option<TlsStream> {
    let mut session = rustls::ServerConnection::new(config.clone()).ok()?;
    while session.is_handshaking() {
        session.complete_io(&mut tcp).ok()?;
    }
    Some(rustls::StreamOwned::new(session, tcp))
}
