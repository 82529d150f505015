//! What the event log says of an exchange (its `send`, `serve` and `outcome` lines):
//! requests and answers summarized (sizes, not page texts), as typed values serialized
//! straight into the line.
//!
//! Why typed and not `json!`: three such lines are written per exchange, and building
//! a `serde_json::Value` for each (a map per object) cost about as much as the exchange
//! itself. Each type writes exactly what its `Value` wrote: object keys in sorted order,
//! as a `Value` object sorts them (tested against the `json!` forms below).

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;
use serde_json::json;

use crate::node::{NodeId, Outcome, Reply, Request};

/// A body's size.
#[derive(Serialize)]
struct Bytes {
    bytes: usize,
}

/// A body's size and status.
#[derive(Serialize)]
struct BytesStatus {
    bytes: usize,
    status: u16,
}

/// `{ key: value }`.
fn one<S: Serializer, V: Serialize>(s: S, key: &str, value: &V) -> Result<S::Ok, S::Error> {
    let mut m = s.serialize_map(Some(1))?;
    m.serialize_entry(key, value)?;
    m.end()
}

/// A request without its heartbeat body.
fn request_summary<S: Serializer>(r: &&Request, s: S) -> Result<S::Ok, S::Error> {
    match r {
        Request::Heartbeat { body, .. } => one(s, "heartbeat", &Bytes { bytes: body.len() }),
        // The path only: the body is base64 (or a password), the token a secret.
        Request::Etcd { path, .. } => one(s, "etcd", path),
        // Unit variants and single-field ones: the derived form is the `Value`'s.
        other => other.serialize(s),
    }
}

/// An answer without its page or gateway body (`None`: a hang).
fn reply_summary<S: Serializer>(r: &Option<&Reply>, s: S) -> Result<S::Ok, S::Error> {
    let sized = |bytes: usize, status: &u16| BytesStatus {
        bytes,
        status: *status,
    };
    match r {
        None => s.serialize_none(),
        Some(Reply::Gateway { status, body }) => one(s, "gateway", &sized(body.len(), status)),
        Some(Reply::Page { status, body, .. }) => one(s, "page", &sized(body.len(), status)),
        Some(slow @ Reply::Slow { .. }) => json!(slow).serialize(s),
        Some(other) => other.serialize(s),
    }
}

/// How an exchange ended.
fn outcome_summary<S: Serializer>(o: &&Outcome, s: S) -> Result<S::Ok, S::Error> {
    match o {
        Outcome::Reply(r) => reply_summary(&Some(r), s),
        Outcome::Failed(f) => s.collect_str(&format_args!("{f:?}")),
    }
}

/// The `send` line: exchange `x` to `to` for the caller's command `cmd` (fields in
/// sorted order, as a `Value` object writes its keys).
#[derive(Serialize)]
pub(crate) struct Send<'a> {
    pub cmd: u64,
    #[serde(serialize_with = "request_summary")]
    pub request: &'a Request,
    #[serde(serialize_with = "name")]
    pub to: NodeId,
    pub x: u64,
}

/// The `serve` line: the server's answer to exchange `x` from `from` (`None`: a hang).
#[derive(Serialize)]
pub(crate) struct Serve<'a> {
    #[serde(serialize_with = "name")]
    pub from: NodeId,
    #[serde(serialize_with = "reply_summary")]
    pub reply: Option<&'a Reply>,
    pub x: u64,
}

/// The `outcome` line: how exchange `x` of the caller's command `cmd` ended.
#[derive(Serialize)]
pub(crate) struct Ended<'a> {
    pub cmd: u64,
    #[serde(serialize_with = "outcome_summary")]
    pub outcome: &'a Outcome,
    pub x: u64,
}

/// A node's name as the log writes it (its `Display`).
fn name<S: Serializer>(id: &NodeId, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(id)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::node::Failure;

    // The `json!` forms these lines were written with before.
    fn request_value(r: &Request) -> serde_json::Value {
        match r {
            Request::Heartbeat { body, .. } => json!({ "heartbeat": { "bytes": body.len() } }),
            Request::Etcd { path, .. } => json!({ "etcd": path }),
            other => json!(other),
        }
    }

    fn reply_value(r: &Reply) -> serde_json::Value {
        match r {
            Reply::Gateway { status, body } => {
                json!({ "gateway": { "status": status, "bytes": body.len() } })
            }
            Reply::Page { status, body, .. } => {
                json!({ "page": { "status": status, "bytes": body.len() } })
            }
            other => json!(other),
        }
    }

    fn outcome_value(o: &Outcome) -> serde_json::Value {
        match o {
            Outcome::Reply(r) => reply_value(r),
            Outcome::Failed(f) => json!(format!("{f:?}")),
        }
    }

    fn requests() -> Vec<Request> {
        vec![
            Request::Health,
            Request::Metrics,
            Request::Heartbeat {
                body: "{\"a\":1}".into(),
                token: "t".into(),
            },
            Request::Etcd {
                path: "/v3/lease/keepalive",
                body: "{\"ID\":\"7\"}".into(),
                token: Some("secret".into()),
            },
        ]
    }

    fn replies() -> Vec<Reply> {
        let page = Reply::Page {
            status: 200,
            content_type: "text/plain".into(),
            body: b"a 1\n".to_vec().into(),
        };
        vec![
            Reply::Status(409),
            Reply::Gateway {
                status: 404,
                body: b"{}".to_vec(),
            },
            page.clone(),
            Reply::Reset,
            Reply::Refused,
            Reply::Slow {
                after: Duration::from_millis(1500),
                reply: Box::new(page),
            },
        ]
    }

    fn text<T: Serialize>(t: &T) -> String {
        serde_json::to_string(t).unwrap()
    }

    #[test]
    fn typed_lines_write_what_their_values_wrote() {
        let to = NodeId::Vllm(12);
        for (i, request) in requests().iter().enumerate() {
            let typed = Send {
                x: i as u64,
                to,
                cmd: 40 + i as u64,
                request,
            };
            let value = json!({ "x": i, "to": to.to_string(), "cmd": 40 + i, "request": request_value(request) });
            assert_eq!(text(&typed), value.to_string());
        }
        let mut outcomes: Vec<Outcome> = replies().into_iter().map(Outcome::Reply).collect();
        for f in [
            Failure::Timeout,
            Failure::Reset,
            Failure::Refused,
            Failure::Closed,
        ] {
            outcomes.push(Outcome::Failed(f));
        }
        for (i, reply) in replies().iter().map(Some).chain([None]).enumerate() {
            let typed = Serve {
                x: i as u64,
                from: NodeId::Sidecar(3),
                reply,
            };
            let value = json!({ "x": i, "from": "sidecar/3", "reply": reply.map(reply_value) });
            assert_eq!(text(&typed), value.to_string());
        }
        for (i, outcome) in outcomes.iter().enumerate() {
            let typed = Ended {
                x: i as u64,
                cmd: 9,
                outcome,
            };
            let value = json!({ "x": i, "cmd": 9, "outcome": outcome_value(outcome) });
            assert_eq!(text(&typed), value.to_string());
        }
    }
}
