//! A random cluster and fault schedule as data, and its rendering as an ordinary
//! scenario file.
//!
//! Why data and not `spec::Scenario`: the search and the shrinker edit schedules (drop a
//! fault, drop an instance and renumber the rest, shorten the run, reset a timer), and
//! every result must be a file a person can read and replay. So a schedule keeps its
//! actions in the scenario language's own TOML/JSON shape (`{ vllm_health = { instance
//! = "i0", health = "down" } }`) and is turned into a `Scenario` only through
//! [`Schedule::to_toml`] and `Scenario::parse`: whatever the runner accepts from a file
//! is exactly what the explorer runs.

use std::fmt::Write as _;

use serde_json::Value;

/// The cluster of a schedule: the sidecar's and the fakes' settings that vary.
#[derive(Clone, Debug, PartialEq)]
pub struct Topo {
    /// Instances, `i0` upward.
    pub instances: usize,
    /// The sidecars' etcd lease TTL, in seconds.
    pub lease_ttl: u64,
    /// The sidecars' lease keepalive interval, in ms.
    pub keepalive_ms: u64,
    /// The sidecars' heartbeat interval to the master, in ms.
    pub heartbeat_ms: u64,
    /// The sidecars' timeout for one health probe (also a scrape, a heartbeat), in ms.
    pub health_timeout_ms: u64,
    /// Failed health probes in a row before a sidecar revokes its lease.
    pub health_fail_threshold: u32,
    /// The sidecars' timeout for one etcd request, in ms.
    pub etcd_timeout_ms: u64,
    /// The master's token (also every sidecar's); `None`: no token.
    pub token: Option<String>,
    /// Metrics dialect of the fake vLLMs (`v0_34`, `compact`, …).
    pub dialect: String,
    /// KV cache size of each fake vLLM, in tokens (`None`: mock-vllm's default, so big
    /// that load barely shows in the cache usage).
    pub kv_capacity_tokens: Option<u64>,
    /// One-way delay of every healthy simulated link, in ms (`None`: the simulator's
    /// 0.2 ms): exchanges that take time are what lets a fault land mid-registration.
    pub link_delay_ms: Option<u64>,
    /// etcd endpoints each sidecar is given (each its own link to the one etcd).
    pub etcd_endpoints: usize,
    /// etcd auth on, with this simple-token idle TTL in ms (`None`: auth off).
    pub etcd_token_ttl_ms: Option<u64>,
    /// xllm-service replicas electing a master (1: one master); with several, the
    /// sidecars follow the elected one.
    pub master_replicas: usize,
}

/// The etcd user and password of a schedule with etcd auth on.
pub const ETCD_USER: &str = "xllm";
/// The etcd password of a schedule with etcd auth on (user [`ETCD_USER`]).
pub const ETCD_PASSWORD: &str = "pw";

impl Topo {
    /// The `[topology]` keys a schedule sets when they differ from the library's
    /// defaults, as TOML values (`None`: not set), in the order the file writes them.
    fn settings(&self) -> [(&'static str, Option<String>); 10] {
        let ms = |v: u64| format!("\"{}\"", dur(v));
        [
            ("lease_ttl", Some(self.lease_ttl.to_string())),
            ("keepalive_interval", Some(ms(self.keepalive_ms))),
            ("heartbeat_interval", Some(ms(self.heartbeat_ms))),
            ("health_timeout", Some(ms(self.health_timeout_ms))),
            (
                "health_fail_threshold",
                Some(self.health_fail_threshold.to_string()),
            ),
            ("etcd_timeout", Some(ms(self.etcd_timeout_ms))),
            ("etcd_endpoints", Some(self.etcd_endpoints.to_string())),
            ("token", self.token.as_deref().map(quote)),
            (
                "kv_capacity_tokens",
                self.kv_capacity_tokens.map(|k| k.to_string()),
            ),
            ("link_delay", self.link_delay_ms.map(ms)),
        ]
    }

    /// The library's defaults (`spec::Topology::default()`), the shrinker's target.
    pub fn library_default(instances: usize) -> Topo {
        let d = crate::spec::Topology::default();
        Topo {
            instances,
            lease_ttl: d.lease_ttl,
            keepalive_ms: d.keepalive_interval.as_ms(),
            heartbeat_ms: d.heartbeat_interval.as_ms(),
            health_timeout_ms: d.health_timeout.as_ms(),
            health_fail_threshold: d.health_fail_threshold,
            etcd_timeout_ms: d.etcd_timeout.as_ms(),
            token: d.token,
            dialect: "v0_34".into(),
            kv_capacity_tokens: d.kv_capacity_tokens,
            link_delay_ms: None,
            etcd_endpoints: d.etcd_endpoints,
            etcd_token_ttl_ms: None,
            master_replicas: 1,
        }
    }
}

/// One fault: an action at a time, and the action that ends it, if it needs one (vLLM
/// health back up, a crashed vLLM restarted, a stopped sidecar started).
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// When the fault's action runs, in ms since the start.
    pub at_ms: u64,
    /// The action as the scenario language writes it: `{"<kind>": …}`.
    pub action: Value,
    /// The action that ends the fault and when, in ms since the start (`None`: it needs none).
    pub end: Option<(u64, Value)>,
}

