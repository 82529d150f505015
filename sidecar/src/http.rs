//! The sidecar's own HTTP/1.1 client: keep-alive connections, one request at a time on
//! each, every body read capped.
//!
//! Why not a general client: the sidecar makes the same four small exchanges (health,
//! keepalive, `/metrics`, heartbeat) forever, several times a second at short intervals.
//! Measured against the reference, a general client's per-request machinery (URL
//! re-parsing, header maps, a connection task per socket with channels between) was most
//! of the sidecar's user-space CPU. Here a request is one buffer and one `write`, the
//! answer is read on the caller's task straight into the caller's buffer, and an idle
//! connection waits in a short list until the next exchange to the same origin.
//!
//! What it speaks: HTTP/1.1 over TCP, or TLS for `https://` (rustls, set up on first
//! use; the CAs from the bundle `REQUESTS_CA_BUNDLE`, `CURL_CA_BUNDLE` or
//! `SSL_CERT_FILE` names, as the reference's `requests` reads them, else the webpki
//! roots). Bodies framed by `Content-Length`, `chunked`, or the end
//! of the connection; `1xx` answers skipped; no body after `HEAD`, `204` or `304`. A
//! connection is reused only when its answer was read to the end, nothing followed it,
//! and the server did not ask to close it. Before reuse an idle connection is polled
//! once: closed by the server, or holding bytes nobody asked for (they would pass for
//! the next answer), it is dropped. A request that fails on a reused connection before
//! any answer arrived is sent once more on a fresh one (the server may have closed it
//! while idle).
//!
//! Caps, so a broken or hostile peer costs bounded memory and reading: the body at the
//! caller's limit (a larger `Content-Length` fails before reading), the head at 64 KiB,
//! chunk extensions plus trailers at 64 KiB.
//!
//! Blocking I/O, on purpose: the periodic jobs run on a worker thread (see
//! `lifecycle`), and a blocking exchange wakes it once per answer and nothing else.
//! Measured on the sidecar's four exchanges per cycle, the same work through tokio's
//! event loop cost about 1.3 to 1.6 times the CPU, all of it user-space time spent per
//! wake-up. [`Client::start`] puts a request on the wire and leaves its answer to be read
//! later, so that one wake-up can serve several exchanges.
//!
//! Every exchange has one deadline covering name resolution, connect, TLS, send and the
//! whole body: each blocking step waits at most for the time left (give or take
//! 1/32 of the timeout, so the socket's timeout need not be set again before every
//! read), and a peer that trickles bytes cannot stretch it. An exchange that fails for
//! any reason drops its connection. Clones share their idle connections behind a lock held
//! only to take or return one.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use url::Url;

/// The blank line that ends a head; the searcher is built once, not per read.
static END_OF_HEAD: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\r\n\r\n"));

/// Status line plus headers may not exceed this.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Headers per answer.
const MAX_HEADERS: usize = 64;
/// A chunk-size or trailer line may not exceed this.
const MAX_LINE_BYTES: usize = 4 * 1024;
/// Chunk extensions and trailers (read and dropped) may not exceed this per answer.
const MAX_CHUNK_META_BYTES: usize = 64 * 1024;
/// Informational (1xx) answers skipped before giving up.
const MAX_INFORMATIONAL: usize = 8;
/// Idle connections kept per origin.
const MAX_IDLE_PER_ORIGIN: usize = 2;
/// Size of a connection's read buffer; larger bodies are read straight into the caller's.
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// Why an exchange failed.
#[derive(Debug)]
pub enum Error {
    /// No connection could be made (refused, unreachable, name not resolved, TLS failed).
    Connect(String),
    /// The connection failed while sending or reading.
    Io(io::Error),
    /// The connection closed before the answer was complete.
    Closed,
    /// The answer broke HTTP/1.1.
    Malformed(String),
    /// The body passed the caller's cap.
    TooLarge { limit: usize },
    /// The exchange did not finish within the caller's timeout.
    TimedOut(Duration),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Connect(e) => write!(f, "cannot connect: {e}"),
            Error::Io(e) => write!(f, "connection failed: {e}"),
            Error::Closed => write!(f, "connection closed before the answer was complete"),
            Error::Malformed(e) => write!(f, "malformed HTTP answer: {e}"),
            Error::TooLarge { limit } => write!(f, "body larger than {limit} bytes"),
            Error::TimedOut(t) => write!(f, "no complete answer within {t:?}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::UnexpectedEof => Error::Closed,
            // A socket timeout: the deadline passed (the exchange's timeout is filled in
            // by `Error::with_timeout`).
            kind if is_timeout_kind(kind) => Error::TimedOut(Duration::ZERO),
            _ => Error::Io(e),
        }
    }
}

