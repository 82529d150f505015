//! The event the master reports for every heartbeat it answers, as a typed value: the
//! HTTP shell and a simulated master emit it, and a reader of the event stream (a
//! scenario's verdict) reads it back with [`HeartbeatEvent::read`], so the name and
//! fields live in one place.

use serde_json::{json, Value};

/// One answered heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeartbeatEvent<'a> {
    pub status: u16,
    /// The instance the body named, when the master read that far (a refusal by the
    /// token or a fault names none).
    pub name: Option<&'a str>,
    /// Answered by an armed fault, not by the master's rules.
    pub fault: bool,
}

impl<'a> HeartbeatEvent<'a> {
    /// The event's kind.
    pub const KIND: &'static str = "heartbeat";

    /// The event's detail as the shells write it.
    pub fn detail(&self) -> Value {
        match self.fault {
            true => json!({"status": self.status, "fault": true}),
            false => json!({"status": self.status, "name": self.name}),
        }
    }

    /// The heartbeat event an event of `kind` with `detail` is, if it is one.
    pub fn read(kind: &str, detail: &'a Value) -> Option<HeartbeatEvent<'a>> {
        if kind != Self::KIND {
            return None;
        }
        let status = u16::try_from(detail.get("status")?.as_u64()?).ok()?;
        Some(HeartbeatEvent {
            status,
            name: detail.get("name").and_then(Value::as_str),
            fault: detail
                .get("fault")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_it_writes() {
        for ev in [
            HeartbeatEvent {
                status: 200,
                name: Some("10.0.0.1:8000"),
                fault: false,
            },
            HeartbeatEvent {
                status: 401,
                name: None,
                fault: false,
            },
            HeartbeatEvent {
                status: 503,
                name: None,
                fault: true,
            },
        ] {
            let d = ev.detail();
            assert_eq!(HeartbeatEvent::read(HeartbeatEvent::KIND, &d), Some(ev));
            assert_eq!(HeartbeatEvent::read("state", &d), None);
        }
        assert_eq!(
            HeartbeatEvent::read("heartbeat", &json!({"status": 70000})),
            None
        );
    }
}