impl Fault {
    /// The action's kind: its variant name (`vllm_health`, `link`, …).
    pub fn kind(&self) -> &str {
        let keys = self.action.as_object().and_then(|o| o.keys().next());
        keys.map_or("", String::as_str)
    }

    /// When the fault is over (its end action, or its `duration`).
    pub fn end_ms(&self) -> u64 {
        match &self.end {
            Some((t, _)) => *t,
            None => self.at_ms + duration_ms(&self.action).unwrap_or(0),
        }
    }

    /// The instances it names (`i0`, …; not `all`).
    pub fn instances(&self) -> Vec<usize> {
        let mut out: Vec<usize> = std::iter::once(&self.action)
            .chain(self.end.as_ref().map(|(_, a)| a))
            .filter_map(target)
            .filter_map(|t| instance_index(&t))
            .collect();
        out.dedup();
        out
    }

    /// The same fault with `edit` applied to its action and its end action (`None` from
    /// `edit`: drop the fault).
    fn edited(&self, edit: impl Fn(&Value) -> Option<Value>) -> Option<Fault> {
        let end = match &self.end {
            Some((t, a)) => Some((*t, edit(a)?)),
            None => None,
        };
        Some(Fault {
            at_ms: self.at_ms,
            action: edit(&self.action)?,
            end,
        })
    }
}

/// A whole schedule: what `explore` runs for one seed.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// The seed it was drawn from; also the scenario seed (the simulation's).
    pub seed: u64,
    /// The cluster it runs on.
    pub topo: Topo,
    /// The faults, by start time.
    pub faults: Vec<Fault>,
    /// How long the run lasts, in ms (the last step, `load_off`, runs then).
    pub duration_ms: u64,
    /// Under a swarm draw, the kinds the faults were drawn from and their intensities
    /// (kept through shrinking: it says how the seed was drawn, not what is left).
    pub mix: Option<super::swarm::Mix>,
}

/// How big a schedule is, for reports and the shrinker's goal.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Size {
    /// Number of faults.
    pub faults: usize,
    /// Number of instances.
    pub instances: usize,
    /// Length of the run, in ms.
    pub duration_ms: u64,
}

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} fault(s), {} instance(s), {}",
            self.faults,
            self.instances,
            dur(self.duration_ms)
        )
    }
}

/// The action kinds whose value is just the instance name.
const BARE_TARGET: [&str; 10] = [
    "sidecar_stop",
    "sidecar_kill",
    "sidecar_drain",
    "sidecar_undrain",
    "vllm_crash",
    "vllm_restart",
    "vllm_counter_reset",
    "vllm_wake",
    "vllm_clear_faults",
    "etcd_expire_lease",
];

/// The instance (or `all`) an action targets, if it targets one.
fn target(action: &Value) -> Option<String> {
    let (kind, inner) = action.as_object()?.iter().next()?;
    if BARE_TARGET.contains(&kind.as_str()) {
        return inner.as_str().map(str::to_string);
    }
    inner.get("instance")?.as_str().map(str::to_string)
}

fn instance_index(name: &str) -> Option<usize> {
    name.strip_prefix('i')?.parse().ok()
}