/// Where requests go: scheme, host and port. Compared to pick idle connections.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    tls: bool,
    host: String,
    port: u16,
}

/// A URL prepared once for repeated requests: its origin, the `Host` header and the
/// request target (path and query).
#[derive(Debug, Clone)]
pub struct Target {
    origin: Arc<Origin>,
    host_header: String,
    path: String,
    url: Url,
}

impl Target {
    /// An `http://` or `https://` URL with a host.
    pub fn new(url: &Url) -> Result<Target, String> {
        let tls = match url.scheme() {
            "http" => false,
            "https" => true,
            other => return Err(format!("{url}: unsupported scheme {other:?}")),
        };
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.to_string(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            None => return Err(format!("{url}: no host")),
        };
        let port = url
            .port_or_known_default()
            .ok_or_else(|| format!("{url}: no port"))?;
        let host_header = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            (None, _) => return Err(format!("{url}: no host")),
        };
        let mut path = url.path().to_string();
        if let Some(query) = url.query() {
            path.push('?');
            path.push_str(query);
        }
        Ok(Target {
            origin: Arc::new(Origin { tls, host, port }),
            host_header,
            path,
            url: url.clone(),
        })
    }

    /// Parse and prepare a URL string.
    pub fn parse(url: &str) -> Result<Target, String> {
        let parsed = Url::parse(url).map_err(|e| format!("{url:?}: {e}"))?;
        Target::new(&parsed)
    }

    pub fn url(&self) -> &Url {
        &self.url
    }
}

/// What came back, apart from the body (which went into the caller's buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// The `Content-Type` header, empty when absent.
    pub content_type: String,
}

impl Head {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// An answer with its body.
#[derive(Debug, Clone)]
pub struct Response {
    pub head: Head,
    pub body: Vec<u8>,
}

/// One request: method, target, the body's content type, extra headers (`Host` and
/// `Content-Length` are added) and body.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub target: &'a Target,
    pub content_type: Option<&'a str>,
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
}

impl<'a> Request<'a> {
    pub fn get(target: &'a Target) -> Request<'a> {
        Request {
            method: "GET",
            target,
            content_type: None,
            headers: &[],
            body: &[],
        }
    }

    /// A POST of a JSON body.
    pub fn post_json(target: &'a Target, body: &'a [u8]) -> Request<'a> {
        Request {
            method: "POST",
            target,
            content_type: Some("application/json"),
            headers: &[],
            body,
        }
    }

    /// Extra headers, after the content type.
    pub fn headers(self, headers: &'a [(&'a str, &'a str)]) -> Request<'a> {
        Request { headers, ..self }
    }
}

/// The client: idle connections by origin, and the TLS settings once one is needed.
/// Cheap to clone; clones share their connections.
#[derive(Clone, Default)]
pub struct Client {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    idle: Mutex<Vec<(Arc<Origin>, Conn)>>,
    tls: OnceLock<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let idle = self.inner.idle.lock().map(|v| v.len()).unwrap_or(0);
        f.debug_struct("Client").field("idle", &idle).finish()
    }
}

/// The client every part of the sidecar shares.
pub fn client() -> Client {
    Client::default()
}

impl Client {
    /// A client that trusts only `roots` for `https://` (tests, private CAs).
    pub fn with_root_certificates(
        roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    ) -> Result<Client, String> {
        let mut store = rustls::RootCertStore::empty();
        for cert in roots {
            store
                .add(cert)
                .map_err(|e| format!("bad root certificate: {e}"))?;
        }
        let client = Client::default();
        let _ = client.inner.tls.set(tls_config(store)?);
        Ok(client)
    }

    /// Send `request`; the body (at most `limit` bytes) replaces the contents of `body`.
    /// Blocks for at most `timeout`.
    pub fn send_into(
        &self,
        request: Request<'_>,
        limit: usize,
        timeout: Duration,
        body: &mut Vec<u8>,
    ) -> Result<Head, Error> {
        self.start(request, limit, timeout)?.finish_into(body)
    }

    /// Send `request` and return the answer with its body (at most `limit` bytes).
    /// Blocks for at most `timeout`.
    pub fn send(
        &self,
        request: Request<'_>,
        limit: usize,
        timeout: Duration,
    ) -> Result<Response, Error> {
        let mut body = Vec::new();
        let head = self.send_into(request, limit, timeout, &mut body)?;
        Ok(Response { head, body })
    }

