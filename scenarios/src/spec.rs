//! The scenario language: what a TOML scenario file may say, and its validation.
//!
//! Strict on purpose: a misspelled field or an unknown action would otherwise silently
//! make a scenario test nothing. Every struct denies unknown fields; every enum is
//! externally tagged so serde names the allowed variants; [`Scenario::parse`] then checks
//! what serde cannot (instance names exist, awaits have deadlines; each action's family
//! checks its own, e.g. that the etcd kind supports it) and names the file and line of
//! the offending step. Nothing starts until a file passes.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::actions::words::flag;
use crate::capability::{Capabilities, Capability};

pub use crate::actions::Action;
pub use crate::dur::{parse_duration, Dur};
pub use crate::observe::MasterState;
pub use crate::topology::{
    instance_name, Dialect, EtcdNeed, InstanceOverride, MasterTopology, Target, Topology,
};

/// Most instances a scenario may have in real mode (sidecar processes and sockets on
/// one machine).
pub const MAX_REAL_INSTANCES: usize = 500;

/// Most instances a scenario may have at all: the simulation's limit (memory).
pub const MAX_SIM_INSTANCES: usize = 100_000;

/// One scenario file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The scenario's name, as reports and `scenarios list` show it.
    pub name: String,
    /// What the scenario tests, in a sentence or two.
    pub description: String,
    /// Seeds every random choice (jitter, load arrivals, fake vLLM); `--seed` overrides.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// The cluster it runs on (`[topology]`; defaults if absent).
    #[serde(default)]
    pub topology: Topology,
    /// The timeline, in order (`[[step]]` tables).
    #[serde(default, rename = "step")]
    pub steps: Vec<Step>,
    /// Which whole-run properties are checked (`[invariants]`; all on if absent).
    #[serde(default)]
    pub invariants: Invariants,
    /// Capabilities the whole scenario needs beyond the contract (a sidecar whose
    /// profile lacks one skips it); drain actions and an OpenMetrics dialect add theirs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<Capability>,
}

fn default_seed() -> u64 {
    1
}

/// One line of the timeline: wait (for a time and/or a condition), then act or check.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Step {
    /// Label in reports (defaults to a description of the step).
    pub name: Option<String>,
    /// Not before this time since the scenario started.
    pub at: Option<Dur>,
    /// Act only once this holds (fails the step if it does not within `within`).
    pub when: Option<Condition>,
    /// What to do to the cluster: `action = { sidecar_kill = "i0" }`.
    pub action: Option<Action>,
    /// Check that this holds within `within` (a verdict in the report).
    #[serde(rename = "await")]
    pub expect: Option<Condition>,
    /// The condition must then keep holding this long (e.g. "registration kept").
    pub hold: Option<Dur>,
    /// Deadline for `when` / `await`, counted from when the step begins.
    pub within: Option<Dur>,
    /// Capabilities this step needs (a sidecar whose profile lacks one skips the step,
    /// the rest of the scenario runs); a `log` condition adds `log_wording`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requires: Vec<Capability>,
}

impl Step {
    /// Every capability the step needs, declared or implied by its condition.
    pub fn needs(&self) -> Capabilities {
        let mut c: Capabilities = self.requires.iter().copied().collect();
        let reads_log = [&self.when, &self.expect]
            .into_iter()
            .flatten()
            .any(|c| matches!(c, Condition::Log { .. }));
        if reads_log {
            c.insert(Capability::LogWording);
        }
        c
    }
}