/// Rename the instance an action targets (`None` from `rename`: drop the action).
fn retarget(action: &Value, rename: &dyn Fn(usize) -> Option<usize>) -> Option<Value> {
    let Some(i) = target(action).and_then(|t| instance_index(&t)) else {
        return Some(action.clone()); // no target, or `all`
    };
    let new = Value::String(format!("i{}", rename(i)?));
    let mut out = action.clone();
    let (kind, inner) = out.as_object_mut()?.iter_mut().next()?;
    if BARE_TARGET.contains(&kind.as_str()) {
        *inner = new;
    } else if let Some(obj) = inner.as_object_mut() {
        obj.insert("instance".into(), new);
    }
    Some(out)
}

/// The `duration` field of an action, in ms.
fn duration_ms(action: &Value) -> Option<u64> {
    let (_, inner) = action.as_object()?.iter().next()?;
    let d = inner.get("duration")?.as_str()?;
    crate::spec::parse_duration(d)
        .ok()
        .map(|d| d.as_millis() as u64)
}

impl Schedule {
    /// How big it is: faults, instances, length.
    pub fn size(&self) -> Size {
        Size {
            faults: self.faults.len(),
            instances: self.topo.instances,
            duration_ms: self.duration_ms,
        }
    }

    /// The scenario name: `explore-<seed>`.
    pub fn name(&self) -> String {
        format!("explore-{}", self.seed)
    }

    /// Keep only the instances in `keep` (old indexes, in the order given), renumbered
    /// `i0, i1, …`; faults on the others are dropped.
    pub fn keep_instances(&self, keep: &[usize]) -> Schedule {
        let rename = |i: usize| keep.iter().position(|k| *k == i);
        let mut s = self.edit_faults(|a| retarget(a, &rename));
        s.topo.instances = keep.len().max(1);
        s
    }

    /// The same schedule with one etcd endpoint: link faults aimed at one endpoint then
    /// hit the only one.
    pub fn single_etcd_endpoint(&self) -> Schedule {
        let mut s = self.edit_faults(|a| {
            let mut a = a.clone();
            if let Some(link) = a.get_mut("link").and_then(Value::as_object_mut) {
                link.remove("endpoint");
            }
            Some(a)
        });
        s.topo.etcd_endpoints = 1;
        s
    }

    /// The same schedule with `edit` applied to each fault's actions (see
    /// [`Fault::edited`]).
    fn edit_faults(&self, edit: impl Fn(&Value) -> Option<Value>) -> Schedule {
        let faults = self.faults.iter().filter_map(|f| f.edited(&edit)).collect();
        Schedule {
            faults,
            ..self.clone()
        }
    }

    /// Every action with its time, in the order the runner plays them.
    fn timeline(&self) -> Vec<(u64, &Value)> {
        let mut steps: Vec<(u64, &Value)> = Vec::new();
        for f in &self.faults {
            steps.push((f.at_ms, &f.action));
            steps.extend(f.end.as_ref().map(|(t, a)| (*t, a)));
        }
        // Stable: actions at the same time keep the schedule's order.
        steps.sort_by_key(|(t, _)| *t);
        steps
    }

    /// The scenario file: `header` lines become comments at the top.
    pub fn to_toml(&self, description: &str, header: &[String]) -> String {
        let mut s = String::new();
        for line in header {
            let _ = writeln!(s, "# {line}");
        }
        if !header.is_empty() {
            s.push('\n');
        }
        let _ = writeln!(s, "name = {}", quote(&self.name()));
        let _ = writeln!(s, "description = {}", quote(description));
        let _ = writeln!(s, "seed = {}\n", self.seed);
        s.push_str(&self.topology_toml());
        for (t, action) in self.timeline() {
            let _ = writeln!(
                s,
                "\n[[step]]\nat = \"{}\"\naction = {}",
                dur(t),
                inline(action)
            );
        }
        let _ = writeln!(
            s,
            "\n[[step]]\nname = \"end of the run\"\nat = \"{}\"\naction = {{ load_off = true }}",
            dur(self.duration_ms)
        );
        s
    }