    /// Send `request` now and read its answer later ([`Pending::finish_into`]), so that
    /// several requests can be on the wire at once. `timeout` covers both halves.
    pub fn start(
        &self,
        request: Request<'_>,
        limit: usize,
        timeout: Duration,
    ) -> Result<Pending, Error> {
        let deadline = Deadline::after(timeout);
        let origin = request.target.origin.clone();
        let wire = encode(&request);
        // An answer to HEAD announces a body it never sends.
        let expect = if request.method.eq_ignore_ascii_case("HEAD") {
            Expect::NoBody
        } else {
            Expect::Body { limit }
        };
        let sent = match self.take_idle(&origin) {
            Some(mut conn) => match conn.send(&wire, deadline) {
                Ok(()) => Some(conn),
                // The server closed the idle connection: a fresh one below.
                Err(e) if is_early_close(&e) => None,
                Err(e) => return Err(e.with_timeout(timeout)),
            },
            None => None,
        };
        let conn = match sent {
            Some(conn) => conn,
            None => self
                .send_fresh(&origin, &wire, deadline)
                .map_err(|e| e.with_timeout(timeout))?,
        };
        Ok(Pending {
            client: self.clone(),
            origin,
            wire,
            expect,
            deadline,
            timeout,
            conn,
        })
    }

    fn send_fresh(&self, origin: &Origin, wire: &[u8], deadline: Deadline) -> Result<Conn, Error> {
        let mut conn = self.connect(origin, deadline)?;
        conn.send(wire, deadline)?;
        Ok(conn)
    }

    /// An idle connection to `origin` that is still open and silent; the others found on
    /// the way are dropped. Never waits.
    fn take_idle(&self, origin: &Arc<Origin>) -> Option<Conn> {
        let mut idle = self.inner.idle.lock().ok()?;
        while let Some(at) = idle.iter().rposition(|(o, _)| o == origin) {
            let (_, mut conn) = idle.swap_remove(at);
            if conn.is_quiet() {
                conn.reused = true;
                conn.answered = false;
                return Some(conn);
            }
        }
        None
    }

    fn put_idle(&self, origin: &Arc<Origin>, conn: Conn) {
        if let Ok(mut idle) = self.inner.idle.lock() {
            if idle.iter().filter(|(o, _)| o == origin).count() < MAX_IDLE_PER_ORIGIN {
                idle.push((origin.clone(), conn));
            }
        }
    }

    fn connect(&self, origin: &Origin, deadline: Deadline) -> Result<Conn, Error> {
        let tcp = connect_tcp(&origin.host, origin.port, deadline)?;
        let _ = tcp.set_nodelay(true);
        let stream = if origin.tls {
            let config = match self.inner.tls.get() {
                Some(config) => config.clone(),
                None => {
                    let config = default_roots()
                        .and_then(tls_config)
                        .map_err(Error::Connect)?;
                    let _ = self.inner.tls.set(config.clone());
                    config
                }
            };
            let name = rustls::pki_types::ServerName::try_from(origin.host.clone())
                .map_err(|e| Error::Connect(format!("{}: {e}", origin.host)))?;
            let handshake_failed =
                |e: String| Error::Connect(format!("TLS handshake with {}: {e}", origin.host));
            let mut session = rustls::ClientConnection::new(config, name)
                .map_err(|e| handshake_failed(e.to_string()))?;
            let mut tcp = tcp;
            while session.is_handshaking() {
                deadline
                    .arm(&tcp)
                    .map_err(|e| handshake_failed(e.to_string()))?;
                session
                    .complete_io(&mut tcp)
                    .map_err(|e| match Error::from(e) {
                        Error::TimedOut(t) => Error::TimedOut(t),
                        e => handshake_failed(e.to_string()),
                    })?;
            }
            Stream::Tls(Box::new(rustls::StreamOwned::new(session, tcp)))
        } else {
            Stream::Plain(tcp)
        };
        Ok(Conn {
            stream,
            buf: vec![0; READ_BUFFER_BYTES],
            start: 0,
            end: 0,
            reused: false,
            answered: false,
            deadline,
            read_timeout: Armed::default(),
            write_timeout: Armed::default(),
        })
    }
}

