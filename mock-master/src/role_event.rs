//! The event a replica reports when its role changes, as a typed value: the shell and a
//! simulated replica emit it, and a reader of the event stream reads it back with
//! [`RoleEvent::read`], so the names and fields live in one place.

use serde_json::{json, Value};

/// Which change: the event's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoleChange {
    /// This replica's txn created the MASTER key: it is master from now on.
    Elected,
    /// Another replica holds the MASTER key: this one follows it.
    Standby,
    /// This replica was master and no longer is (lease lost, key deleted or taken,
    /// restart): it stopped publishing at once.
    LostMastership,
}

impl RoleChange {
    /// Every change, for readers that match on the kind.
    pub const ALL: [RoleChange; 3] = [
        RoleChange::Elected,
        RoleChange::Standby,
        RoleChange::LostMastership,
    ];

    /// The event's kind as written on the event log.
    pub fn kind(self) -> &'static str {
        match self {
            RoleChange::Elected => "elected",
            RoleChange::Standby => "standby",
            RoleChange::LostMastership => "lost_mastership",
        }
    }
}

/// One role change of one replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoleEvent {
    /// Which change (the event's kind).
    pub change: RoleChange,
    /// The replica that changed role.
    pub service_name: String,
    /// The master as this replica sees it after the change (`None`: unknown or none).
    pub master: Option<String>,
    /// Why, in a few words (`txn won`, `lease expired`, ...).
    pub reason: String,
}

impl RoleEvent {
    /// The event's kind.
    pub fn kind(&self) -> &'static str {
        self.change.kind()
    }

    /// The event's detail as the shells write it.
    pub fn detail(&self) -> Value {
        json!({
            "service_name": self.service_name,
            "master": self.master,
            "reason": self.reason,
        })
    }

    /// The role event an event of `kind` with `detail` is, if it is one.
    pub fn read(kind: &str, detail: &Value) -> Option<RoleEvent> {
        let change = RoleChange::ALL.into_iter().find(|c| c.kind() == kind)?;
        Some(RoleEvent {
            change,
            service_name: detail.get("service_name")?.as_str()?.to_string(),
            master: detail
                .get("master")
                .and_then(Value::as_str)
                .map(String::from),
            reason: detail
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_it_writes() {
        for change in RoleChange::ALL {
            for master in [None, Some("127.0.0.1:9001".to_string())] {
                let ev = RoleEvent {
                    change,
                    service_name: "127.0.0.1:9000".into(),
                    master,
                    reason: "txn won".into(),
                };
                let d = ev.detail();
                assert_eq!(RoleEvent::read(ev.kind(), &d), Some(ev.clone()));
                assert_eq!(RoleEvent::read("heartbeat", &d), None);
            }
        }
        assert_eq!(RoleEvent::read("elected", &json!({"master": "x"})), None);
    }
}