/// Something the cluster's observed state can satisfy.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Condition {
    /// The master holds the instance in this state.
    State {
        /// The instance (a name, not `all`).
        instance: Target,
        /// The state wanted: `active`, `lease_lost`, `suspect`, `absent` or `routable`.
        is: MasterState,
    },
    /// The instance's key is in etcd.
    Registered(Target),
    /// The instance's key is not in etcd.
    Unregistered(Target),
    /// Every instance ACTIVE at the master and registered in etcd with the same incarnation.
    AllActive(bool),
    /// Distinct incarnations of the instance seen in etcd so far (re-registrations), at
    /// least and/or at most this many.
    Incarnations {
        /// The instance (a name, not `all`).
        instance: Target,
        /// At least this many incarnations.
        #[serde(default)]
        at_least: Option<usize>,
        /// At most this many incarnations.
        #[serde(default)]
        at_most: Option<usize>,
    },
    /// The master accepted at least `at_least` (default 1) heartbeats from the instance since
    /// the step began, optionally with at least `min_waiting` waiting requests.
    Heartbeat {
        /// The instance (a name, not `all`).
        instance: Target,
        /// Heartbeats accepted since the step began, at least (default 1).
        #[serde(default)]
        at_least: Option<u64>,
        /// A heartbeat since the step began reported at least this many waiting requests.
        #[serde(default)]
        min_waiting: Option<u64>,
        /// A heartbeat since the step began reported at most this many waiting requests.
        #[serde(default)]
        max_waiting: Option<u64>,
    },
    /// The master answered this HTTP status to the instance's heartbeats at least once since
    /// the step began.
    HeartbeatStatus {
        /// The instance (a name, not `all`).
        instance: Target,
        /// The HTTP status, e.g. 409.
        status: u16,
    },
    /// The sidecar process exited (with this code, if given).
    Exited {
        /// The instance (a name, not `all`).
        instance: Target,
        /// The exit code it must have exited with (`None`: any).
        #[serde(default)]
        code: Option<i32>,
    },
    /// A sidecar log line since the step began contains this text (case-insensitive).
    Log {
        /// The instance (a name, not `all`).
        instance: Target,
        /// The text looked for, case-insensitive, in the line's JSON.
        contains: String,
    },
    /// A master replica other than the one elected when the step began is elected (the
    /// MASTER key names it): `new_master = true`.
    NewMaster(bool),
    /// The replica elected now accepted at least `at_least` heartbeats (of any instance)
    /// since the step began: `master_heartbeats = { at_least = 4 }`.
    MasterHeartbeats {
        /// Heartbeats accepted since the step began, at least.
        at_least: u64,
    },
    /// A LOADMETRICS key was written to etcd since the step began (the master
    /// published): `loadmetrics_written = true`.
    LoadmetricsWritten(bool),
    /// Of the load generator's last routed requests, at most this share went to the instance.
    RoutedShare {
        /// The instance (a name, not `all`).
        instance: Target,
        /// The largest share allowed, from 0.0 to 1.0.
        at_most: f64,
        /// How many of the latest routed requests are counted (default 20).
        #[serde(default = "default_routed_window")]
        last: usize,
    },
}

fn default_routed_window() -> usize {
    20
}

/// Properties checked over the whole run, each on by default.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Invariants {
    /// The master never accepts (200) a heartbeat whose incarnation is not the one etcd
    /// and the master track.
    pub no_stale_heartbeat_accepted: bool,
    /// Whenever an instance's vLLM was healthy, its sidecar running and nothing disturbed
    /// its registration path for `registered_grace`, its key is in etcd.
    pub registered_when_healthy: bool,
    /// Default: 2 keepalive intervals + 2 s.
    pub registered_grace: Option<Dur>,
    /// Never two incarnations of one instance routable: the master's incarnation matches
    /// etcd's whenever both know the instance (after `incarnation_grace`).
    pub single_incarnation: bool,
    /// How long etcd and the master may disagree on an instance's incarnation before it counts
    /// (default 1.5 s).
    pub incarnation_grace: Dur,
    /// No heartbeat answered 401 while the sidecar's token matched the master's.
    pub no_401_when_tokens_match: bool,
    /// Every heartbeat the master stored has finite, in-range load metrics.
    pub heartbeats_sane: bool,
    /// A gracefully stopped or drained sidecar's key is gone within a third of the
    /// lease TTL (revoked, not left to expire), unless a fault touched the instance
    /// meanwhile.
    pub revoked_on_stop: bool,
    /// An incarnation the master answered 409 is not posted again and again: the
    /// sidecar registers a new one (at most 3 conflicts per incarnation in etcd).
    pub conflict_ends_incarnation: bool,
    /// With several master replicas, heartbeats go to the elected one: once a
    /// follow window (election TTL + a heartbeat interval + 1 s) has passed since the
    /// MASTER key last named another replica, no other replica accepts a heartbeat.
    /// Judged only with `topology.master.replicas` of 2 or more.
    pub heartbeats_to_elected_master: bool,
    /// After each disturbance ends, every instance it touched whose vLLM is healthy is
    /// back (ACTIVE, one incarnation, heartbeating) within a bound made of its timers
    /// (`crate::recovery`).
    pub recovers_within_bound: bool,
    /// Capabilities an invariant needs (`{ revoked_on_stop = ["drain"] }`): without
    /// them it is skipped, not judged.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub requires: BTreeMap<String, Vec<Capability>>,
}