/// A request on the wire, its answer not read yet: from [`Client::start`].
pub struct Pending {
    client: Client,
    origin: Arc<Origin>,
    wire: Vec<u8>,
    expect: Expect,
    deadline: Deadline,
    timeout: Duration,
    conn: Conn,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("host", &self.origin.host)
            .field("port", &self.origin.port)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Pending {
    /// Read the answer; its body (at most the limit given to `start`) replaces the
    /// contents of `body`. Blocks at most until the exchange's deadline.
    pub fn finish_into(self, body: &mut Vec<u8>) -> Result<Head, Error> {
        let timeout = self.timeout;
        self.finish_by(body).map_err(|e| e.with_timeout(timeout))
    }

    /// Read the answer with its body.
    pub fn finish(self) -> Result<Response, Error> {
        let mut body = Vec::new();
        let head = self.finish_into(&mut body)?;
        Ok(Response { head, body })
    }

    fn finish_by(mut self, body: &mut Vec<u8>) -> Result<Head, Error> {
        match self.conn.read_answer(self.expect, body) {
            Ok((head, reusable)) => {
                if reusable {
                    self.client.put_idle(&self.origin, self.conn);
                }
                Ok(head)
            }
            // A reused connection the server had closed while idle: once more, fresh.
            Err(e) if self.conn.reused && !self.conn.answered && is_early_close(&e) => {
                let mut conn = self
                    .client
                    .send_fresh(&self.origin, &self.wire, self.deadline)?;
                let (head, reusable) = conn.read_answer(self.expect, body)?;
                if reusable {
                    self.client.put_idle(&self.origin, conn);
                }
                Ok(head)
            }
            Err(e) => Err(e),
        }
    }
}

impl Error {
    /// A socket timeout carries no duration: fill in the exchange's.
    fn with_timeout(self, timeout: Duration) -> Error {
        match self {
            Error::TimedOut(_) => Error::TimedOut(timeout),
            e => e,
        }
    }
}

/// What the answer may carry.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A body of at most `limit` bytes, framed as the head says.
    Body { limit: usize },
    /// No body whatever the head says (the answer to HEAD).
    NoBody,
}

fn is_early_close(e: &Error) -> bool {
    match e {
        Error::Closed => true,
        Error::Io(e) => matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset
                | io::ErrorKind::ConnectionAborted
                | io::ErrorKind::BrokenPipe
        ),
        _ => false,
    }
}

/// The environment variables naming a PEM bundle of trusted CAs, in the order they are
/// read: the two the reference's `requests` honours, in its order, then OpenSSL's.
pub const CA_BUNDLE_VARS: [&str; 3] = ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"];

/// A CA bundle file larger than this is refused.
const MAX_CA_BUNDLE_BYTES: u64 = 16 * 1024 * 1024;

/// The CAs an `https://` peer must chain to: the bundle a [`CA_BUNDLE_VARS`] variable
/// names (replacing the built-in roots, as with `requests`), else the webpki roots.
fn default_roots() -> Result<rustls::RootCertStore, String> {
    for var in CA_BUNDLE_VARS {
        if let Some(path) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            let path = std::path::PathBuf::from(path);
            return roots_from_pem_file(&path)
                .map_err(|e| format!("{var}={}: {e}", path.display()));
        }
    }
    let mut store = rustls::RootCertStore::empty();
    store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    Ok(store)
}

/// Every certificate in a PEM file, as trust anchors; a file with none is an error.
pub fn roots_from_pem_file(path: &std::path::Path) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::pem::PemObject;
    use std::io::Read;
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CA_BUNDLE_BYTES + 1).read_to_end(&mut pem))
        .map_err(|e| format!("cannot read: {e}"))?;
    if pem.len() as u64 > MAX_CA_BUNDLE_BYTES {
        return Err(format!("larger than {MAX_CA_BUNDLE_BYTES} bytes"));
    }
    let mut store = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("not a PEM certificate bundle: {e}"))?;
        store
            .add(cert)
            .map_err(|e| format!("bad CA certificate: {e}"))?;
    }
    if store.is_empty() {
        return Err("no certificates in it".into());
    }
    Ok(store)
}

fn tls_config(roots: rustls::RootCertStore) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The instant an exchange must be over by.
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    /// How far past `at` a socket timeout set earlier may reach before it is set again.
    slack: Duration,
}

impl Deadline {
    fn after(timeout: Duration) -> Deadline {
        Deadline {
            // A timeout too large to add is as good as none.
            at: Instant::now()
                .checked_add(timeout)
                .unwrap_or_else(far_future),
            slack: timeout / 32,
        }
    }

    /// The time left, or `TimedOut` when none is.
    fn left(&self) -> Result<Duration, Error> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            Err(Error::TimedOut(Duration::ZERO))
        } else {
            Ok(left)
        }
    }

    /// Bound the socket's next read and write by the time left.
    fn arm(&self, tcp: &TcpStream) -> Result<(), Error> {
        let left = self.left()?;
        tcp.set_read_timeout(Some(left))?;
        tcp.set_write_timeout(Some(left))?;
        Ok(())
    }
}

