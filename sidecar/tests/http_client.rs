//! The sidecar's HTTP/1.1 client (`sidecar::http`) against hand-scripted raw TCP servers:
//! every body framing, every cap, every connection-reuse decision and the exchange's
//! deadline, each checked by what the caller sees AND by what the server saw (which
//! connection carried which request, how many connections were opened, which ones the
//! client closed).
//!
//! A server here is a `TcpListener` on loopback port 0 whose connections each run a small
//! blocking script on a thread of its own (read a request, write exact bytes), so the
//! client's blocking calls run on the test's thread and the tests are plain `#[test]`s.
//! Connection counts are exact, not "soon": `Server::connections` queues a sentinel
//! connection behind the client's and reads the count once the server accepted it (a
//! listener's accept queue is FIFO).
//!
//! Every exchange runs under a deadline (`GUARD` unless a test is about the deadline): a
//! client that waits for bytes that never come fails its test with `TimedOut`, it never
//! hangs it.

#[path = "support/tls.rs"]
mod tls;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use sidecar::http::{Client, Error, Head, Request, Response, Target};

// ---------------------------------------------------------------------------------------
// The scripted server.

/// A request as the server read it.
#[derive(Debug, Clone)]
struct Seen {
    /// Which connection carried it (0 = the first one accepted).
    conn: usize,
    /// Request line and headers, through the blank line.
    head: String,
    body: Vec<u8>,
}

impl Seen {
    fn path(&self) -> &str {
        self.head.split(' ').nth(1).unwrap_or("")
    }
}

#[derive(Default)]
struct State {
    /// Client connections accepted (sentinels not counted).
    accepts: AtomicUsize,
    /// Connections whose script is still running.
    live: AtomicUsize,
    /// Every request read, in order.
    seen: Mutex<Vec<Seen>>,
    /// Local addresses of sentinel connections not yet accepted, and how many were.
    sentinels: Mutex<Vec<SocketAddr>>,
    sentinels_accepted: AtomicUsize,
    /// Set when the `Server` is dropped: the accept loop ends.
    stopped: AtomicBool,
}

/// A server script's socket: plain or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tls::TlsStream>),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Plain(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Plain(s) => s.flush(),
            Stream::Tls(s) => s.flush(),
        }
    }
}

/// The server's end of one connection.
struct Peer {
    /// Accept index: 0 for the first connection.
    n: usize,
    stream: Stream,
    buf: Vec<u8>,
    state: Arc<State>,
}

impl Peer {
    /// The next request (head plus a `content-length` body); `None` once the client closed.
    fn request(&mut self) -> Option<Seen> {
        loop {
            if let Some(at) = find(&self.buf, b"\r\n\r\n") {
                let head = String::from_utf8(self.buf[..at + 4].to_vec()).unwrap();
                let len = header(&head, "content-length").map_or(0, |v| v.parse().unwrap());
                while self.buf.len() < at + 4 + len {
                    if self.read_more() == 0 {
                        return None;
                    }
                }
                let body = self.buf[at + 4..at + 4 + len].to_vec();
                self.buf.drain(..at + 4 + len);
                let seen = Seen {
                    conn: self.n,
                    head,
                    body,
                };
                self.state.seen.lock().unwrap().push(seen.clone());
                return Some(seen);
            }
            if self.read_more() == 0 {
                return None;
            }
        }
    }