impl Invariants {
    /// Every invariant's name, as `[invariants]` switches it.
    pub const NAMES: [&'static str; 9] = [
        "registered_when_healthy",
        "single_incarnation",
        "no_stale_heartbeat_accepted",
        "no_401_when_tokens_match",
        "heartbeats_sane",
        "revoked_on_stop",
        "conflict_ends_incarnation",
        "heartbeats_to_elected_master",
        "recovers_within_bound",
    ];

    /// The capabilities invariant `name` needs.
    pub fn needs(&self, name: &str) -> Capabilities {
        self.requires
            .get(name)
            .map(|c| c.iter().copied().collect())
            .unwrap_or_default()
    }
}

impl Default for Invariants {
    fn default() -> Self {
        Invariants {
            no_stale_heartbeat_accepted: true,
            registered_when_healthy: true,
            registered_grace: None,
            single_incarnation: true,
            incarnation_grace: Dur::ms(1500),
            no_401_when_tokens_match: true,
            heartbeats_sane: true,
            revoked_on_stop: true,
            conflict_ends_incarnation: true,
            heartbeats_to_elected_master: true,
            recovers_within_bound: true,
            requires: BTreeMap::new(),
        }
    }
}

/// A scenario file that failed to parse or validate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// The file, as named to [`Scenario::parse`].
    pub file: String,
    /// The 1-based line of the error (or of the offending step), if known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file, l, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for SpecError {}

impl Scenario {
    /// Every capability the scenario as a whole needs: declared, or implied by a drain
    /// action or an OpenMetrics dialect.
    pub fn needs(&self) -> Capabilities {
        use crate::actions::sidecar::SidecarAction::{Drain, Undrain};
        let mut c: Capabilities = self.requires.iter().copied().collect();
        let drains = self
            .steps
            .iter()
            .any(|s| matches!(s.action, Some(Action::Sidecar(Drain(_) | Undrain(_)))));
        if drains {
            c.insert(Capability::Drain);
        }
        let t = &self.topology;
        let dialects =
            std::iter::once(t.dialect).chain(t.overrides.iter().filter_map(|o| o.dialect));
        if dialects.into_iter().any(|d| d == Dialect::OpenMetrics) {
            c.insert(Capability::Openmetrics);
        }
        c
    }

    /// Whether a step waits on the event timeline (a log line, a heartbeat status)
    /// rather than on the sampled cluster state alone.
    pub fn reads_events(&self) -> bool {
        self.steps
            .iter()
            .flat_map(|s| [&s.when, &s.expect])
            .flatten()
            .any(|c| matches!(c, Condition::Log { .. } | Condition::HeartbeatStatus { .. }))
    }