/// A socket timeout as last set, so it is set again only when it must be.
#[derive(Debug, Clone, Copy, Default)]
struct Armed {
    /// The timeout the socket has, if any was set.
    timeout: Option<Duration>,
}

impl Armed {
    /// The timeout to set before an operation starting now, or `None` when the one set
    /// already ends it by the deadline, give or take the deadline's slack.
    fn rearm(&self, deadline: Deadline) -> Result<Option<Duration>, Error> {
        let left = deadline.left()?;
        match self.timeout {
            // Not shorter than the time left either: a timeout left by an earlier,
            // shorter exchange would end this one early.
            Some(set) if set >= left && set <= left + deadline.slack => Ok(None),
            _ => Ok(Some(left)),
        }
    }

    /// Set the socket's timeout with `set` when [`Armed::rearm`] says it must be.
    fn ensure(
        &mut self,
        deadline: Deadline,
        set: impl FnOnce(Duration) -> io::Result<()>,
    ) -> Result<(), Error> {
        if let Some(t) = self.rearm(deadline)? {
            set(t)?;
            self.timeout = Some(t);
        }
        Ok(())
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

/// Connect to each resolved address in turn (no lookup for an IP literal).
fn connect_tcp(host: &str, port: u16, deadline: Deadline) -> Result<TcpStream, Error> {
    let addrs = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => resolve(host, port, deadline)?,
    };
    let mut last = format!("{host} resolved to no address");
    for addr in addrs {
        let left = deadline.left()?;
        match TcpStream::connect_timeout(&addr, left) {
            Ok(stream) => return Ok(stream),
            Err(e) if is_timeout_kind(e.kind()) => return Err(Error::TimedOut(Duration::ZERO)),
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    Err(Error::Connect(last))
}

/// Resolve a host name within the deadline. The system resolver cannot be interrupted,
/// so it runs on a thread of its own that is abandoned (and finishes by itself) when the
/// deadline passes first.
fn resolve(host: &str, port: u16, deadline: Deadline) -> Result<Vec<SocketAddr>, Error> {
    let (tx, rx) = std::sync::mpsc::channel();
    let name = host.to_string();
    std::thread::Builder::new()
        .name("resolve".into())
        .spawn(move || {
            let _ = tx.send((name.as_str(), port).to_socket_addrs().map(Vec::from_iter));
        })
        .map_err(|e| Error::Connect(format!("cannot resolve {host}: {e}")))?;
    match rx.recv_timeout(deadline.left()?) {
        Ok(Ok(addrs)) => Ok(addrs),
        Ok(Err(e)) => Err(Error::Connect(format!("cannot resolve {host}: {e}"))),
        Err(_) => Err(Error::TimedOut(Duration::ZERO)),
    }
}

/// How a socket timeout shows (`WouldBlock` on Unix, `TimedOut` on Windows and connect).
fn is_timeout_kind(kind: io::ErrorKind) -> bool {
    matches!(kind, io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// The request as it goes on the wire: head and body in one buffer, one write.
fn encode(request: &Request<'_>) -> Vec<u8> {
    let target = request.target;
    let mut out = Vec::with_capacity(128 + target.path.len() + request.body.len());
    out.extend_from_slice(request.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(target.host_header.as_bytes());
    out.extend_from_slice(b"\r\n");
    let content_type = request.content_type.map(|t| ("content-type", t));
    for (name, value) in content_type.iter().chain(request.headers) {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        // A header value never carries a line break onto the wire.
        out.extend(value.bytes().filter(|b| *b != b'\r' && *b != b'\n'));
        out.extend_from_slice(b"\r\n");
    }
    if !request.body.is_empty() || request.method != "GET" {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(request.body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(request.body);
    out
}

/// How the body of an answer ends.
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// One connection and the bytes read from it but not yet used (`buf[start..end]`).
struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Taken from the idle list (so it may have been closed by the server meanwhile).
    reused: bool,
    /// At least one byte of the current answer has arrived.
    answered: bool,
    /// The current exchange's deadline: every read and write waits at most until then.
    deadline: Deadline,
    read_timeout: Armed,
    write_timeout: Armed,
}

impl Conn {
    /// Whether an idle connection is still open and silent. One closed by the server, or
    /// holding bytes nobody asked for (which would pass for the next request's answer),
    /// must not carry another request. A peek that never waits.
    fn is_quiet(&mut self) -> bool {
        is_quiet(self.stream.tcp())
    }

    /// Write the whole request, by `deadline`; the answer must come by then too.
    fn send(&mut self, wire: &[u8], deadline: Deadline) -> Result<(), Error> {
        self.deadline = deadline;
        let tcp = self.stream.tcp();
        self.write_timeout
            .ensure(deadline, |t| tcp.set_write_timeout(Some(t)))?;
        self.stream.write_all(wire)?;
        self.stream.flush()?;
        Ok(())
    }

    /// One read into `into`, waiting at most until the deadline; 0 means the peer closed.
    fn read_some(&mut self, into: &mut [u8]) -> Result<usize, Error> {
        let tcp = self.stream.tcp();
        self.read_timeout
            .ensure(self.deadline, |t| tcp.set_read_timeout(Some(t)))?;
        loop {
            match self.stream.read(into) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                result => return Ok(result?),
            }
        }
    }

    /// Read one answer (skipping 1xx ones) into `body`; also says whether the connection
    /// can carry another request.
    fn read_answer(&mut self, expect: Expect, body: &mut Vec<u8>) -> Result<(Head, bool), Error> {
        body.clear();
        let limit = match expect {
            Expect::Body { limit } => limit,
            Expect::NoBody => 0,
        };
        for _ in 0..MAX_INFORMATIONAL {
            let head_len = self.read_head()?;
            let parsed = parse_head(&self.buf[self.start..self.start + head_len])?;
            self.start += head_len;
            if (100..200).contains(&parsed.head.status) {
                if parsed.head.status == 101 {
                    return Err(Error::Malformed(
                        "unexpected 101 Switching Protocols".into(),
                    ));
                }
                continue;
            }
            let no_body = matches!(expect, Expect::NoBody)
                || parsed.head.status == 204
                || parsed.head.status == 304;
            let framing = if no_body {
                Framing::Length(0)
            } else {
                parsed.framing
            };
            let mut reusable = parsed.keep_alive;
            match framing {
                Framing::Length(n) => {
                    if n > limit {
                        return Err(Error::TooLarge { limit });
                    }
                    self.read_exact_into(n, body)?;
                }
                Framing::Chunked => self.read_chunked(limit, body)?,
                Framing::UntilClose => {
                    self.read_to_close(limit, body)?;
                    reusable = false;
                }
            }
            // Bytes beyond the answer: the server is not speaking one-at-a-time HTTP.
            if self.start != self.end {
                reusable = false;
            }
            return Ok((parsed.head, reusable));
        }
        Err(Error::Malformed("too many informational answers".into()))
    }

    /// Read more bytes after `buf[..end]`, compacting or growing the buffer when full;
    /// 0 means the peer closed.
    fn fill(&mut self) -> Result<usize, Error> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let grown = (self.buf.len() * 2).min(MAX_HEAD_BYTES + READ_BUFFER_BYTES);
                if grown <= self.buf.len() {
                    return Err(Error::Malformed("line or head too long".into()));
                }
                self.buf.resize(grown, 0);
            }
        }
        let mut buf = std::mem::take(&mut self.buf);
        let n = self.read_some(&mut buf[self.end..]);
        self.buf = buf;
        let n = n?;
        if n > 0 {
            self.answered = true;
        }
        self.end += n;
        Ok(n)
    }

    /// Read until the buffered bytes hold a whole head; answers its length.
    fn read_head(&mut self) -> Result<usize, Error> {
        // Bytes after `start` already searched (an offset: `fill` may move them).
        let mut scanned: usize = 0;
        loop {
            let from = self.start + scanned.saturating_sub(3);
            if let Some(at) = END_OF_HEAD.find(&self.buf[from..self.end]) {
                let len = from + at + 4 - self.start;
                if len > MAX_HEAD_BYTES {
                    break;
                }
                return Ok(len);
            }
            if self.end - self.start > MAX_HEAD_BYTES {
                break;
            }
            scanned = self.end - self.start;
            if self.fill()? == 0 {
                return Err(Error::Closed);
            }
        }
        Err(Error::Malformed(format!(
            "head larger than {MAX_HEAD_BYTES} bytes"
        )))
    }

    /// Exactly `n` more body bytes into `body`: the buffered ones first, the rest read
    /// straight into `body`.
    fn read_exact_into(&mut self, n: usize, body: &mut Vec<u8>) -> Result<(), Error> {
        let buffered = n.min(self.end - self.start);
        body.extend_from_slice(&self.buf[self.start..self.start + buffered]);
        self.start += buffered;
        let mut missing = n - buffered;
        if missing == 0 {
            return Ok(());
        }
        // Straight into the body, never past this answer's end.
        let mut filled = body.len();
        body.resize(filled + missing, 0);
        while missing > 0 {
            let got = match self.read_some(&mut body[filled..filled + missing]) {
                Ok(0) => Err(Error::Closed),
                other => other,
            };
            // On failure, the zeroes standing in for the missing bytes go again.
            let got = got.inspect_err(|_| body.truncate(filled))?;
            self.answered = true;
            filled += got;
            missing -= got;
        }
        Ok(())
    }

    /// One line (without its CRLF) from the buffer, at most `MAX_LINE_BYTES`; answers its
    /// range in `buf`.
    fn read_line(&mut self) -> Result<std::ops::Range<usize>, Error> {
        let mut searched = self.start;
        loop {
            if let Some(at) = memchr::memchr(b'\n', &self.buf[searched..self.end]) {
                let line_end = searched + at;
                if line_end - self.start > MAX_LINE_BYTES {
                    return Err(Error::Malformed("chunk line too long".into()));
                }
                let range = self.start..line_end;
                self.start = line_end + 1;
                let end = if range.end > range.start && self.buf[range.end - 1] == b'\r' {
                    range.end - 1
                } else {
                    range.end
                };
                return Ok(range.start..end);
            }
            if self.end - self.start > MAX_LINE_BYTES {
                return Err(Error::Malformed("chunk line too long".into()));
            }
            let offset = self.end - self.start;
            if self.fill()? == 0 {
                return Err(Error::Closed);
            }
            searched = self.start + offset;
        }
    }

    fn read_chunked(&mut self, limit: usize, body: &mut Vec<u8>) -> Result<(), Error> {
        // Extension and trailer bytes so far: dropped, but they cost reading all the same.
        let mut meta = 0usize;
        let mut add_meta = |n: usize| {
            meta += n;
            if meta > MAX_CHUNK_META_BYTES {
                Err(Error::Malformed(format!(
                    "chunk extensions and trailers larger than {MAX_CHUNK_META_BYTES} bytes"
                )))
            } else {
                Ok(())
            }
        };
        loop {
            let line = self.read_line()?;
            let line = &self.buf[line];
            let size = parse_chunk_size(line)?;
            add_meta(memchr::memchr(b';', line).map_or(0, |at| line.len() - at))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let trailer = self.read_line()?;
                    if trailer.is_empty() {
                        return Ok(());
                    }
                    add_meta(trailer.len())?;
                }
            }
            if size > limit.saturating_sub(body.len()) {
                return Err(Error::TooLarge { limit });
            }
            self.read_exact_into(size, body)?;
            let end = self.read_line()?;
            if !end.is_empty() {
                return Err(Error::Malformed("chunk not followed by CRLF".into()));
            }
        }
    }

    fn read_to_close(&mut self, limit: usize, body: &mut Vec<u8>) -> Result<(), Error> {
        loop {
            let buffered = &self.buf[self.start..self.end];
            if body.len() + buffered.len() > limit {
                return Err(Error::TooLarge { limit });
            }
            body.extend_from_slice(buffered);
            self.start = self.end;
            if self.fill()? == 0 {
                return Ok(());
            }
        }
    }
}

/// A parsed head and what it says about the body and the connection.
struct ParsedHead {
    head: Head,
    framing: Framing,
    keep_alive: bool,
}

fn parse_head(bytes: &[u8]) -> Result<ParsedHead, Error> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(bytes) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(Error::Malformed("incomplete head".into())),
        Err(e) => return Err(Error::Malformed(e.to_string())),
    }
    let status = response.code.unwrap_or(0);
    let http11 = response.version == Some(1);
    let mut content_type = String::new();
    let mut length: Option<usize> = None;
    let mut chunked = false;
    let mut transfer_encoding = false;
    let mut close = !http11;
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value)
            .map_err(|_| Error::Malformed(format!("{} is not text", header.name)))?
            .trim();
        if header.name.eq_ignore_ascii_case("content-length") {
            // Digits only (`parse` would take a sign).
            let n: usize = Some(value)
                .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| Error::Malformed(format!("bad Content-Length {value:?}")))?;
            if length.is_some_and(|m| m != n) {
                return Err(Error::Malformed("conflicting Content-Length".into()));
            }
            length = Some(n);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = true;
            // `chunked` must be the last coding for the length to come from the chunks.
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if header.name.eq_ignore_ascii_case("content-type") {
            content_type = value.to_string();
        } else if header.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    close = true;
                } else if token.eq_ignore_ascii_case("keep-alive") && !http11 {
                    close = false;
                }
            }
        }
    }
    // RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and a message with both
    // may be an attempt at smuggling: read it, but do not trust the connection after.
    if transfer_encoding && length.is_some() {
        close = true;
    }
    let framing = if transfer_encoding {
        if chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::UntilClose
    };
    Ok(ParsedHead {
        head: Head {
            status,
            content_type,
        },
        framing,
        keep_alive: !close,
    })
}

