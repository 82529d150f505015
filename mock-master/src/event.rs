//! Everything the master reports on the event stream, as one typed value: the HTTP
//! shell and a simulated master emit a [`MasterEvent`], and [`FakeEvent`] turns it into
//! the kind and detail the timeline stores, so each event's name and fields live here.
//!
//! The detail objects are built with `json!` from the same keys and values the shells
//! always wrote, so the bytes on the timeline do not depend on how the event is held.
//! A variant borrows what it reports: building one costs nothing, and the JSON is only
//! built when someone listens ([`mock_kit::Events::emit_event`]).

use std::net::SocketAddr;

use mock_kit::FakeEvent;
use serde_json::{json, Value};

use crate::heartbeat_event::HeartbeatEvent;
use crate::pbjson::{HeartbeatRequest, LoadMetrics};
use crate::role_event::RoleEvent;

/// One event of the master.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MasterEvent<'a> {
    /// `started`: the master listens on `addr` (after its first listing, or the wait
    /// for it, is over).
    Started { addr: SocketAddr },
    /// `heartbeat`: one answered heartbeat.
    Heartbeat {
        /// Status, name and whether a fault answered.
        beat: HeartbeatEvent<'a>,
        /// The decoded body, when the master read that far: its incarnation and metrics
        /// join the detail.
        request: Option<&'a HeartbeatRequest>,
    },
    /// `token`: the heartbeat token was rotated; `set` is whether one is checked now.
    Token { set: bool },
    /// `watch_pause`: the etcd watch was paused (`true`) or resumed (`false`).
    WatchPause { paused: bool },
    /// `reset`: faults, watch pause, token and heartbeat counts back to the configuration.
    Reset,
    /// `state`: an instance changed state (`from` and `to` are state names, or the
    /// deregistered marker).
    State {
        name: &'a str,
        incarnation: &'a str,
        from: &'a str,
        to: &'a str,
        reason: &'a str,
    },
    /// `stale_delete`: a DELETE whose old value named another incarnation than the
    /// tracked one.
    StaleDelete {
        name: &'a str,
        deleted: &'a str,
        tracked: &'a str,
    },
    /// `bad_registration`: an instance key whose value could not be read.
    BadRegistration { name: &'a str, error: &'a str },
    /// `probe`: a probe's final verdict.
    Probe {
        name: &'a str,
        incarnation: &'a str,
        healthy: bool,
    },
    /// `elected`, `standby` or `lost_mastership`: this replica's role changed.
    Role(&'a RoleEvent),
    /// `etcd_error`: an etcd call (`op`: `range`, an election call's name, ...) failed.
    EtcdError { op: &'a str, error: &'a str },
    /// `etcd_auth_refused`: etcd refused the auth token on `op`.
    EtcdAuthRefused { op: &'a str },
    /// `etcd_revision_reset`: etcd's revision went back from `seen` to `revision`.
    EtcdRevisionReset { seen: i64, revision: i64 },
    /// `watch_compacted`: the watch from `from` was compacted away at `compact_revision`.
    WatchCompacted { from: i64, compact_revision: i64 },
    /// `watch_reconnect`: the watch is re-opened from `from_revision`, and why.
    WatchReconnect { from_revision: i64, reason: &'a str },
    /// `restart`: the follower was restarted (`relist`: with a fresh listing).
    Restart { relist: bool },
    /// `relist`: the prefix was listed at `revision`, `instances` found.
    Relist { revision: i64, instances: usize },
    /// `route`: a completion on `path` was routed (`chosen`), or found no instance.
    Route {
        path: &'a str,
        chosen: Option<RouteChoice<'a>>,
    },
    /// `loadmetrics_publish`: one LOADMETRICS round's writes.
    LoadmetricsPublish {
        /// Instances whose LOADMETRICS key was written.
        put: &'a [String],
        /// Instances whose LOADMETRICS key was deleted.
        deleted: &'a [String],
        /// Instances left out of the round (nothing to publish for them).
        skipped: &'a [String],
        /// How many writes failed.
        failed: usize,
    },
}

/// The instance a completion went to, and what it was picked among.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RouteChoice<'a> {
    /// The chosen instance's name.
    pub name: &'a str,
    /// Its load when it was chosen.
    pub load: &'a Option<LoadMetrics>,
    /// Every candidate with its load, in the order they were offered.
    pub candidates: &'a [(String, Option<LoadMetrics>)],
}

impl FakeEvent for MasterEvent<'_> {
    fn kind(&self) -> &'static str {
        match self {
            MasterEvent::Started { .. } => "started",
            MasterEvent::Heartbeat { .. } => HeartbeatEvent::KIND,
            MasterEvent::Token { .. } => "token",
            MasterEvent::WatchPause { .. } => "watch_pause",
            MasterEvent::Reset => "reset",
            MasterEvent::State { .. } => "state",
            MasterEvent::StaleDelete { .. } => "stale_delete",
            MasterEvent::BadRegistration { .. } => "bad_registration",
            MasterEvent::Probe { .. } => "probe",
            MasterEvent::Role(ev) => ev.kind(),
            MasterEvent::EtcdError { .. } => "etcd_error",
            MasterEvent::EtcdAuthRefused { .. } => "etcd_auth_refused",
            MasterEvent::EtcdRevisionReset { .. } => "etcd_revision_reset",
            MasterEvent::WatchCompacted { .. } => "watch_compacted",
            MasterEvent::WatchReconnect { .. } => "watch_reconnect",
            MasterEvent::Restart { .. } => "restart",
            MasterEvent::Relist { .. } => "relist",
            MasterEvent::Route { .. } => "route",
            MasterEvent::LoadmetricsPublish { .. } => "loadmetrics_publish",
        }
    }

    fn detail(&self) -> Value {
        match *self {
            MasterEvent::Started { addr } => json!({"addr": addr.to_string()}),
            MasterEvent::Heartbeat { beat, request } => heartbeat_detail(beat, request),
            MasterEvent::Token { set } => json!({"set": set}),
            MasterEvent::WatchPause { paused } => json!({"paused": paused}),
            MasterEvent::Reset => json!({}),
            MasterEvent::State {
                name,
                incarnation,
                from,
                to,
                reason,
            } => {
                json!({"name": name, "incarnation": incarnation, "from": from, "to": to, "reason": reason})
            }
            MasterEvent::StaleDelete {
                name,
                deleted,
                tracked,
            } => json!({"name": name, "deleted": deleted, "tracked": tracked}),
            MasterEvent::BadRegistration { name, error } => {
                json!({"name": name, "error": error})
            }
            MasterEvent::Probe {
                name,
                incarnation,
                healthy,
            } => json!({"name": name, "incarnation": incarnation, "healthy": healthy}),
            MasterEvent::Role(ev) => ev.detail(),
            MasterEvent::EtcdError { op, error } => json!({"op": op, "error": error}),
            MasterEvent::EtcdAuthRefused { op } => json!({"op": op}),
            MasterEvent::EtcdRevisionReset { seen, revision } => {
                json!({"seen_revision": seen, "revision": revision})
            }
            MasterEvent::WatchCompacted {
                from,
                compact_revision,
            } => json!({"from_revision": from, "compact_revision": compact_revision}),
            MasterEvent::WatchReconnect {
                from_revision,
                reason,
            } => json!({"from_revision": from_revision, "reason": reason}),
            MasterEvent::Restart { relist } => json!({"relist": relist}),
            MasterEvent::Relist {
                revision,
                instances,
            } => json!({"revision": revision, "instances": instances}),
            MasterEvent::Route { path, chosen: None } => json!({"path": path, "chosen": null}),
            MasterEvent::Route {
                path,
                chosen: Some(c),
            } => {
                let loads: Vec<Value> = c
                    .candidates
                    .iter()
                    .map(|(n, l)| json!({"name": n, "load": l}))
                    .collect();
                json!({"path": path, "chosen": c.name, "load": c.load, "candidates": loads})
            }
            MasterEvent::LoadmetricsPublish {
                put,
                deleted,
                skipped,
                failed,
            } => json!({"put": put, "deleted": deleted, "skipped": skipped, "failed": failed}),
        }
    }
}