    /// Parse and validate one scenario; `file` names it in errors.
    pub fn parse(file: &str, text: &str) -> Result<Scenario, SpecError> {
        let sc: Scenario = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start));
            SpecError {
                file: file.to_string(),
                line,
                message: e.message().trim().to_string(),
            }
        })?;
        sc.validate().map_err(|(step, message)| SpecError {
            file: file.to_string(),
            line: step.and_then(|i| step_line(text, i)),
            message: match step {
                Some(i) => format!("step {}: {message}", i + 1),
                None => message,
            },
        })?;
        Ok(sc)
    }

    /// The instance names of its topology: `i0`, `i1`, … in order.
    pub fn instance_names(&self) -> Vec<String> {
        self.topology.instance_names()
    }

    /// The invariant grace for registration: 2 keepalive intervals + 2 s unless set (a
    /// healthy sidecar re-registers at its next keepalive tick; the rest is slack for a
    /// loaded machine).
    pub fn registered_grace(&self) -> Duration {
        self.invariants
            .registered_grace
            .map(|d| d.0)
            .unwrap_or_else(|| self.topology.keepalive_interval.0 * 2 + Duration::from_secs(2))
    }

    /// Checks what serde cannot: an error of the file as a whole, or of step `i`.
    fn validate(&self) -> Result<(), (Option<usize>, String)> {
        self.check_file().map_err(|m| (None, m))?;
        for (i, step) in self.steps.iter().enumerate() {
            self.check_step(step).map_err(|m| (Some(i), m))?;
        }
        Ok(())
    }

    fn check_file(&self) -> Result<(), String> {
        let t = &self.topology;
        if self.name.trim().is_empty() {
            return Err("`name` is empty".into());
        }
        let names = Invariants::NAMES;
        if let Some(k) = self
            .invariants
            .requires
            .keys()
            .find(|k| !names.contains(&k.as_str()))
        {
            let known = names.join(", ");
            return Err(format!(
                "[invariants] requires: `{k}` is no invariant (known: {known})"
            ));
        }
        let n = t.instances;
        if !(1..=MAX_SIM_INSTANCES).contains(&n) {
            return Err(format!("topology.instances = {n} (allowed 1..={MAX_SIM_INSTANCES}; real mode runs at most {MAX_REAL_INSTANCES})"));
        }
        let n = t.etcd_endpoints;
        if !(1..=4).contains(&n) {
            return Err(format!("topology.etcd_endpoints = {n} (allowed 1..=4)"));
        }
        if t.lease_ttl == 0 {
            return Err("topology.lease_ttl must be at least 1 (seconds)".into());
        }
        if t.keepalive_interval.0.is_zero() || t.heartbeat_interval.0.is_zero() {
            return Err("topology intervals must be > 0".into());
        }
        if !(1..=5).contains(&t.master.replicas) {
            return Err("topology.master.replicas must be 1 to 5".into());
        }
        if t.master.replicas > 1 && t.master.election_ttl.0 < Duration::from_secs(1) {
            return Err(
                "topology.master.election_ttl must be at least 1s (etcd's TTLs are whole seconds)"
                    .into(),
            );
        }
        let it = &t.instance_type;
        if !["DEFAULT", "PREFILL", "DECODE", "MIX"].contains(&it.as_str()) {
            return Err(format!(
                "topology.instance_type `{it}`: use DEFAULT, PREFILL, DECODE or MIX"
            ));
        }
        if t.etcd_user.is_some() != t.etcd_password.is_some() {
            return Err("topology.etcd_user and etcd_password go together".into());
        }
        if (t.etcd_user.is_some() || t.etcd_token_ttl.is_some()) && t.etcd != EtcdNeed::Fake {
            return Err("etcd auth settings need topology.etcd = \"fake\"".into());
        }
        let names = self.instance_names();
        match t.overrides.iter().find(|o| !names.contains(&o.name)) {
            Some(o) => Err(format!(
                "[[topology.instance]] `{}` is not an instance (have i0..i{})",
                o.name,
                t.instances - 1
            )),
            None => Ok(()),
        }
    }

    fn check_step(&self, step: &Step) -> Result<(), String> {
        let (acts, awaits) = (step.action.is_some(), step.expect.is_some());
        let waits = awaits || step.when.is_some();
        let shape = if acts && awaits {
            Err("a step has either `action` or `await`, not both")
        } else if !acts && !awaits {
            Err("a step needs `action` or `await`")
        } else if step.when.is_some() && !acts {
            Err("`when` goes with an `action` (use `await` to check a condition)")
        } else if waits && step.within.is_none() {
            Err("`await` and `when` need a deadline: `within = \"3s\"`")
        } else if !waits && step.within.is_some() {
            Err("`within` without `await` or `when`")
        } else if step.hold.is_some() && !awaits {
            Err("`hold` goes with `await`")
        } else {
            Ok(())
        };
        shape.map_err(String::from)?;
        for c in step.expect.iter().chain(&step.when) {
            self.check_condition(c)?;
        }
        step.action
            .as_ref()
            .map_or(Ok(()), |a| a.check(&self.topology))
    }

    fn check_condition(&self, c: &Condition) -> Result<(), String> {
        match c {
            Condition::Incarnations {
                at_least: None,
                at_most: None,
                ..
            } => Err("`incarnations` needs `at_least` or `at_most`".into()),
            Condition::AllActive(false) => {
                Err("`all_active = false` means nothing; use `all_active = true`".into())
            }
            Condition::AllActive(true) => Ok(()),
            Condition::NewMaster(b) => flag(*b, "new_master"),
            Condition::LoadmetricsWritten(b) => flag(*b, "loadmetrics_written"),
            Condition::MasterHeartbeats { .. } if self.topology.master.replicas < 2 => {
                Err("`master_heartbeats` needs `topology.master.replicas` of 2 or more".into())
            }
            Condition::MasterHeartbeats { .. } => Ok(()),
            _ => c
                .instance()
                .map_or(Ok(()), |i| self.topology.check_target(i, false)),
        }
    }
}