/// The hex size at the start of a chunk line (extensions after `;` ignored).
fn parse_chunk_size(line: &[u8]) -> Result<usize, Error> {
    let digits = line.split(|b| *b == b';').next().unwrap_or(&[]);
    let digits = digits.trim_ascii();
    if digits.is_empty() || digits.len() > 15 {
        return Err(Error::Malformed("bad chunk size".into()));
    }
    let mut size = 0usize;
    for d in digits {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return Err(Error::Malformed("bad chunk size".into())),
        };
        size = size
            .checked_mul(16)
            .and_then(|s| s.checked_add(usize::from(v)))
            .ok_or_else(|| Error::Malformed("chunk size overflows".into()))?;
    }
    Ok(size)
}

/// An idle socket is quiet when reading would block: not closed, nothing unasked for.
/// One non-blocking peek (`MSG_PEEK | MSG_DONTWAIT`), leaving the socket blocking.
#[cfg(unix)]
fn is_quiet(tcp: &TcpStream) -> bool {
    use rustix::net::{recv, RecvFlags};
    let mut probe = [0u8; 1];
    matches!(
        recv(tcp, &mut probe[..], RecvFlags::PEEK | RecvFlags::DONTWAIT),
        Err(e) if e == rustix::io::Errno::AGAIN
    )
}

