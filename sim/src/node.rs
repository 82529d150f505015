//! Who is in the simulated cluster and what they say to each other.
//!
//! Requests and answers are values, not HTTP: the real-time mode tests the HTTP layer.
//! Where a sidecar value meets a fake's, it travels in its wire encoding (the etcd
//! value and the heartbeat body are the JSON strings the sidecar would send; the
//! `/metrics` page is the text the fake writes), so a field the two sides name
//! differently fails here too.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// A node of the cluster. Ordered, so that tables keyed by it walk the same way on every
/// run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum NodeId {
    Sidecar(u32),
    Vllm(u32),
    /// The fake etcd; a sidecar's first etcd endpoint reaches it here.
    Etcd,
    Master,
    /// The same fake etcd reached through a sidecar's etcd endpoint `k` ≥ 1: a link of
    /// its own (its own faults), the same server.
    EtcdEndpoint(u32),
    /// Master replica `k` ≥ 1 of a world of several (replica 0 is [`NodeId::Master`]):
    /// a server of its own, with its own links.
    MasterReplica(u32),
}

impl NodeId {
    /// The server behind this id (an etcd endpoint is the etcd).
    pub fn server(self) -> NodeId {
        match self {
            NodeId::EtcdEndpoint(_) => NodeId::Etcd,
            other => other,
        }
    }

    /// Master replica `k`: replica 0 is [`NodeId::Master`] (so a world of one master
    /// names it as before), replica `k` ≥ 1 is [`NodeId::MasterReplica`]`(k)`.
    pub fn master(k: usize) -> NodeId {
        match u32::try_from(k) {
            Ok(0) => NodeId::Master,
            Ok(k) => NodeId::MasterReplica(k),
            Err(_) => NodeId::MasterReplica(u32::MAX),
        }
    }

    /// Whether this is a master replica (replica 0 included).
    pub fn is_master(self) -> bool {
        matches!(self, NodeId::Master | NodeId::MasterReplica(_))
    }

    /// A sidecar's etcd endpoint `k`.
    pub fn etcd_endpoint(k: usize) -> NodeId {
        match u32::try_from(k) {
            Ok(0) | Err(_) => NodeId::Etcd,
            Ok(k) => NodeId::EtcdEndpoint(k),
        }
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeId::Sidecar(i) => write!(f, "sidecar/{i}"),
            NodeId::Vllm(i) => write!(f, "vllm/{i}"),
            NodeId::Etcd => f.write_str("etcd"),
            NodeId::Master => f.write_str("master"),
            NodeId::EtcdEndpoint(k) => write!(f, "etcd@{k}"),
            NodeId::MasterReplica(k) => write!(f, "master@{k}"),
        }
    }
}

/// A request from one node to another.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// `GET /health`.
    Health,
    /// `GET /metrics`.
    Metrics,
    /// One etcd gateway call: the path and JSON body the caller's client writes (a
    /// sidecar's: `sidecar::peers::etcd`'s own encoding; the master's: mock-master's),
    /// with the caller's auth token if it has one.
    Etcd {
        path: &'static str,
        body: std::sync::Arc<str>,
        #[serde(skip)]
        token: Option<String>,
    },
    /// `POST /v1/internal/heartbeat` with this JSON body.
    Heartbeat { body: String, token: String },
    /// `POST /v3/watch` with this create request: the answer is the stream, its lines
    /// pushed to the caller until it ends.
    WatchOpen {
        body: String,
        #[serde(skip)]
        token: Option<String>,
    },
    /// The caller drops its watch streams (closes the connection).
    WatchClose,
}

/// An answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// An HTTP status with no body the caller needs (`/health`, heartbeat).
    Status(u16),
    /// A `/metrics` answer: status, `Content-Type` and the body.
    Page {
        status: u16,
        content_type: Cow<'static, str>,
        body: Body,
    },
    /// The etcd gateway's answer: status and JSON body, as it sends them.
    Gateway { status: u16, body: Vec<u8> },
    /// The connection is reset before the answer is complete (the caller sees a reset).
    Reset,
    /// Nothing listens: the connect is refused.
    Refused,
    /// The answer takes `after` longer to deliver (a body that trickles out).
    Slow { after: Duration, reply: Box<Reply> },
    /// The server acts on the request only `after` from now ([`Server::serve_deferred`]),
    /// and not at all if its caller gave up or the connection was reset by then: a
    /// latency fault, which the fakes' fault layers apply by sleeping before the handler
    /// runs (a handler is dropped with its connection).
    Deferred { after: Duration },
}

/// A `/metrics` body: the text the fake wrote, or bytes a fault rewrote (which may not
/// be UTF-8). Why two: the sidecar's client checks that a body is UTF-8, and a page of
/// thousands of lines that is a string already need not be checked again.
/// The bytes are shared with the fake that rewrote them (a `metrics_huge` page is up to
/// 64 MiB: not copied again on its way).
#[derive(Clone, PartialEq)]
pub enum Body {
    Text(String),
    Bytes(bytes::Bytes),
}

/// As when the bytes were a `Vec<u8>`.
impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Text(t) => f.debug_tuple("Text").field(t).finish(),
            Body::Bytes(b) => f.debug_tuple("Bytes").field(&b.as_ref()).finish(),
        }
    }
}

impl Body {
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Body::Text(t) => t.as_bytes(),
            Body::Bytes(b) => b.as_ref(),
        }
    }

    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body as a string, or its bytes when they are not UTF-8.
    pub fn into_text(self) -> Result<String, Vec<u8>> {
        match self {
            Body::Text(t) => Ok(t),
            Body::Bytes(b) => String::from_utf8(Vec::from(b)).map_err(|e| e.into_bytes()),
        }
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Body {
        Body::Bytes(bytes.into())
    }
}