    /// One read; 0 when the client closed (or the read failed or timed out).
    fn read_more(&mut self) -> usize {
        let mut chunk = [0u8; 4096];
        let n = self.stream.read(&mut chunk).unwrap_or(0);
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    /// Write `bytes`; false when the client is gone.
    fn send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).is_ok() && self.stream.flush().is_ok()
    }

    /// `bytes` as separate writes cut at `cuts`, pausing after each so the client reads
    /// every piece on its own and its parser meets each boundary.
    fn send_cut(&mut self, bytes: &[u8], cuts: &[usize]) {
        let mut from = 0;
        for &cut in cuts.iter().chain(std::iter::once(&bytes.len())) {
            let cut = cut.clamp(from, bytes.len());
            self.send(&bytes[from..cut]);
            from = cut;
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Say the body ends here: TLS `close_notify`, or a plain FIN.
    fn close_write(&mut self) {
        match &mut self.stream {
            Stream::Plain(s) => {
                let _ = s.shutdown(std::net::Shutdown::Write);
            }
            Stream::Tls(s) => {
                s.conn.send_close_notify();
                let _ = s.flush();
            }
        }
    }

    /// Wait until the client closes this connection (or a read fails).
    fn until_closed(&mut self) {
        while self.read_more() > 0 {}
    }

    /// Answer every request with `answer(request)` until the client closes.
    fn answer_each(&mut self, answer: impl Fn(&Seen) -> Vec<u8>) {
        while let Some(req) = self.request() {
            self.send(&answer(&req));
        }
    }
}

/// Counts a script as finished however it ends (a failed `unwrap` in it included).
struct LiveGuard(Arc<State>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A server-side read that waits longer than this gives up: no script thread outlives
/// its test by much, whatever the client does.
const SERVER_READ_TIMEOUT: Duration = Duration::from_secs(20);

struct Server {
    addr: SocketAddr,
    state: Arc<State>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

impl Server {
    /// A server on 127.0.0.1 running `script` on each connection.
    fn start(script: impl Fn(Peer) + Send + Sync + 'static) -> Server {
        Server::on(TcpListener::bind("127.0.0.1:0").unwrap(), None, script)
    }

    /// The same over TLS.
    fn start_tls(script: impl Fn(Peer) + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        Server::on(listener, Some(tls::server_config()), script)
    }

    fn on(
        listener: TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        script: impl Fn(Peer) + Send + Sync + 'static,
    ) -> Server {
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let script = Arc::new(script);
        let loop_state = state.clone();
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                if loop_state.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(tcp) = tcp else {
                    return;
                };
                let Ok(from) = tcp.peer_addr() else {
                    continue;
                };
                {
                    let mut sentinels = loop_state.sentinels.lock().unwrap();
                    if let Some(at) = sentinels.iter().position(|s| *s == from) {
                        sentinels.swap_remove(at);
                        loop_state.sentinels_accepted.fetch_add(1, Ordering::SeqCst);
                        continue;
                    }
                }
                let n = loop_state.accepts.fetch_add(1, Ordering::SeqCst);
                loop_state.live.fetch_add(1, Ordering::SeqCst);
                let guard = LiveGuard(loop_state.clone());
                let (state, script, tls) = (loop_state.clone(), script.clone(), tls.clone());
                std::thread::spawn(move || {
                    let _guard = guard;
                    // Each write its own segment, so cut answers arrive cut.
                    tcp.set_nodelay(true).unwrap();
                    tcp.set_read_timeout(Some(SERVER_READ_TIMEOUT)).unwrap();
                    let stream = match tls {
                        None => Stream::Plain(tcp),
                        Some(config) => match tls::accept(&config, tcp) {
                            Some(tls) => Stream::Tls(Box::new(tls)),
                            None => return,
                        },
                    };
                    script(Peer {
                        n,
                        stream,
                        buf: Vec::new(),
                        state,
                    });
                });
            }
        });
        Server { addr, state }
    }

    fn url(&self, path: &str) -> Target {
        Target::parse(&format!("http://{}{path}", self.addr)).unwrap()
    }

    /// Connections the client opened so far, exactly (see the module doc).
    fn connections(&self) -> usize {
        let before = self.state.sentinels_accepted.load(Ordering::SeqCst);
        let _sentinel = {
            // Held while connecting: the accept loop cannot look the sentinel up before
            // it is registered.
            let mut sentinels = self.state.sentinels.lock().unwrap();
            let sentinel = TcpStream::connect(self.addr).unwrap();
            sentinels.push(sentinel.local_addr().unwrap());
            sentinel
        };
        until("the sentinel connection to be accepted", || {
            self.state.sentinels_accepted.load(Ordering::SeqCst) > before
        });
        self.state.accepts.load(Ordering::SeqCst)
    }

    fn live(&self) -> usize {
        self.state.live.load(Ordering::SeqCst)
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// The connection each request arrived on, in order.
    fn conns(&self) -> Vec<usize> {
        self.seen().iter().map(|s| s.conn).collect()
    }
}

/// Poll `done` until it holds; fail after 5 s.
fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A header's value in a raw head (first match, name case-insensitive).
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A 200 answer with a `content-length` body.
fn ok(body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// A 200 answer whose body is the request's path (tells answers apart).
fn echo_path(req: &Seen) -> Vec<u8> {
    ok(req.path())
}

const LIMIT: usize = 64 * 1024;

/// The deadline of every exchange that must finish: far past any answer here, so a
/// client bug shows up as `TimedOut`, never as a hung test.
const GUARD: Duration = Duration::from_secs(5);

/// `request` with a body cap of `limit`, under the guard deadline.
fn send(client: &Client, request: Request<'_>, limit: usize) -> Result<Response, Error> {
    client.send(request, limit, GUARD)
}

fn get(client: &Client, target: &Target) -> Result<Response, Error> {
    send(client, Request::get(target), LIMIT)
}

fn text(response: &Response) -> &str {
    std::str::from_utf8(&response.body).unwrap()
}

// ---------------------------------------------------------------------------------------
// 1-5: framing and keep-alive.

#[test]
fn content_length_answer_then_the_same_connection_again() {
    let server = Server::start(|mut peer| peer.answer_each(echo_path));
    let client = sidecar::http::client();
    for path in ["/one", "/two", "/three"] {
        let r = get(&client, &server.url(path)).unwrap();
        assert_eq!(r.head.status, 200);
        assert_eq!(r.head.content_type, "text/plain");
        assert_eq!(text(&r), path);
    }
    assert_eq!(server.connections(), 1);
    assert_eq!(server.conns(), [0, 0, 0]);
}

#[test]
fn requests_started_together_are_answered_on_their_own_connections_then_reused() {
    let server = Server::start(|mut peer| peer.answer_each(echo_path));
    let client = sidecar::http::client();
    let (a, b) = (server.url("/a"), server.url("/b"));
    // Both on the wire before either answer is read; read in the other order.
    let first = client.start(Request::get(&a), LIMIT, GUARD).unwrap();
    let second = client.start(Request::get(&b), LIMIT, GUARD).unwrap();
    until("both requests seen", || server.seen().len() == 2);
    assert_eq!(text(&second.finish().unwrap()), "/b");
    assert_eq!(text(&first.finish().unwrap()), "/a");
    assert_eq!(server.connections(), 2);
    // Both connections went back to the pool.
    let again = [
        client.start(Request::get(&a), LIMIT, GUARD).unwrap(),
        client.start(Request::get(&b), LIMIT, GUARD).unwrap(),
    ];
    for pending in again {
        assert_eq!(pending.finish().unwrap().head.status, 200);
    }
    assert_eq!(server.connections(), 2);
}

#[test]
fn a_started_request_keeps_its_own_deadline() {
    // The server reads the request and never answers.
    let server = Server::start(|mut peer| {
        let _ = peer.request();
        peer.until_closed();
    });
    let client = sidecar::http::client();
    let target = server.url("/");
    let pending = client
        .start(Request::get(&target), LIMIT, Duration::from_millis(200))
        .unwrap();
    let e = pending.finish().unwrap_err();
    assert!(
        matches!(e, Error::TimedOut(t) if t == Duration::from_millis(200)),
        "{e:?}"
    );
}

#[test]
fn send_into_replaces_the_callers_buffer() {
    let server = Server::start(|mut peer| peer.answer_each(echo_path));
    let client = sidecar::http::client();
    let mut body = b"left over from before".to_vec();
    let head = client
        .send_into(Request::get(&server.url("/x")), LIMIT, GUARD, &mut body)
        .unwrap();
    assert_eq!(
        head,
        Head {
            status: 200,
            content_type: "text/plain".into()
        }
    );
    assert_eq!(body, b"/x");
}

/// The chunked answer used by the split test: extensions, both hex cases, trailers.
const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n\
Transfer-Encoding: chunked\r\n\r\n\
1a;foo=bar\r\nabcdefghijklmnopqrstuvwxyz\r\n\
A\r\n0123456789\r\n\
b;x=\"y\";z\r\nHELLO WORLD\r\n\
0\r\nx-checksum: 1234\r\nx-other: yes\r\n\r\n";

#[test]
fn chunked_answer_split_across_every_boundary_then_reuse() {
    let server = Server::start(|mut peer| {
        peer.request().unwrap();
        // Cut inside the head's blank line, the chunk-size lines, the chunk data, the CRLF
        // after the data, the last chunk and the trailers.
        let at = |needle: &str, offset: usize| find(CHUNKED, needle.as_bytes()).unwrap() + offset;
        let cuts = [
            5,
            at("\r\n\r\n", 1),
            at("\r\n\r\n", 2),
            at("\r\n\r\n", 3),
            at("1a;", 1),
            at("1a;", 4),
            at("=bar", 4),
            at("=bar", 5),
            at("abcdef", 3),
            at("xyz\r\n", 3),
            at("xyz\r\n", 4),
            at("\r\nA\r\n", 2),
            at("789", 3),
            at("789", 4),
            at("b;x", 1),
            at("WORLD", 5),
            at("WORLD", 6),
            at("0\r\nx-", 1),
            at("0\r\nx-", 2),
            at("checksum", 4),
            at("yes\r\n\r\n", 4),
            at("yes\r\n\r\n", 6),
        ];
        peer.send_cut(CHUNKED, &cuts);
        peer.answer_each(echo_path);
    });
    let client = sidecar::http::client();
    let r = get(&client, &server.url("/chunked")).unwrap();
    assert_eq!(r.head.status, 200);
    assert_eq!(r.head.content_type, "text/plain; charset=utf-8");
    assert_eq!(text(&r), "abcdefghijklmnopqrstuvwxyz0123456789HELLO WORLD");
    let r = get(&client, &server.url("/after")).unwrap();
    assert_eq!(text(&r), "/after");
    assert_eq!(server.connections(), 1);
    assert_eq!(server.conns(), [0, 0]);
}

#[test]
fn a_body_ended_by_close_is_whole_and_the_next_request_opens_a_connection() {
    let server = Server::start(|mut peer| {
        let req = peer.request().unwrap();
        peer.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n");
        peer.send_cut(format!("until close {}", req.path()).as_bytes(), &[3, 9]);
        // Dropping the stream closes it: that ends the body.
    });
    let client = sidecar::http::client();
    let r = get(&client, &server.url("/a")).unwrap();
    assert_eq!(text(&r), "until close /a");
    let r = get(&client, &server.url("/b")).unwrap();
    assert_eq!(text(&r), "until close /b");
    assert_eq!(server.connections(), 2);
    assert_eq!(server.conns(), [0, 1]);
}

/// Serves `first` to the first request of each connection and echoes later ones; says
/// whether the second request reused the connection.
fn reused_after(first: &'static [u8]) -> bool {
    let server = Server::start(move |mut peer| {
        peer.request().unwrap();
        peer.send(first);
        peer.answer_each(echo_path);
    });
    let client = sidecar::http::client();
    let r = get(&client, &server.url("/1")).unwrap();
    assert_eq!(text(&r), "first");
    let r = get(&client, &server.url("/2")).unwrap();
    let connections = server.connections();
    // A new connection answers `first` again.
    match connections {
        1 => assert_eq!(text(&r), "/2"),
        2 => assert_eq!(text(&r), "first"),
        n => panic!("{n} connections"),
    }
    connections == 1
}

#[test]
fn connection_close_and_http_1_0_are_honoured() {
    assert!(!reused_after(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nfirst"
    ));
    assert!(!reused_after(
        b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\nContent-Length: 5\r\n\r\nfirst"
    ));
    assert!(!reused_after(
        b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
    ));
    assert!(reused_after(
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nfirst"
    ));
    assert!(reused_after(
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
    ));
    // Both framings at once: the chunks win, and the connection is not trusted after.
    assert!(!reused_after(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\n"));
}

#[test]
fn answers_without_a_body_keep_the_connection() {
    let server = Server::start(|mut peer| {
        peer.answer_each(|req| match req.path() {
            "/204" => b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
            // A 304's Content-Length describes the representation; there is no body.
            "/304" => b"HTTP/1.1 304 Not Modified\r\ncontent-length: 10\r\n\r\n".to_vec(),
            "/head" => b"HTTP/1.1 200 OK\r\ncontent-length: 1234\r\n\r\n".to_vec(),
            _ => echo_path(req),
        });
    });
    let client = sidecar::http::client();
    for (path, status) in [("/204", 204), ("/304", 304), ("/204", 204)] {
        let r = get(&client, &server.url(path)).unwrap();
        assert_eq!(r.head.status, status);
        assert!(r.body.is_empty());
        assert_eq!(text(&get(&client, &server.url("/next")).unwrap()), "/next");
    }
    // HEAD: the length is announced, never sent.
    let target = server.url("/head");
    let head_request = Request {
        method: "HEAD",
        ..Request::get(&target)
    };
    let r = send(&client, head_request, LIMIT).unwrap();
    assert_eq!(r.head.status, 200);
    assert!(r.body.is_empty());
    assert_eq!(text(&get(&client, &server.url("/last")).unwrap()), "/last");
    assert_eq!(server.connections(), 1);
}

// ---------------------------------------------------------------------------------------
// 6: informational answers.

#[test]
fn informational_answers_are_skipped() {
    let server = Server::start(|mut peer| {
        peer.request().unwrap();
        peer.send_cut(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 4\r\n\r\ndone",
            &[10, 27, 60],
        );
        peer.answer_each(echo_path);
    });
    let client = sidecar::http::client();
    let r = get(&client, &server.url("/")).unwrap();
    assert_eq!((r.head.status, text(&r)), (201, "done"));
    assert_eq!(
        text(&get(&client, &server.url("/again")).unwrap()),
        "/again"
    );
    assert_eq!(server.connections(), 1);
}

#[test]
fn endless_or_switching_informational_answers_are_malformed() {
    for answer in [
        "HTTP/1.1 100 Continue\r\n\r\n".repeat(50),
        "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n".to_string(),
    ] {
        let server = Server::start(move |mut peer| {
            peer.request().unwrap();
            peer.send(answer.as_bytes());
            peer.until_closed();
        });
        let e = get(&sidecar::http::client(), &server.url("/")).unwrap_err();
        assert!(matches!(e, Error::Malformed(_)), "{e:?}");
    }
}

// ---------------------------------------------------------------------------------------
// 7: caps and malformed answers.

/// The error for one request answered with `answer` on a connection the server then keeps
/// open (so a client that waits for more runs into the guard deadline, and its
/// `TimedOut` fails the test's check of the error).
fn error_for(answer: Vec<u8>, limit: usize) -> Error {
    let server = Server::start(move |mut peer| {
        peer.request().unwrap();
        peer.send(&answer);
        peer.until_closed();
    });
    let client = sidecar::http::client();
    let e = send(&client, Request::get(&server.url("/")), limit).unwrap_err();
    // The failed connection is closed, not kept.
    until("the client to close the connection", || server.live() == 0);
    e
}

#[test]
fn a_content_length_past_the_cap_fails_before_the_body() {
    // The body never comes: only a client that does not read it can answer.
    let e = error_for(
        b"HTTP/1.1 200 OK\r\ncontent-length: 1000001\r\n\r\n".to_vec(),
        1_000_000,
    );
    assert!(matches!(e, Error::TooLarge { limit: 1_000_000 }), "{e:?}");
    // At the cap exactly is fine.
    let server = Server::start(|mut peer| peer.answer_each(|_| ok(&"x".repeat(100))));
    let r = send(
        &sidecar::http::client(),
        Request::get(&server.url("/")),
        100,
    )
    .unwrap();
    assert_eq!(r.body.len(), 100);
}

#[test]
fn a_chunked_body_past_the_cap_is_too_large() {
    let mut answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..5 {
        answer.extend_from_slice(b"19\r\n0123456789012345678901234\r\n");
    }
    // 125 bytes in 25-byte chunks, and more chunks that never come.
    let e = error_for(answer, 110);
    assert!(matches!(e, Error::TooLarge { limit: 110 }), "{e:?}");
}

#[test]
fn a_close_delimited_body_past_the_cap_is_too_large() {
    let mut answer = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    answer.extend_from_slice(&[b'x'; 5000]);
    let e = error_for(answer, 4096);
    assert!(matches!(e, Error::TooLarge { limit: 4096 }), "{e:?}");
}

#[test]
fn a_head_past_64_kib_is_malformed() {
    // Lines of 2000 bytes: few enough headers for the parser's header count.
    let pad = |lines: usize| {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..lines {
            head.extend_from_slice(b"x-pad: ");
            head.extend_from_slice(&[b'p'; 1991]);
            head.extend_from_slice(b"\r\n");
        }
        head
    };
    // A head that never ends.
    let e = error_for(pad(50), LIMIT);
    assert!(matches!(e, Error::Malformed(_)), "{e:?}");
    // A head that does end, a little past the limit (66 KB, within the read buffer).
    let mut long = pad(34);
    long.extend_from_slice(b"content-length: 2\r\n\r\nok");
    assert!(long.len() > 64 * 1024 + 1000 && long.len() < 70_000);
    let e = error_for(long, LIMIT);
    assert!(matches!(e, Error::Malformed(_)), "{e:?}");
    // Just under the limit is fine.
    let mut fits = pad(32);
    fits.extend_from_slice(b"content-length: 2\r\n\r\nok");
    let server = Server::start(move |mut peer| peer.answer_each(|_| fits.clone()));
    assert_eq!(
        text(&get(&sidecar::http::client(), &server.url("/")).unwrap()),
        "ok"
    );
}

#[test]
fn broken_framing_is_malformed() {
    for answer in [
        // Chunk-size lines that are not hex.
        &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0x5\r\nabcde\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-5\r\nabcde\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n\r\nabcde\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nfffffffffffffffffffff\r\n",
        // Chunk data not followed by CRLF.
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
        // Content-Length: conflicting, negative, signed, not a number, a list.
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\nabc",
        b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: +2\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\ncontent-length: 2a\r\n\r\nab",
        b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999999\r\n\r\nab",
        // Not HTTP at all.
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/2 200\r\n\r\n",
    ] {
        let e = error_for(answer.to_vec(), LIMIT);
        assert!(
            matches!(e, Error::Malformed(_)),
            "{:?}: {e:?}",
            String::from_utf8_lossy(answer)
        );
    }
}

#[test]
fn endless_chunk_lines_and_trailers_are_malformed() {
    let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
    // One chunk-size line with a 10 KiB extension.
    let mut long_line = chunked.to_vec();
    long_line.extend_from_slice(b"1;");
    long_line.extend_from_slice(&[b'e'; 10_000]);
    // Many small chunks, each with an extension: the extensions add up.
    let mut many_extensions = chunked.to_vec();
    for _ in 0..200 {
        many_extensions.extend_from_slice(b"1;");
        many_extensions.extend_from_slice(&[b'e'; 1000]);
        many_extensions.extend_from_slice(b"\r\nx\r\n");
    }
    // Trailer lines that never end.
    let mut trailers = chunked.to_vec();
    trailers.extend_from_slice(b"0\r\n");
    for i in 0..10_000 {
        trailers.extend_from_slice(format!("x-trailer-{i}: yes\r\n").as_bytes());
    }
    for answer in [long_line, many_extensions, trailers] {
        let e = error_for(answer, LIMIT);
        assert!(matches!(e, Error::Malformed(_)), "{e:?}");
    }
}

#[test]
fn transfer_codings_other_than_chunked_last_read_to_close() {
    let server = Server::start(|mut peer| {
        peer.request().unwrap();
        peer.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, identity\r\n\r\n5\r\nhello");
    });
    let r = get(&sidecar::http::client(), &server.url("/")).unwrap();
    assert_eq!(text(&r), "5\r\nhello");
}

// ---------------------------------------------------------------------------------------
// 8: truncated answers.

#[test]
fn a_truncated_body_is_closed_and_the_connection_is_not_reused() {
    for truncated in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly fifty bytes............................."[..],
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n10\r\nonly eight",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nfour\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\nx-trailer: cut",
        b"HTTP/1.1 200 OK\r\ncontent-len",
    ] {
        let server = Server::start(move |mut peer| {
            let req = peer.request().unwrap();
            if peer.n == 0 {
                peer.send(truncated);
            } else {
                peer.send(&echo_path(&req));
                peer.answer_each(echo_path);
            }
        });
        let client = sidecar::http::client();
        let e = get(&client, &server.url("/first")).unwrap_err();
        assert!(
            matches!(e, Error::Closed),
            "{:?}: {e:?}",
            String::from_utf8_lossy(truncated)
        );
        let r = get(&client, &server.url("/second")).unwrap();
        assert_eq!(text(&r), "/second");
        assert_eq!(server.connections(), 2);
    }
}

// ---------------------------------------------------------------------------------------
// 9: stale keep-alive connections.

#[test]
fn an_idle_connection_the_server_closed_is_replaced_transparently() {
    let server = Server::start(|mut peer| {
        // Each connection answers one request and closes while idle.
        let req = peer.request().unwrap();
        peer.send(&ok(&format!("{} on {}", req.path(), peer.n)));
    });
    let client = sidecar::http::client();
    let r = get(&client, &server.url("/get")).unwrap();
    assert_eq!(text(&r), "/get on 0");
    until("the server to close its end", || server.live() == 0);
    let r = get(&client, &server.url("/get")).unwrap();
    assert_eq!(text(&r), "/get on 1");
    until("the server to close its end", || server.live() == 0);
    let post = server.url("/post");
    let r = send(&client, Request::post_json(&post, b"{\"n\":1}"), LIMIT).unwrap();
    assert_eq!(text(&r), "/post on 2");
    assert_eq!(server.connections(), 3);
    // Each request reached the server exactly once.
    let seen = server.seen();
    assert_eq!(server.conns(), [0, 1, 2]);
    assert_eq!(seen[2].body, b"{\"n\":1}");
}

#[test]
fn a_reused_connection_closed_without_an_answer_is_retried_once_on_a_new_one() {
    let server = Server::start(|mut peer| {
        if peer.n == 0 {
            // Answer the first request, read the second, close without a word.
            let req = peer.request().unwrap();
            peer.send(&echo_path(&req));
            peer.request().unwrap();
        } else {
            peer.answer_each(echo_path);
        }
    });
    let client = sidecar::http::client();
    assert_eq!(text(&get(&client, &server.url("/1")).unwrap()), "/1");
    let post = server.url("/2");
    let r = send(&client, Request::post_json(&post, b"{}"), LIMIT).unwrap();
    assert_eq!(text(&r), "/2");
    assert_eq!(server.connections(), 2);
    // The second request went out twice: on the reused connection, then on a new one.
    assert_eq!(server.conns(), [0, 0, 1]);
}

#[test]
fn a_new_connection_closed_without_an_answer_is_an_error_not_a_retry_loop() {
    let server = Server::start(|mut peer| {
        if peer.n == 0 {
            let req = peer.request().unwrap();
            peer.send(&echo_path(&req));
        }
        // Read a request and close without answering.
        peer.request();
    });
    let client = sidecar::http::client();
    assert_eq!(text(&get(&client, &server.url("/1")).unwrap()), "/1");
    // Reused connection closes unanswered, then the new one does too: one retry only.
    let e = get(&client, &server.url("/2")).unwrap_err();
    assert!(matches!(e, Error::Closed), "{e:?}");
    assert_eq!(server.connections(), 2);
    // A fresh client on a fresh connection: no retry at all.
    let e = get(&sidecar::http::client(), &server.url("/3")).unwrap_err();
    assert!(matches!(e, Error::Closed), "{e:?}");
    assert_eq!(server.connections(), 3);
    assert_eq!(server.conns(), [0, 0, 1, 2]);
}

// ---------------------------------------------------------------------------------------
// 10: bytes beyond the answer.

#[test]
fn a_second_answer_to_one_request_poisons_the_connection() {
    let server = Server::start(|mut peer| {
        let req = peer.request().unwrap();
        if peer.n == 0 {
            // Two answers in one write: the client holds both after its first read.
            let mut both = echo_path(&req);
            both.extend_from_slice(&ok("stray"));
            peer.send(&both);
            peer.until_closed();
        } else {
            peer.send(&echo_path(&req));
            peer.answer_each(echo_path);
        }
    });
    let client = sidecar::http::client();
    assert_eq!(text(&get(&client, &server.url("/1")).unwrap()), "/1");
    assert_eq!(text(&get(&client, &server.url("/2")).unwrap()), "/2");
    assert_eq!(server.connections(), 2);
    until("the poisoned connection to be closed", || {
        server.live() == 1
    });
}

#[test]
fn an_answer_arriving_on_an_idle_connection_poisons_it() {
    let (go_tx, go_rx) = mpsc::channel::<mpsc::Sender<()>>();
    let go_rx = Mutex::new(Some(go_rx));
    let server = Server::start(move |mut peer| {
        let go_rx = go_rx.lock().unwrap().take();
        let req = peer.request().unwrap();
        peer.send(&echo_path(&req));
        if let Some(go) = go_rx {
            // Later, unasked, while the connection is idle: a second answer.
            let done = go.recv().unwrap();
            peer.send(&ok("stray"));
            done.send(()).unwrap();
            peer.until_closed();
        } else {
            peer.answer_each(echo_path);
        }
    });
    let client = sidecar::http::client();
    assert_eq!(text(&get(&client, &server.url("/1")).unwrap()), "/1");
    let (done_tx, done_rx) = mpsc::channel();
    go_tx.send(done_tx).unwrap();
    // Loopback delivers during the server's write: once it returned, the stray bytes wait
    // in the client's socket.
    done_rx.recv().unwrap();
    assert_eq!(text(&get(&client, &server.url("/2")).unwrap()), "/2");
    assert_eq!(server.connections(), 2);
    until("the poisoned connection to be closed", || {
        server.live() == 1
    });
}

// ---------------------------------------------------------------------------------------
// 11: the request on the wire.

#[test]
fn the_request_as_the_server_sees_it() {
    let server = Server::start(|mut peer| peer.answer_each(echo_path));
    let client = sidecar::http::client();
    let port = server.addr.port();
    let post = Target::parse(&format!(
        "http://127.0.0.1:{port}/v3/kv/put?a=1&b=two%20words"
    ))
    .unwrap();
    let headers = [
        ("authorization", "Bearer abc"),
        (
            "x-trace",
            "a\r\nInjected: yes\r\n\r\nGET /smuggled HTTP/1.1",
        ),
    ];
    let body = br#"{"key":"a2V5"}"#;
    let r = send(
        &client,
        Request::post_json(&post, body).headers(&headers),
        LIMIT,
    )
    .unwrap();
    assert_eq!(text(&r), "/v3/kv/put?a=1&b=two%20words");
    let get_target = Target::parse(&format!("http://127.0.0.1:{port}")).unwrap();
    let r = get(&client, &get_target).unwrap();
    assert_eq!(text(&r), "/");

    let seen = server.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[0].head,
        format!(
            "POST /v3/kv/put?a=1&b=two%20words HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\
             content-type: application/json\r\nauthorization: Bearer abc\r\n\
             x-trace: aInjected: yesGET /smuggled HTTP/1.1\r\ncontent-length: 14\r\n\r\n"
        )
    );
    assert_eq!(seen[0].body, body);
    assert_eq!(
        seen[1].head,
        format!("GET / HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\r\n")
    );
    // An empty POST still says its length.
    let r = send(&client, Request::post_json(&post, b""), LIMIT).unwrap();
    assert_eq!(r.head.status, 200);
    assert_eq!(header(&server.seen()[2].head, "content-length"), Some("0"));
}

#[test]
fn an_ipv6_literal_host() {
    let Ok(listener) = TcpListener::bind("[::1]:0") else {
        eprintln!("skipped: no IPv6 loopback here");
        return;
    };
    let server = Server::on(listener, None, |mut peer| peer.answer_each(echo_path));
    let port = server.addr.port();
    let target = Target::parse(&format!("http://[::1]:{port}/v6")).unwrap();
    let client = sidecar::http::client();
    assert_eq!(text(&get(&client, &target).unwrap()), "/v6");
    assert_eq!(text(&get(&client, &target).unwrap()), "/v6");
    assert_eq!(
        header(&server.seen()[0].head, "host"),
        Some(&*format!("[::1]:{port}"))
    );
    assert_eq!(server.connections(), 1);
}

#[test]
fn targets() {
    let t = Target::parse("http://127.0.0.1:2379/v3/kv/range").unwrap();
    assert_eq!(t.url().as_str(), "http://127.0.0.1:2379/v3/kv/range");
    assert!(Target::parse("ftp://127.0.0.1/x").is_err());
    assert!(Target::parse("unix:/run/x.sock").is_err());
    assert!(Target::parse("not a url").is_err());
    assert_eq!(
        sidecar::http::snippet(b"line one\r\nline two", 12),
        "line one  li…"
    );
    assert_eq!(sidecar::http::snippet(b"short", 12), "short");
}

// ---------------------------------------------------------------------------------------
// 12: connecting, and the exchange's deadline.

#[test]
fn a_refused_connection_is_a_connect_error() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    // By address, and by a name whose every address refuses.
    for url in [
        format!("http://{addr}/"),
        format!("http://localhost:{}/", addr.port()),
    ] {
        let target = Target::parse(&url).unwrap();
        let e = get(&sidecar::http::client(), &target).unwrap_err();
        assert!(matches!(e, Error::Connect(_)), "{url}: {e:?}");
    }
}

#[test]
fn a_host_name_is_resolved_and_its_connection_reused() {
    let server = Server::start(|mut peer| peer.answer_each(echo_path));
    let port = server.addr.port();
    let target = Target::parse(&format!("http://localhost:{port}/by-name")).unwrap();
    let client = sidecar::http::client();
    assert_eq!(text(&get(&client, &target).unwrap()), "/by-name");
    assert_eq!(text(&get(&client, &target).unwrap()), "/by-name");
    assert_eq!(
        header(&server.seen()[0].head, "host"),
        Some(&*format!("localhost:{port}"))
    );
    assert_eq!(server.connections(), 1);
}

#[test]
fn the_timeout_ends_a_silent_exchange_and_drops_its_connection() {
    let server = Server::start(|mut peer| {
        let req = peer.request().unwrap();
        if peer.n == 0 {
            // Never answer; see the client give the connection up.
            peer.until_closed();
        } else {
            peer.send(&echo_path(&req));
            peer.answer_each(echo_path);
        }
    });
    let client = sidecar::http::client();
    let timeout = Duration::from_millis(100);
    let started = Instant::now();
    let silent = client.send(Request::get(&server.url("/silent")), LIMIT, timeout);
    assert!(
        matches!(silent, Err(Error::TimedOut(t)) if t == timeout),
        "{silent:?}"
    );
    assert!(started.elapsed() >= timeout);
    until("the timed-out connection to be closed", || {
        server.live() == 0
    });
    // The next request is not sent on the dead connection.
    assert_eq!(text(&get(&client, &server.url("/next")).unwrap()), "/next");
    assert_eq!(server.connections(), 2);
    assert_eq!(server.conns(), [0, 1]);
}

#[test]
fn a_trickling_answer_cannot_stretch_the_deadline() {
    // One byte every 30 ms: every read gets something, only the whole exchange is late.
    // In the body, and in a head that never ends.
    for start in [
        "HTTP/1.1 200 OK\r\ncontent-length: 10000\r\n\r\n",
        "HTTP/1.1 200 OK\r\nx-slow: ",
    ] {
        let server = Server::start(move |mut peer| {
            peer.request().unwrap();
            peer.send(start.as_bytes());
            // Until the client hangs up; 10 s at most whatever it does.
            let end = Instant::now() + Duration::from_secs(10);
            while Instant::now() < end && peer.send(b"x") {
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        let client = sidecar::http::client();
        let timeout = Duration::from_millis(300);
        let started = Instant::now();
        let r = client.send(Request::get(&server.url("/slow")), LIMIT, timeout);
        assert!(
            matches!(r, Err(Error::TimedOut(t)) if t == timeout),
            "{start:?}: {r:?}"
        );
        // Not a speed check: a client that re-armed a full timeout per read would hang
        // on here until the server's 10 s are up.
        assert!(started.elapsed() < Duration::from_secs(5), "{start:?}");
        until("the timed-out connection to be closed", || {
            server.live() == 0
        });
    }
}

#[test]
fn a_reused_connection_gets_the_whole_deadline_of_each_exchange() {
    // A short deadline first, then a long one on the same connection, answered later
    // than the short one would have allowed.
    let server = Server::start(|mut peer| {
        while let Some(req) = peer.request() {
            if req.path() == "/late" {
                std::thread::sleep(Duration::from_millis(400));
            }
            peer.send(&echo_path(&req));
        }
    });
    let client = sidecar::http::client();
    let short = Duration::from_millis(200);
    let r = client.send(Request::get(&server.url("/soon")), LIMIT, short);
    assert_eq!(text(&r.unwrap()), "/soon");
    assert_eq!(text(&get(&client, &server.url("/late")).unwrap()), "/late");
    assert_eq!(server.connections(), 1);
    assert_eq!(server.conns(), [0, 0]);
}

#[test]
fn send_into_keeps_the_deadline_too() {
    let server = Server::start(|mut peer| {
        peer.request().unwrap();
        peer.until_closed();
    });
    let timeout = Duration::from_millis(100);
    let mut body = Vec::new();
    let r = sidecar::http::client().send_into(
        Request::get(&server.url("/")),
        LIMIT,
        timeout,
        &mut body,
    );
    assert!(
        matches!(r, Err(Error::TimedOut(t)) if t == timeout),
        "{r:?}"
    );
}

// ---------------------------------------------------------------------------------------
// 13: concurrency.

/// Answers every request once `gate` requests in all have arrived: that many callers are
/// then in flight at once, each on a connection of its own.
fn gated_server(gate: Arc<AtomicUsize>) -> Server {
    Server::start(move |mut peer| {
        while let Some(req) = peer.request() {
            let state = peer.state.clone();
            until("all concurrent requests to arrive", || {
                state.seen.lock().unwrap().len() >= gate.load(Ordering::SeqCst)
            });
            peer.send(&echo_path(&req));
        }
    })
}

#[test]
fn concurrent_clones_share_at_most_two_idle_connections() {
    let gate = Arc::new(AtomicUsize::new(8));
    let server = gated_server(gate.clone());
    let client = sidecar::http::client();
    let targets: Vec<Target> = (0..8).map(|i| server.url(&format!("/c{i}"))).collect();
    // `n` callers at once, each on a clone of the client, with the first `n` targets.
    let at_once = |n: usize| -> Vec<String> {
        std::thread::scope(|scope| {
            let callers: Vec<_> = targets[..n]
                .iter()
                .map(|target| {
                    let client = client.clone();
                    scope.spawn(move || String::from_utf8(get(&client, target).unwrap().body))
                })
                .collect();
            callers
                .into_iter()
                .map(|c| c.join().unwrap().unwrap())
                .collect()
        })
    };
    assert_eq!(
        at_once(8),
        ["/c0", "/c1", "/c2", "/c3", "/c4", "/c5", "/c6", "/c7"]
    );
    assert_eq!(server.connections(), 8);
    // Six connections are closed, two kept idle.
    until("the client to close all but 2 connections", || {
        server.live() == 2
    });
    // Three at once now: two take the idle connections, one needs a new one.
    gate.store(8 + 3, Ordering::SeqCst);
    assert_eq!(at_once(3), ["/c0", "/c1", "/c2"]);
    assert_eq!(server.connections(), 9);
}

#[test]
fn concurrent_clones_on_threads_all_get_their_own_answer() {
    let server = Server::start(|mut peer| peer.answer_each(echo_path));
    let client = sidecar::http::client();
    std::thread::scope(|scope| {
        for i in 0..8 {
            let client = client.clone();
            let target = server.url(&format!("/t{i}"));
            scope.spawn(move || {
                for round in 0..20 {
                    let r = get(&client, &target).unwrap();
                    assert_eq!(r.body, format!("/t{i}").as_bytes(), "round {round}");
                }
            });
        }
    });
    let opened = server.connections();
    assert!(
        (1..=8).contains(&opened),
        "{opened} connections for 8 callers"
    );
    until("at most 2 idle connections", || server.live() <= 2);
}

// ---------------------------------------------------------------------------------------
// 14: TLS.

use tls::ca;

#[test]
fn https_round_trips_and_reuses_the_connection() {
    let server = Server::start_tls(|mut peer| {
        peer.answer_each(|req| match req.path() {
            "/chunked" => CHUNKED.to_vec(),
            _ => echo_path(req),
        })
    });
    let client = Client::with_root_certificates(vec![ca()]).unwrap();
    let port = server.addr.port();
    for host in ["127.0.0.1", "localhost"] {
        let target = Target::parse(&format!("https://{host}:{port}/hello?x=1")).unwrap();
        let r = get(&client, &target).unwrap();
        assert_eq!((r.head.status, text(&r)), (200, "/hello?x=1"));
        let target = Target::parse(&format!("https://{host}:{port}/chunked")).unwrap();
        let r = get(&client, &target).unwrap();
        assert_eq!(text(&r), "abcdefghijklmnopqrstuvwxyz0123456789HELLO WORLD");
    }
    // One connection per origin (127.0.0.1 and localhost are two).
    assert_eq!(server.connections(), 2);
    assert_eq!(server.conns(), [0, 0, 1, 1]);
    assert_eq!(
        header(&server.seen()[2].head, "host"),
        Some(&*format!("localhost:{port}"))
    );
}

#[test]
fn https_body_ended_by_close_notify() {
    let server = Server::start_tls(|mut peer| {
        peer.request().unwrap();
        peer.send(b"HTTP/1.1 200 OK\r\n\r\nuntil close_notify");
        peer.close_write();
    });
    let client = Client::with_root_certificates(vec![ca()]).unwrap();
    let target = Target::parse(&format!("https://127.0.0.1:{}/", server.addr.port())).unwrap();
    assert_eq!(text(&get(&client, &target).unwrap()), "until close_notify");
}

#[test]
fn an_untrusted_certificate_is_a_connect_error() {
    let server = Server::start_tls(|mut peer| peer.answer_each(echo_path));
    let target = Target::parse(&format!("https://127.0.0.1:{}/", server.addr.port())).unwrap();
    // The public roots do not include the test CA.
    let e = get(&sidecar::http::client(), &target).unwrap_err();
    match e {
        Error::Connect(message) => assert!(message.contains("TLS"), "{message}"),
        e => panic!("{e:?}"),
    }
    assert!(server.seen().is_empty());
}

// ---------------------------------------------------------------------------------------
// Property: any body, any encoding, any split of the server's bytes.

/// `body` as a chunked answer: chunks of the given sizes (cycled), hex case and an
/// extension chosen per chunk.
fn chunked(body: &[u8], sizes: &[usize], upper: bool, extension: bool) -> Vec<u8> {
    let mut out = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    let mut rest = body;
    let mut sizes = sizes.iter().cycle();
    while !rest.is_empty() {
        let n = (*sizes.next().unwrap()).min(rest.len());
        let size = if upper {
            format!("{n:X}")
        } else {
            format!("{n:x}")
        };
        out.extend_from_slice(size.as_bytes());
        if extension {
            out.extend_from_slice(b";name=\"v\"");
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    out.extend_from_slice(b"0\r\n");
    if extension {
        out.extend_from_slice(b"x-trailer: 1\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn with_length(body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_body_split_anywhere_comes_back_exactly(
        body in proptest::collection::vec(any::<u8>(), 0..40_000),
        use_chunks in any::<bool>(),
        sizes in proptest::collection::vec(1usize..5000, 1..8),
        upper in any::<bool>(),
        extension in any::<bool>(),
        splits in proptest::collection::vec(any::<proptest::sample::Index>(), 0..16),
    ) {
        let answer = if use_chunks {
            chunked(&body, &sizes, upper, extension)
        } else {
            with_length(&body)
        };
        let mut cuts: Vec<usize> = splits.iter().map(|i| i.index(answer.len() + 1)).collect();
        cuts.sort_unstable();
        let server = Server::start(move |mut peer| {
            peer.request().unwrap();
            peer.send_cut(&answer, &cuts);
            peer.answer_each(echo_path);
        });
        let client = sidecar::http::client();
        let r = get(&client, &server.url("/body")).unwrap();
        assert_eq!(r.head.status, 200);
        assert!(r.body == body, "{} bytes back, {} sent", r.body.len(), body.len());
        // The framing ended exactly at the answer's end: the connection carries on.
        assert_eq!(text(&get(&client, &server.url("/next")).unwrap()), "/next");
        assert_eq!(server.connections(), 1);
    }
}