/// A heartbeat's detail: [`HeartbeatEvent::detail`], plus the body's incarnation and
/// metrics when the body was read.
fn heartbeat_detail(beat: HeartbeatEvent<'_>, request: Option<&HeartbeatRequest>) -> Value {
    let mut d = beat.detail();
    if let (Some(m), Some(req)) = (d.as_object_mut(), request) {
        m.insert("incarnation".into(), json!(req.incarnation_id));
        m.insert(
            "waiting_requests_num".into(),
            json!(req.load_metrics.waiting_requests_num),
        );
        m.insert(
            "gpu_cache_usage_perc".into(),
            crate::pbjson::float_json(req.load_metrics.gpu_cache_usage_perc),
        );
        m.insert(
            "recent_max_ttft".into(),
            json!(req.latency_metrics.recent_max_ttft),
        );
        m.insert(
            "recent_max_tbt".into(),
            json!(req.latency_metrics.recent_max_tbt),
        );
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pbjson::LatencyMetrics;
    use crate::role_event::RoleChange;

    /// The kind and the detail's bytes, as the timeline writes them.
    fn written(ev: MasterEvent<'_>) -> (&'static str, String) {
        (ev.kind(), ev.detail().to_string())
    }

    #[test]
    fn each_event_is_what_the_shell_wrote() {
        let role = RoleEvent {
            change: RoleChange::Elected,
            service_name: "127.0.0.1:9000".into(),
            master: Some("127.0.0.1:9000".into()),
            reason: "txn won".into(),
        };
        let req = HeartbeatRequest {
            name: "10.0.0.1:8000".into(),
            incarnation_id: "inc-1".into(),
            load_metrics: LoadMetrics {
                waiting_requests_num: 3,
                gpu_cache_usage_perc: f32::NAN,
            },
            latency_metrics: LatencyMetrics {
                recent_max_ttft: 40,
                recent_max_tbt: 7,
            },
        };
        let load = Some(LoadMetrics {
            waiting_requests_num: 1,
            gpu_cache_usage_perc: 0.5,
        });
        let candidates = [("a:1".to_string(), load), ("b:2".to_string(), None)];
        let names = ["a".to_string()];
        let cases: Vec<(MasterEvent<'_>, &str, Value)> = vec![
            (
                MasterEvent::Started {
                    addr: SocketAddr::from(([127, 0, 0, 1], 9000)),
                },
                "started",
                json!({"addr": "127.0.0.1:9000"}),
            ),
            (
                MasterEvent::Heartbeat {
                    beat: HeartbeatEvent {
                        status: 200,
                        name: Some("10.0.0.1:8000"),
                        fault: false,
                    },
                    request: Some(&req),
                },
                "heartbeat",
                json!({"status": 200, "name": "10.0.0.1:8000", "incarnation": "inc-1",
                    "waiting_requests_num": 3, "gpu_cache_usage_perc": "NaN",
                    "recent_max_ttft": 40, "recent_max_tbt": 7}),
            ),
            (
                MasterEvent::Heartbeat {
                    beat: HeartbeatEvent {
                        status: 503,
                        name: None,
                        fault: true,
                    },
                    request: None,
                },
                "heartbeat",
                json!({"status": 503, "fault": true}),
            ),
            (
                MasterEvent::Token { set: true },
                "token",
                json!({"set": true}),
            ),
            (
                MasterEvent::WatchPause { paused: false },
                "watch_pause",
                json!({"paused": false}),
            ),
            (MasterEvent::Reset, "reset", json!({})),
            (
                MasterEvent::State {
                    name: "n",
                    incarnation: "i",
                    from: "UP",
                    to: "SUSPECT",
                    reason: "missed",
                },
                "state",
                json!({"name": "n", "incarnation": "i", "from": "UP", "to": "SUSPECT", "reason": "missed"}),
            ),
            (
                MasterEvent::StaleDelete {
                    name: "n",
                    deleted: "old",
                    tracked: "new",
                },
                "stale_delete",
                json!({"name": "n", "deleted": "old", "tracked": "new"}),
            ),
            (
                MasterEvent::BadRegistration {
                    name: "n",
                    error: "bad",
                },
                "bad_registration",
                json!({"name": "n", "error": "bad"}),
            ),
            (
                MasterEvent::Probe {
                    name: "n",
                    incarnation: "i",
                    healthy: true,
                },
                "probe",
                json!({"name": "n", "incarnation": "i", "healthy": true}),
            ),
            (
                MasterEvent::Role(&role),
                "elected",
                json!({"service_name": "127.0.0.1:9000", "master": "127.0.0.1:9000", "reason": "txn won"}),
            ),
            (
                MasterEvent::EtcdError {
                    op: "range",
                    error: "boom",
                },
                "etcd_error",
                json!({"op": "range", "error": "boom"}),
            ),
            (
                MasterEvent::EtcdAuthRefused { op: "watch" },
                "etcd_auth_refused",
                json!({"op": "watch"}),
            ),
            (
                MasterEvent::EtcdRevisionReset {
                    seen: 50,
                    revision: 3,
                },
                "etcd_revision_reset",
                json!({"seen_revision": 50, "revision": 3}),
            ),
            (
                MasterEvent::WatchCompacted {
                    from: 51,
                    compact_revision: 55,
                },
                "watch_compacted",
                json!({"from_revision": 51, "compact_revision": 55}),
            ),
            (
                MasterEvent::WatchReconnect {
                    from_revision: 9,
                    reason: "stream ended",
                },
                "watch_reconnect",
                json!({"from_revision": 9, "reason": "stream ended"}),
            ),
            (
                MasterEvent::Restart { relist: true },
                "restart",
                json!({"relist": true}),
            ),
            (
                MasterEvent::Relist {
                    revision: 12,
                    instances: 2,
                },
                "relist",
                json!({"revision": 12, "instances": 2}),
            ),
            (
                MasterEvent::Route {
                    path: "/v1/completions",
                    chosen: None,
                },
                "route",
                json!({"path": "/v1/completions", "chosen": null}),
            ),
            (
                MasterEvent::Route {
                    path: "/v1/completions",
                    chosen: Some(RouteChoice {
                        name: "a:1",
                        load: &load,
                        candidates: &candidates,
                    }),
                },
                "route",
                json!({"path": "/v1/completions", "chosen": "a:1",
                "load": {"waiting_requests_num": 1, "gpu_cache_usage_perc": 0.5},
                "candidates": [
                    {"name": "a:1", "load": {"waiting_requests_num": 1, "gpu_cache_usage_perc": 0.5}},
                    {"name": "b:2", "load": null},
                ]}),
            ),
            (
                MasterEvent::LoadmetricsPublish {
                    put: &names,
                    deleted: &[],
                    skipped: &names,
                    failed: 1,
                },
                "loadmetrics_publish",
                json!({"put": ["a"], "deleted": [], "skipped": ["a"], "failed": 1}),
            ),
        ];
        for (ev, kind, detail) in cases {
            assert_eq!(written(ev), (kind, detail.to_string()), "{ev:?}");
        }
    }
}