impl Condition {
    /// The instance the condition is about (`None`: the cluster or the master as a whole).
    pub fn instance(&self) -> Option<&str> {
        match self {
            Condition::State { instance, .. }
            | Condition::Registered(instance)
            | Condition::Unregistered(instance)
            | Condition::Incarnations { instance, .. }
            | Condition::Heartbeat { instance, .. }
            | Condition::HeartbeatStatus { instance, .. }
            | Condition::Exited { instance, .. }
            | Condition::Log { instance, .. }
            | Condition::RoutedShare { instance, .. } => Some(instance),
            Condition::AllActive(_)
            | Condition::NewMaster(_)
            | Condition::MasterHeartbeats { .. }
            | Condition::LoadmetricsWritten(_) => None,
        }
    }
}

/// 1-based line of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset.min(text.len()))
        .map(|t| t.matches('\n').count() + 1)
        .unwrap_or(1)
}

/// 1-based line of the `idx`-th `[[step]]` header.
fn step_line(text: &str, idx: usize) -> Option<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.trim_start().starts_with("[[step]]"))
        .nth(idx)
        .map(|(n, _)| n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::vllm::{VllmAction, VllmFault};

    const OK: &str = r#"
name = "t"
description = "d"
[topology]
instances = 2
[[step]]
await = { state = { instance = "i1", is = "active" } }
within = "3s"
[[step]]
at = "1s"
action = { link = { link = "sidecar_etcd", instance = "i0", fault = { latency = { ms = 100, jitter_ms = 20 } }, duration = "2s" } }
[[step]]
action = { vllm_fault = { instance = "i0", fault = "metrics_nonfinite" } }
"#;

    #[test]
    fn action_labels_keep_inner_braces() {
        let text = r#"
name = "t"
description = "d"
[topology]
etcd = "fake"
[[step]]
action = { etcd_lose_data = { reset_revision = true } }
"#;
        let sc = Scenario::parse("t.toml", text).unwrap();
        let action = sc.steps[0].action.as_ref().unwrap();
        assert_eq!(action.describe(), "etcd_lose_data {reset_revision:true}");
    }

    #[test]
    fn parses_a_good_file() {
        let sc = Scenario::parse("ok.toml", OK).unwrap();
        assert_eq!(sc.steps.len(), 3);
        assert_eq!(sc.steps[1].at, Some(Dur::ms(1000)));
        assert!(matches!(
            sc.steps[2].action,
            Some(Action::Vllm(VllmAction::Fault {
                fault: VllmFault::MetricsNonfinite,
                ..
            }))
        ));
    }

    #[test]
    fn misspelled_field_names_file_and_line() {
        let bad = OK.replace("within = \"3s\"", "withn = \"3s\"");
        let e = Scenario::parse("bad.toml", &bad).unwrap_err();
        assert_eq!(e.file, "bad.toml");
        assert_eq!(e.line, Some(8), "{e}");
        assert!(e.message.contains("withn"), "{e}");
    }

    #[test]
    fn unknown_action_is_an_error() {
        let bad = OK.replace("vllm_fault", "vllm_explode");
        let e = Scenario::parse("bad.toml", &bad).unwrap_err();
        assert!(e.message.contains("vllm_explode"), "{e}");
        assert_eq!(e.line, Some(13), "{e}");
    }

    #[test]
    fn unknown_instance_names_the_step_line() {
        let bad = OK.replace("\"i1\"", "\"i7\"");
        let e = Scenario::parse("bad.toml", &bad).unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.message.contains("i7"), "{e}");
    }

    #[test]
    fn await_needs_a_deadline_and_durations_need_units() {
        let bad = OK.replace("within = \"3s\"\n", "");
        assert!(Scenario::parse("b", &bad)
            .unwrap_err()
            .message
            .contains("deadline"));
        let bad = OK.replace("\"3s\"", "\"3\"");
        let e = Scenario::parse("b", &bad).unwrap_err();
        assert!(e.message.contains("unit"), "{e}");
    }

    #[test]
    fn fake_only_actions_are_checked() {
        let bad = format!("{OK}[[step]]\naction = {{ etcd_lose_data = {{}} }}\n");
        let e = Scenario::parse("b", &bad).unwrap_err();
        assert!(e.message.contains("fake"), "{e}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("300ms").unwrap(), Duration::from_millis(300));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("1h").is_err());
    }
}