/// Elsewhere: the same peek with the socket made non-blocking around it.
#[cfg(not(unix))]
fn is_quiet(tcp: &TcpStream) -> bool {
    if tcp.set_nonblocking(true).is_err() {
        return false;
    }
    let quiet = matches!(tcp.peek(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
    tcp.set_nonblocking(false).is_ok() && quiet
}

/// A plain or TLS connection.
enum Stream {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Stream {
    /// The socket underneath, for its timeouts and the idle check.
    fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.get_ref(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// At most `max` characters of a peer's answer, for a log line.
pub fn snippet(body: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out: String = text.chars().take(max).collect();
    if text.chars().count() > max {
        out.push('…');
    }
    out.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes() {
        assert_eq!(parse_chunk_size(b"1a").unwrap(), 26);
        assert_eq!(parse_chunk_size(b"FF;ext=1").unwrap(), 255);
        assert_eq!(parse_chunk_size(b"0").unwrap(), 0);
        assert!(parse_chunk_size(b"").is_err());
        assert!(parse_chunk_size(b"xyz").is_err());
        assert!(parse_chunk_size(b"ffffffffffffffffff").is_err());
        assert!(parse_chunk_size(b"+1").is_err());
        assert!(parse_chunk_size(b"0x1").is_err());
        assert_eq!(parse_chunk_size(b"7fffffff").unwrap(), 0x7fff_ffff);
    }

    #[test]
    fn request_encoding() {
        let target = Target::parse("http://example.test:8080/v3/kv/put?x=1").unwrap();
        let wire = encode(&Request::post_json(&target, b"{}"));
        assert_eq!(
            String::from_utf8(wire).unwrap(),
            "POST /v3/kv/put?x=1 HTTP/1.1\r\nhost: example.test:8080\r\n\
             content-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
        );
        let target = Target::parse("http://[::1]/health").unwrap();
        let wire = encode(&Request::get(&target).headers(&[("x", "a\r\nb")]));
        assert_eq!(
            String::from_utf8(wire).unwrap(),
            "GET /health HTTP/1.1\r\nhost: [::1]\r\nx: ab\r\n\r\n"
        );
    }

    #[test]
    fn heads() {
        let p =
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\n")
                .unwrap();
        assert_eq!(p.head.status, 200);
        assert_eq!(p.head.content_type, "text/plain");
        assert!(matches!(p.framing, Framing::Length(5)));
        assert!(p.keep_alive);
        let p = parse_head(b"HTTP/1.0 200 OK\r\n\r\n").unwrap();
        assert!(!p.keep_alive);
        assert!(matches!(p.framing, Framing::UntilClose));
        let p = parse_head(
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        assert!(matches!(p.framing, Framing::Chunked));
        assert!(!p.keep_alive);
        assert!(
            parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
                .is_err()
        );
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n").is_err());
        let p = parse_head(
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .unwrap();
        assert!(matches!(p.framing, Framing::Chunked));
        assert!(!p.keep_alive);
        assert!(parse_head(b"NOT HTTP\r\n\r\n").is_err());
    }
}