/// As the bytes (what a `Vec<u8>` body wrote in the log before).
impl Serialize for Body {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.as_bytes())
    }
}

impl Request {
    /// Roughly the bytes on the wire (for bandwidth faults).
    pub fn size(&self) -> usize {
        match self {
            Request::Health | Request::Metrics | Request::WatchClose => 64,
            Request::Etcd { body, .. } => 64 + body.len(),
            Request::Heartbeat { body, .. } | Request::WatchOpen { body, .. } => 64 + body.len(),
        }
    }
}

impl Reply {
    /// Roughly the bytes on the wire (for bandwidth faults).
    pub fn size(&self) -> usize {
        match self {
            Reply::Page { body, .. } => 64 + body.len(),
            Reply::Gateway { body, .. } => 64 + body.len(),
            Reply::Slow { reply, .. } => reply.size(),
            _ => 64,
        }
    }
}

/// How an exchange ended, as the caller sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Reply(Reply),
    Failed(Failure),
}

/// An exchange that gave no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The caller's own timeout ran out.
    Timeout,
    /// The connection was reset.
    Reset,
    /// The connect was refused (nothing listening, or a `refuse` fault).
    Refused,
    /// The connection was closed without an answer (a blackhole healed).
    Closed,
}

impl Failure {
    /// How the sidecar's peers describe this failure (`sidecar::peers::http::describe`'s
    /// wording, of the causes hyper and the OS give for it on Linux).
    pub fn describe(self) -> String {
        use sidecar::peers::http::{describe_failure, FailureClass};
        let (class, cause) = match self {
            Failure::Timeout => (FailureClass::TimedOut, None),
            Failure::Reset => (FailureClass::Request, Some("connection reset by peer")),
            Failure::Refused => (
                FailureClass::Connect,
                Some("Connection refused (os error 111)"),
            ),
            Failure::Closed => (
                FailureClass::Request,
                Some("connection closed before message completed"),
            ),
        };
        describe_failure(class, cause)
    }
}

/// A call a server makes to another node, named by a `token` of its choosing.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub to: NodeId,
    pub request: Request,
    pub timeout: Duration,
    pub token: u64,
}

/// A node that answers requests: a fake's core inside its simulated shell. A `dyn
/// Server` is a `dyn Any` too, to inspect it as its own type (`downcast_ref`) or to
/// change it between events (health modes, faults).
pub trait Server: std::any::Any {
    /// Serve `request` from `from` at `now`. `None`: the server never answers (a hang);
    /// the caller meets its own timeout.
    fn serve(&mut self, now: Duration, from: NodeId, request: &Request) -> Option<Reply>;

    /// Serve a request whose [`Reply::Deferred`] delay has passed: as
    /// [`Server::serve`], without its fault this time.
    fn serve_deferred(&mut self, now: Duration, from: NodeId, request: &Request) -> Option<Reply> {
        self.serve(now, from, request)
    }

    /// When the node next needs [`Server::on_timer`]; `None`: never by itself.
    fn next_wakeup(&self) -> Option<Duration> {
        None
    }

    /// Time passed to `now`.
    fn on_timer(&mut self, _now: Duration) {}

    /// What the core reported since the last call (state changes), for the log.
    fn take_notes(&mut self) -> Vec<serde_json::Value> {
        Vec::new()
    }

    /// How many notes [`Server::take_notes`] would give, forgotten without being
    /// written out (for a log that only counts its lines).
    fn drop_notes(&mut self) -> usize {
        self.take_notes().len()
    }

    /// The calls the node wants made to other nodes (the master's health probes).
    fn take_calls(&mut self) -> Vec<Call> {
        Vec::new()
    }

    /// Stream lines the node sends unasked (etcd's watch answers), with their
    /// destination.
    fn take_pushes(&mut self) -> Vec<(NodeId, String)> {
        Vec::new()
    }

    /// A stream line from `from` arrived.
    fn on_push(&mut self, _now: Duration, _from: NodeId, _line: &str) {}

    /// The node's streams from `from` ended (the connection was reset or closed, or
    /// `from` ended them), for `reason`.
    fn on_stream_end(&mut self, _now: Duration, _from: NodeId, _reason: &str) {}

    /// Readers whose streams this node ended since the last call (etcd lost its data).
    fn take_stream_ends(&mut self) -> Vec<NodeId> {
        Vec::new()
    }

    /// The readers of the streams this node sends now (told that they end when the
    /// node's process is killed).
    fn stream_readers(&self) -> Vec<NodeId> {
        Vec::new()
    }

    /// The connection of `peer`'s streams to or from this node is gone (a link reset):
    /// a server forgets the streams it was sending to `peer`.
    fn on_link_reset(&mut self, _now: Duration, _peer: NodeId) {}

    /// How one of its calls ended.
    fn on_outcome(&mut self, _now: Duration, _token: u64, _outcome: Outcome) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words are the sidecar's own; these are the texts a real exchange's failure
    /// gives on Linux, which the scenario reports show.
    #[test]
    fn failures_read_as_the_sidecar_describes_reqwest_errors() {
        assert_eq!(Failure::Timeout.describe(), "timed out");
        assert_eq!(
            Failure::Reset.describe(),
            "request failed: connection reset by peer"
        );
        assert_eq!(
            Failure::Refused.describe(),
            "connect failed: Connection refused (os error 111)"
        );
        assert_eq!(
            Failure::Closed.describe(),
            "request failed: connection closed before message completed"
        );
    }
}