    /// `[topology]`, writing only what differs from the library's defaults.
    fn topology_toml(&self) -> String {
        let t = &self.topo;
        let mut s = format!(
            "[topology]\ninstances = {}\netcd = \"fake\"\ndialect = {}\n",
            t.instances,
            quote(&t.dialect)
        );
        let defaults = Topo::library_default(t.instances).settings();
        for ((name, v), (_, dv)) in t.settings().into_iter().zip(defaults) {
            if let Some(v) = v.filter(|v| Some(v) != dv.as_ref()) {
                let _ = writeln!(s, "{name} = {v}");
            }
        }
        if let Some(ms) = t.etcd_token_ttl_ms {
            let _ = writeln!(
                s,
                "etcd_user = {}\netcd_password = {}\netcd_token_ttl = \"{}\"",
                quote(ETCD_USER),
                quote(ETCD_PASSWORD),
                dur(ms)
            );
        }
        if t.master_replicas > 1 {
            // The table comes last: every key after it would be the master's.
            let _ = writeln!(
                s,
                "sidecar_args = [\"--follow-master\", \"--master-read-interval\", \"2\"]\n\n[topology.master]\nreplicas = {}",
                t.master_replicas
            );
        }
        s
    }
}

/// A duration as the scenario language writes it: `"12s"`, `"1500ms"`.
pub fn dur(ms: u64) -> String {
    crate::dur::Dur::ms(ms).to_string()
}

/// A TOML basic string.
fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// A JSON value as a TOML inline value (objects as inline tables).
pub fn inline(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let fields: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("{k} = {}", inline(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(inline).collect();
            format!("[{}]", items.join(", "))
        }
        Value::String(s) => quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => "\"\"".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Scenario;
    use serde_json::json;

    fn schedule() -> Schedule {
        Schedule {
            seed: 7,
            topo: Topo {
                instances: 3,
                token: Some("tok-a".into()),
                dialect: "compact".into(),
                lease_ttl: 4,
                ..Topo::library_default(3)
            },
            faults: vec![
                Fault {
                    at_ms: 5000,
                    action: json!({"vllm_health": {"instance": "i2", "health": "down"}}),
                    end: Some((
                        9500,
                        json!({"vllm_health": {"instance": "i2", "health": "up"}}),
                    )),
                },
                Fault {
                    at_ms: 1000,
                    action: json!({"link": {"link": "sidecar_etcd", "instance": "i1",
                        "fault": {"latency": {"ms": 300, "jitter_ms": 20}}, "duration": "2s"}}),
                    end: None,
                },
                Fault {
                    at_ms: 2000,
                    action: json!({"sidecar_kill": "i0"}),
                    end: Some((3000, json!({"sidecar_start": {"instance": "i0"}}))),
                },
                Fault {
                    at_ms: 2500,
                    action: json!({"etcd_lose_data": {"reset_revision": true}}),
                    end: None,
                },
            ],
            duration_ms: 20_000,
            mix: None,
        }
    }

    #[test]
    fn renders_a_file_the_scenario_language_accepts() {
        let s = schedule();
        let text = s.to_toml("found by explore", &["a comment".into()]);
        let sc = Scenario::parse("x.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(sc.topology.instances, 3);
        assert_eq!(sc.topology.lease_ttl, 4);
        assert_eq!(sc.topology.token.as_deref(), Some("tok-a"));
        assert_eq!(sc.seed, 7);
        // 4 faults, 2 of them with an end, and the end-of-run step; in time order.
        assert_eq!(sc.steps.len(), 7);
        let times: Vec<u64> = sc.steps.iter().map(|s| s.at.unwrap().as_ms()).collect();
        assert_eq!(times, vec![1000, 2000, 2500, 3000, 5000, 9500, 20_000]);
        assert!(text.starts_with("# a comment\n"));
    }

    #[test]
    fn dropping_an_instance_renumbers_the_rest_and_drops_its_faults() {
        let s = schedule().keep_instances(&[2, 1]);
        assert_eq!(s.topo.instances, 2);
        // The kill of i0 is gone; i2 became i0, i1 stayed i1.
        assert_eq!(s.faults.len(), 3);
        assert_eq!(s.faults[0].instances(), vec![0]);
        assert_eq!(s.faults[1].instances(), vec![1]);
        assert_eq!(s.faults[2].kind(), "etcd_lose_data");
        let text = s.to_toml("d", &[]);
        Scenario::parse("x.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    }

    #[test]
    fn a_fault_ends_at_its_end_action_or_after_its_duration() {
        let s = schedule();
        assert_eq!(s.faults[0].end_ms(), 9500);
        assert_eq!(s.faults[1].end_ms(), 3000);
        assert_eq!(s.faults[3].end_ms(), 2500);
        assert_eq!(s.faults[1].kind(), "link");
    }
}
