//! Everything mock-etcd reports on the event stream, as one typed value: the HTTP shell
//! and the core emit an [`EtcdEvent`], and [`FakeEvent`] turns it into the kind and
//! detail the timeline stores, so each event's name and fields live here.
//!
//! The detail objects are built with `json!` from the same keys and values the shell
//! always wrote, so the bytes on the timeline do not depend on how the event is held.
//! Most variants borrow what they report; the ones the core hands back with an answer
//! ([`crate::calls::Reply::report`]) own it, so they live as `EtcdEvent<'static>`.

use std::collections::BTreeSet;

use mock_kit::FakeEvent;
use serde_json::{json, Value};

use crate::faults::Fault;

/// One event of mock-etcd.
#[derive(Clone, Debug, PartialEq)]
pub enum EtcdEvent<'a> {
    /// `request`: one HTTP request served.
    Request {
        method: &'a str,
        path: &'a str,
        status: u16,
        elapsed_ms: u64,
    },
    /// `fault`: an armed fault fired on a request to `path`.
    Fault { fault: &'a Fault, path: &'a str },
    /// `lease_expired`: a lease ended (`why`: `ttl` or `forced`) and its keys with it.
    LeaseExpired {
        id: i64,
        /// The lease's keys, as bytes (written lossily decoded).
        keys: &'a BTreeSet<Vec<u8>>,
        why: &'a str,
    },
    /// `lease_revoked`: a client revoked lease `id`.
    LeaseRevoked { id: i64 },
    /// `authenticated`: `user` got a token.
    Authenticated { user: String },
    /// `watch_overflow`: a watch stream fell behind and was cancelled as compacted
    /// from `first_missed` on.
    WatchOverflow { stream: u64, first_missed: i64 },
    /// `data_lost`: the store was wiped (`reset_revision`: the revision starts over).
    DataLost { reset_revision: bool },
    /// `reset`: faults, holds, data, streams and the journal back to the start.
    Reset,
    /// `watches_closed`: every open watch and keepalive stream was ended.
    WatchesClosed,
}

impl FakeEvent for EtcdEvent<'_> {
    fn kind(&self) -> &'static str {
        match self {
            EtcdEvent::Request { .. } => "request",
            EtcdEvent::Fault { .. } => "fault",
            EtcdEvent::LeaseExpired { .. } => "lease_expired",
            EtcdEvent::LeaseRevoked { .. } => "lease_revoked",
            EtcdEvent::Authenticated { .. } => "authenticated",
            EtcdEvent::WatchOverflow { .. } => "watch_overflow",
            EtcdEvent::DataLost { .. } => "data_lost",
            EtcdEvent::Reset => "reset",
            EtcdEvent::WatchesClosed => "watches_closed",
        }
    }

    fn detail(&self) -> Value {
        match self {
            EtcdEvent::Request {
                method,
                path,
                status,
                elapsed_ms,
            } => {
                json!({ "method": method, "path": path, "status": status, "elapsed_ms": elapsed_ms })
            }
            EtcdEvent::Fault { fault, path } => json!({ "fault": fault, "path": path }),
            EtcdEvent::LeaseExpired { id, keys, why } => {
                let keys: Vec<String> = keys
                    .iter()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .collect();
                json!({ "id": id, "keys": keys, "why": why })
            }
            EtcdEvent::LeaseRevoked { id } => json!({ "id": id }),
            EtcdEvent::Authenticated { user } => json!({ "user": user }),
            EtcdEvent::WatchOverflow {
                stream,
                first_missed,
            } => json!({ "stream": stream, "first_missed": first_missed }),
            EtcdEvent::DataLost { reset_revision } => json!({ "reset_revision": reset_revision }),
            EtcdEvent::Reset => json!({}),
            EtcdEvent::WatchesClosed => json!({}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind and the detail's bytes, as the timeline writes them.
    fn written(ev: &EtcdEvent<'_>) -> (&'static str, String) {
        (ev.kind(), ev.detail().to_string())
    }

    #[test]
    fn each_event_is_what_the_shell_wrote() {
        let fault = Fault::Hang { path: "*".into() };
        let keys: BTreeSet<Vec<u8>> = [b"/b".to_vec(), b"/a\xff".to_vec()].into();
        let cases = [
            (
                EtcdEvent::Request {
                    method: "POST",
                    path: "/v3/kv/put",
                    status: 200,
                    elapsed_ms: 3,
                },
                "request",
                json!({"method": "POST", "path": "/v3/kv/put", "status": 200, "elapsed_ms": 3}),
            ),
            (
                EtcdEvent::Fault {
                    fault: &fault,
                    path: "/v3/kv/range",
                },
                "fault",
                json!({"fault": {"kind": "hang", "path": "*"}, "path": "/v3/kv/range"}),
            ),
            (
                EtcdEvent::LeaseExpired {
                    id: 7,
                    keys: &keys,
                    why: "ttl",
                },
                "lease_expired",
                json!({"id": 7, "keys": ["/a\u{fffd}", "/b"], "why": "ttl"}),
            ),
            (
                EtcdEvent::LeaseRevoked { id: 9 },
                "lease_revoked",
                json!({"id": 9}),
            ),
            (
                EtcdEvent::Authenticated {
                    user: "root".into(),
                },
                "authenticated",
                json!({"user": "root"}),
            ),
            (
                EtcdEvent::WatchOverflow {
                    stream: 2,
                    first_missed: 41,
                },
                "watch_overflow",
                json!({"stream": 2, "first_missed": 41}),
            ),
            (
                EtcdEvent::DataLost {
                    reset_revision: true,
                },
                "data_lost",
                json!({"reset_revision": true}),
            ),
            (EtcdEvent::Reset, "reset", json!({})),
            (EtcdEvent::WatchesClosed, "watches_closed", json!({})),
        ];
        for (ev, kind, detail) in cases {
            assert_eq!(written(&ev), (kind, detail.to_string()), "{ev:?}");
        }
    }
}
