//! Following etcd, decided without I/O: what each watch message means for the watcher
//! (new events, a revision that went back, a compaction, a cancel) and what each key
//! means for the instance table. [`crate::watch`] owns the stream, the timers and the
//! re-listing; this module owns the rules.
//!
//! The cursor remembers the revision after the last event applied (`next`: where a
//! re-opened watch starts, and below which a replayed event is skipped) and the highest
//! header revision seen since the last listing (`seen`: revisions only grow, so a lower
//! one means etcd lost its data).

use crate::etcd::{EventKind, KeyValue, WatchEvent, WatchResponse};
use crate::instances::{instance_name, InstanceMeta};

/// How far the watcher has followed etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cursor {
    next: i64,
    seen: i64,
}

/// What one watch message means.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Events not applied before, in order; the cursor has moved past them.
    Events(Vec<WatchEvent>),
    /// The header revision is lower than one seen since the last listing: re-list.
    RevisionReset { seen: i64, revision: i64 },
    /// Canceled because etcd refused the auth token: drop it and re-open.
    AuthRefused { reason: String },
    /// Canceled because `from` was compacted away: re-list.
    Compacted { from: i64, compact_revision: i64 },
    /// Canceled for another reason: re-open from the cursor.
    Canceled { reason: String },
}

impl Cursor {
    /// After a listing at `revision`: watch from the revision after it.
    pub fn listed(revision: i64) -> Cursor {
        Cursor {
            next: revision + 1,
            seen: revision,
        }
    }

    /// Where a (re-)opened watch starts.
    pub fn next(&self) -> i64 {
        self.next
    }

    /// Read one message of the stream.
    pub fn on_response(&mut self, resp: WatchResponse) -> Verdict {
        if resp.revision > 0 && resp.revision < self.seen {
            return Verdict::RevisionReset {
                seen: self.seen,
                revision: resp.revision,
            };
        }
        self.seen = self.seen.max(resp.revision);
        if resp.canceled {
            if crate::etcd::is_auth_cancel(&resp.cancel_reason) {
                return Verdict::AuthRefused {
                    reason: resp.cancel_reason,
                };
            }
            if resp.compact_revision > 0 {
                return Verdict::Compacted {
                    from: self.next,
                    compact_revision: resp.compact_revision,
                };
            }
            return Verdict::Canceled {
                reason: resp.cancel_reason,
            };
        }
        let floor = self.next;
        let mut fresh = Vec::with_capacity(resp.events.len());
        for ev in resp.events {
            let rev = ev.kv.mod_revision;
            if rev != 0 && rev < floor {
                continue; // seen before the stream was re-opened
            }
            if rev >= self.next {
                self.next = rev + 1;
            }
            fresh.push(ev);
        }
        Verdict::Events(fresh)
    }
}

/// What one event means for the instance table; `None` for keys that are not instance
/// keys (`XLLM:LOADMETRICS:…`, written by the master itself).
#[derive(Debug, Clone, PartialEq)]
pub enum Change<'a> {
    /// A registration, or why its value could not be read.
    Put {
        name: &'a str,
        meta: Result<InstanceMeta, String>,
    },
    /// A deletion, with the incarnation the old value named (if readable).
    Delete {
        name: &'a str,
        deleted: Option<String>,
    },
}

pub fn change<'a>(namespace: &str, ev: &'a WatchEvent) -> Option<Change<'a>> {
    let name = instance_name(namespace, &ev.kv.key)?;
    Some(match ev.kind {
        EventKind::Put => Change::Put {
            name,
            meta: InstanceMeta::parse(&ev.kv.value),
        },
        EventKind::Delete => Change::Delete {
            name,
            deleted: ev
                .prev_kv
                .as_ref()
                .and_then(|p| InstanceMeta::parse(&p.value).ok())
                .map(|m| m.incarnation_id),
        },
    })
}

/// The instances a listing names, and the keys whose value could not be read.
pub type Listed = (Vec<(String, InstanceMeta)>, Vec<(String, String)>);

pub fn listed_instances(namespace: &str, kvs: &[KeyValue]) -> Listed {
    let (mut found, mut bad) = (Vec::new(), Vec::new());
    for kv in kvs {
        let Some(name) = instance_name(namespace, &kv.key) else {
            continue;
        };
        match InstanceMeta::parse(&kv.value) {
            Ok(meta) => found.push((name.to_string(), meta)),
            Err(e) => bad.push((name.to_string(), e)),
        }
    }
    (found, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, rev: i64) -> WatchEvent {
        WatchEvent {
            kind: EventKind::Put,
            kv: KeyValue {
                key: key.as_bytes().to_vec(),
                value: br#"{"name":"h:1","rpc_address":"h:1","type":0,"incarnation_id":"i"}"#
                    .to_vec(),
                mod_revision: rev,
            },
            prev_kv: None,
        }
    }

    fn events(revision: i64, evs: Vec<WatchEvent>) -> WatchResponse {
        WatchResponse {
            revision,
            events: evs,
            ..Default::default()
        }
    }

    #[test]
    fn replayed_events_are_skipped_and_the_cursor_advances() {
        let mut c = Cursor::listed(10);
        assert_eq!(c.next(), 11);
        let v = c.on_response(events(12, vec![put("XLLM:DEFAULT:h:1", 11), put("x", 12)]));
        assert!(matches!(&v, Verdict::Events(e) if e.len() == 2));
        assert_eq!(c.next(), 13);
        // The same events again after a re-open: nothing new.
        let v = c.on_response(events(12, vec![put("XLLM:DEFAULT:h:1", 11), put("x", 12)]));
        assert_eq!(v, Verdict::Events(vec![]));
        assert_eq!(c.next(), 13);
    }

    #[test]
    fn a_lower_revision_is_a_reset_and_cancels_say_why() {
        let mut c = Cursor::listed(50);
        assert_eq!(
            c.on_response(events(3, vec![])),
            Verdict::RevisionReset {
                seen: 50,
                revision: 3
            }
        );
        let compacted = WatchResponse {
            revision: 60,
            canceled: true,
            compact_revision: 55,
            ..Default::default()
        };
        assert_eq!(
            c.on_response(compacted),
            Verdict::Compacted {
                from: 51,
                compact_revision: 55
            }
        );
        let other = WatchResponse {
            revision: 60,
            canceled: true,
            cancel_reason: "gone".into(),
            ..Default::default()
        };
        assert_eq!(
            c.on_response(other),
            Verdict::Canceled {
                reason: "gone".into()
            }
        );
    }

    #[test]
    fn only_instance_keys_are_changes() {
        let ev = put("/ns/XLLM:DEFAULT:h:1", 5);
        assert!(matches!(
            change("/ns/", &ev),
            Some(Change::Put {
                name: "h:1",
                meta: Ok(_)
            })
        ));
        assert_eq!(change("/ns/", &put("/ns/XLLM:LOADMETRICS:h:1", 5)), None);
        let kvs = [put("/ns/XLLM:MIX:a:1", 1).kv, {
            let mut kv = put("/ns/XLLM:DEFAULT:b:1", 2).kv;
            kv.value = b"{".to_vec();
            kv
        }];
        let (found, bad) = listed_instances("/ns/", &kvs);
        assert_eq!(found.len(), 1);
        assert_eq!(bad.first().map(|b| b.0.as_str()), Some("b:1"));
    }
}
