//! Everything mock-vllm reports on the event stream, as one typed value: the HTTP shell
//! emits a [`VllmEvent`], and [`FakeEvent`] turns it into the kind and detail the
//! timeline stores, so each event's name and fields live here.
//!
//! The detail objects are built with `json!` from the same keys and values the shell
//! always wrote, so the bytes on the timeline do not depend on how the event is held.
//! A variant borrows what it reports, and the JSON is only built when someone listens
//! ([`mock_kit::Events::emit_event`]).

use std::net::SocketAddr;

use mock_kit::FakeEvent;
use serde_json::{json, Value};

use crate::faults::Fault;
use crate::health::Health;

/// One event of mock-vllm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum VllmEvent<'a> {
    /// `request`: one instrumented HTTP request answered.
    Request {
        path: &'a str,
        method: &'a str,
        status: u16,
    },
    /// `fault`: an armed fault fired.
    Fault { fault: &'a Fault },
    /// `health`: what `/health` does changed to `mode`.
    Health { mode: Health },
    /// `state`: the server's life changed (detail `{"state": ...}`).
    State(Lifecycle),
}

/// A change in the server's life: the `state` field of a `state` event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// `started`: serving on `addr`.
    Started { addr: SocketAddr },
    /// `stopped`: the listener and every connection were closed.
    Stopped,
    /// `crashed`: died like a killed process.
    Crashed,
    /// `restarted`: serving again on the same address with fresh engine state.
    Restarted,
    /// `counter_reset`: every counter and histogram went back to 0.
    CounterReset,
}

impl Lifecycle {
    /// The change's name, the `state` field of the event.
    pub fn name(self) -> &'static str {
        match self {
            Lifecycle::Started { .. } => "started",
            Lifecycle::Stopped => "stopped",
            Lifecycle::Crashed => "crashed",
            Lifecycle::Restarted => "restarted",
            Lifecycle::CounterReset => "counter_reset",
        }
    }
}

impl FakeEvent for VllmEvent<'_> {
    fn kind(&self) -> &'static str {
        match self {
            VllmEvent::Request { .. } => "request",
            VllmEvent::Fault { .. } => "fault",
            VllmEvent::Health { .. } => "health",
            VllmEvent::State(_) => "state",
        }
    }

    fn detail(&self) -> Value {
        match *self {
            VllmEvent::Request {
                path,
                method,
                status,
            } => json!({"path": path, "method": method, "status": status}),
            VllmEvent::Fault { fault } => json!({"fault": fault}),
            VllmEvent::Health { mode } => json!({"mode": mode}),
            VllmEvent::State(Lifecycle::Started { addr }) => {
                json!({"state": "started", "addr": addr.to_string()})
            }
            VllmEvent::State(change) => json!({"state": change.name()}),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kind and the detail's bytes, as the timeline writes them.
    fn written(ev: VllmEvent<'_>) -> (&'static str, String) {
        (ev.kind(), ev.detail().to_string())
    }

    #[test]
    fn each_event_is_what_the_shell_wrote() {
        let fault = Fault::MetricsStatus { status: 503 };
        let cases = [
            (
                VllmEvent::Request {
                    path: "/v1/completions",
                    method: "POST",
                    status: 200,
                },
                "request",
                json!({"path": "/v1/completions", "method": "POST", "status": 200}),
            ),
            (
                VllmEvent::Fault { fault: &fault },
                "fault",
                json!({"fault": {"kind": "metrics_status", "status": 503}}),
            ),
            (
                VllmEvent::Health { mode: Health::Hang },
                "health",
                json!({"mode": "hang"}),
            ),
            (
                VllmEvent::State(Lifecycle::Started {
                    addr: SocketAddr::from(([127, 0, 0, 1], 18000)),
                }),
                "state",
                json!({"state": "started", "addr": "127.0.0.1:18000"}),
            ),
            (
                VllmEvent::State(Lifecycle::Stopped),
                "state",
                json!({"state": "stopped"}),
            ),
            (
                VllmEvent::State(Lifecycle::Crashed),
                "state",
                json!({"state": "crashed"}),
            ),
            (
                VllmEvent::State(Lifecycle::Restarted),
                "state",
                json!({"state": "restarted"}),
            ),
            (
                VllmEvent::State(Lifecycle::CounterReset),
                "state",
                json!({"state": "counter_reset"}),
            ),
        ];
        for (ev, kind, detail) in cases {
            assert_eq!(written(ev), (kind, detail.to_string()), "{ev:?}");
        }
    }
}
