//! Actions: what a scenario's step does to the cluster, one module per family.
//!
//! Adding an action is one place: its family's module says how it is written (its serde
//! enum), checked against the topology, described in reports, done on a [`Cluster`]
//! (one `apply` for both modes, through the cluster's verbs), and which fault episodes
//! it opens or closes. This module holds the [`Action`] a step carries and dispatches
//! each of those to the family, once.
//!
//! The layering keeps imports one-way: families use the cluster trait, the topology and
//! the episode book; none of those knows the families. The scenario file
//! ([`crate::spec`]) and the engine sit above.

pub mod etcd;
pub mod link;
pub mod load;
pub mod master;
mod parse;
pub mod pause;
pub mod sidecar;
pub mod vllm;
pub(crate) mod words;

use std::fmt;
use std::sync::OnceLock;

use serde::de::{self, DeserializeOwned, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::cluster::{Arming, Cluster};
use crate::dur::Dur;
use crate::episode::EpisodeBook;
use crate::topology::Topology;
use etcd::EtcdAction;
use link::LinkAction;
use load::LoadAction;
use master::MasterAction;
use pause::PauseAction;
use sidecar::SidecarAction;
use vllm::VllmAction;

/// `$body` with `$a` bound to the family's own action, whichever the family: the one
/// place an [`Action`] is matched family by family.
macro_rules! each_family {
    ($action:expr, $a:ident => $body:expr) => {
        match $action {
            Action::Sidecar($a) => $body,
            Action::Vllm($a) => $body,
            Action::Etcd($a) => $body,
            Action::Master($a) => $body,
            Action::Link($a) => $body,
            Action::Pause($a) => $body,
            Action::Load($a) => $body,
        }
    };
}

/// Something the runner does to the cluster. Written with one key naming the action,
/// whatever its family: `action = { vllm_health = { instance = "i0", health = "down" } }`.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Action {
    /// The sidecar family: `sidecar_start`, `sidecar_stop`, `sidecar_kill`, `sidecar_drain`,
    /// `sidecar_undrain`.
    Sidecar(SidecarAction),
    /// The vLLM family: `vllm_health`, `vllm_fault`, `vllm_clear_faults`, `vllm_crash`,
    /// `vllm_restart`, `vllm_counter_reset`.
    Vllm(VllmAction),
    /// The etcd family: `etcd_fault`, `etcd_clear_faults`, `etcd_release_hung`,
    /// `etcd_expire_lease`, `etcd_lose_data`, `etcd_kill`, `etcd_restart`.
    Etcd(EtcdAction),
    /// The master family: `master_restart`, `master_kill`, `master_token`,
    /// `master_fault`, `master_clear_faults`.
    Master(MasterAction),
    /// A link fault: `link`.
    Link(LinkAction),
    /// A stopped process: `pause`, `throttle`.
    Pause(PauseAction),
    /// The load family: `load`, `load_off`.
    Load(LoadAction),
}

impl Action {
    /// What serde's "unknown variant ..., expected one of" lists: every action's key,
    /// family by family.
    pub fn keys() -> &'static [&'static str] {
        static KEYS: OnceLock<Vec<&'static str>> = OnceLock::new();
        KEYS.get_or_init(|| {
            [
                parse::keys::<SidecarAction>(),
                parse::keys::<VllmAction>(),
                parse::keys::<EtcdAction>(),
                parse::keys::<MasterAction>(),
                parse::keys::<LinkAction>(),
                parse::keys::<PauseAction>(),
                parse::keys::<LoadAction>(),
            ]
            .concat()
        })
    }

    /// What the scenario file cannot say by its syntax alone: the instance exists, the
    /// etcd kind supports the action, the values make sense.
    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        each_family!(self, a => a.check(topo))
    }

    /// A short human description, for reports: `link sidecar_etcd i0: blackhole for 4s`.
    pub fn describe(&self) -> String {
        each_family!(self, a => a.describe())
    }

    /// The instance the action acts on (a name or `all`); `None`: the cluster as a whole
    /// (etcd, the master, routed load).
    pub fn instance(&self) -> Option<&str> {
        each_family!(self, a => a.instance())
    }

    /// Why the simulation cannot do this action, if it cannot (the scenario is skipped
    /// with that reason).
    pub fn sim_unsupported(&self) -> Option<String> {
        match self {
            Action::Etcd(a) => a.sim_unsupported(),
            _ => None,
        }
    }

    /// Do it, now. Answers a detail worth recording (e.g. which etcd member died).
    pub async fn apply(&self, c: &mut impl Cluster) -> Result<Option<String>, String> {
        let detail = each_family!(self, a => a.apply(c).await)?;
        c.settle();
        Ok(detail)
    }

    /// Open or close the fault episodes this action (as executed) causes.
    pub fn episodes(&self, book: &mut EpisodeBook<'_>) {
        each_family!(self, a => a.episodes(book))
    }
}

/// A fault of etcd or of the master as a step arms it:
/// `{ fault = { latency = { ms = 500 } }, count = 3, duration = "4s" }`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Armed<F> {
    /// What the fault does.
    pub fault: F,
    /// Fire at most this many times (`None`: no limit).
    #[serde(default)]
    pub count: Option<u64>,
    /// Disarm after this long (`None`: until the family's `*_clear_faults`).
    #[serde(default)]
    pub duration: Option<Dur>,
}

/// A fault armed for `count` uses and/or `duration`, as the cluster's verbs take it
/// (the vLLM, etcd and master faults alike).
fn arming(count: &Option<u64>, duration: &Option<Dur>) -> Arming {
    Arming {
        count: *count,
        lasting: duration.map(|d| d.0),
    }
}

impl<'de> Deserialize<'de> for Action {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(OneKey)
    }
}

/// Reads `{ key = value }`: the key picks the family, whose enum reads the entry.
struct OneKey;

impl<'de> Visitor<'de> for OneKey {
    type Value = Action;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an action: a table with one key, e.g. { sidecar_kill = \"i0\" }")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Action, M::Error> {
        let Some(key) = map.next_key::<String>()? else {
            return Err(de::Error::invalid_length(0, &self));
        };
        let action = read(&key, &mut map, Action::Sidecar)
            .or_else(|| read(&key, &mut map, Action::Vllm))
            .or_else(|| read(&key, &mut map, Action::Etcd))
            .or_else(|| read(&key, &mut map, Action::Master))
            .or_else(|| read(&key, &mut map, Action::Link))
            .or_else(|| read(&key, &mut map, Action::Pause))
            .or_else(|| read(&key, &mut map, Action::Load))
            .unwrap_or_else(|| Err(de::Error::unknown_variant(&key, Action::keys())))?;
        if map.next_key::<IgnoredAny>()?.is_some() {
            return Err(de::Error::custom(
                "an action is a table with one key: one action per step",
            ));
        }
        Ok(action)
    }
}

/// The action keyed `key`, if family `F` has that key: read by `F`'s enum and `wrap`ped.
fn read<'de, F: DeserializeOwned, M: MapAccess<'de>>(
    key: &str,
    map: &mut M,
    wrap: fn(F) -> Action,
) -> Option<Result<Action, M::Error>> {
    let ours = parse::keys::<F>().contains(&key);
    ours.then(|| F::deserialize(parse::rest(key.to_string(), map)).map(wrap))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Scenario;

    fn step_action(action: &str) -> Result<Action, String> {
        let text = format!(
            "name = \"t\"\ndescription = \"d\"\n[topology]\netcd = \"fake\"\ninstances = 2\n[[step]]\naction = {action}\n"
        );
        Scenario::parse("t.toml", &text)
            .map(|sc| sc.steps[0].action.clone().unwrap())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn every_family_answers_to_its_keys_in_the_languages_order() {
        assert_eq!(
            Action::keys(),
            [
                "sidecar_start",
                "sidecar_stop",
                "sidecar_kill",
                "sidecar_drain",
                "sidecar_undrain",
                "vllm_health",
                "vllm_fault",
                "vllm_clear_faults",
                "vllm_crash",
                "vllm_restart",
                "vllm_counter_reset",
                "vllm_sleep",
                "vllm_wake",
                "etcd_fault",
                "etcd_clear_faults",
                "etcd_release_hung",
                "etcd_expire_lease",
                "etcd_lose_data",
                "etcd_kill",
                "etcd_restart",
                "master_restart",
                "master_kill",
                "master_token",
                "master_fault",
                "master_clear_faults",
                "link",
                "pause",
                "throttle",
                "load",
                "load_off",
            ]
        );
    }

    #[test]
    fn an_unknown_action_lists_every_action() {
        let e = step_action("{ vllm_explode = \"i0\" }").unwrap_err();
        assert!(
            e.starts_with("t.toml:7: unknown variant `vllm_explode`"),
            "{e}"
        );
        assert!(
            e.contains("expected one of `sidecar_start`, `sidecar_stop`"),
            "{e}"
        );
        assert!(e.contains("`load`, `load_off`"), "{e}");
    }

    #[test]
    fn a_familys_field_errors_name_the_field_and_line() {
        let e =
            step_action("{ vllm_health = { instance = \"i0\", helth = \"down\" } }").unwrap_err();
        assert!(e.starts_with("t.toml:7:"), "{e}");
        assert!(e.contains("helth"), "{e}");
        let e =
            step_action("{ vllm_health = { instance = \"i0\", health = \"sick\" } }").unwrap_err();
        assert!(e.contains("sick"), "{e}");
    }

    #[test]
    fn one_action_per_step() {
        let e = step_action("{ sidecar_kill = \"i0\", vllm_crash = \"i1\" }").unwrap_err();
        assert!(e.contains("one key"), "{e}");
        let e = step_action("{}").unwrap_err();
        assert!(e.contains("an action"), "{e}");
    }

    #[test]
    fn actions_read_back_as_written_and_are_checked_by_their_family() {
        for (toml, json, label) in [
            (
                "{ sidecar_start = { instance = \"i1\", token = \"t2\" } }",
                r#"{"sidecar_start":{"instance":"i1","token":"t2"}}"#,
                "sidecar_start {instance:i1,token:t2}",
            ),
            ("{ vllm_crash = \"all\" }", r#"{"vllm_crash":"all"}"#, "vllm_crash all"),
            (
                "{ etcd_expire_lease = \"i0\" }",
                r#"{"etcd_expire_lease":"i0"}"#,
                "etcd_expire_lease i0",
            ),
            (
                "{ master_fault = { fault = { heartbeat_status = { status = 503 } }, duration = \"2s\" } }",
                r#"{"master_fault":{"fault":{"heartbeat_status":{"status":503}},"count":null,"duration":"2s"}}"#,
                "master: {heartbeat_status:{status:503}} for 2s",
            ),
            (
                "{ link = { link = \"sidecar_vllm\", fault = \"blackhole\" } }",
                r#"{"link":{"link":"sidecar_vllm","instance":"all","endpoint":null,"fault":"blackhole","duration":null}}"#,
                "link sidecar_vllm all: blackhole",
            ),
            ("{ load_off = true }", r#"{"load_off":true}"#, "load_off true"),
        ] {
            let a = step_action(toml).unwrap();
            assert_eq!(serde_json::to_string(&a).unwrap(), json);
            assert_eq!(a.describe(), label);
            // The report's JSON reads back as the same action.
            let back: Action = serde_json::from_str(json).unwrap();
            assert_eq!(serde_json::to_string(&back).unwrap(), json);
        }
        let e = step_action("{ sidecar_kill = \"i9\" }").unwrap_err();
        assert!(e.contains("instance `i9` does not exist"), "{e}");
        let e = step_action("{ etcd_kill = \"leader\" }").unwrap_err();
        assert!(e.contains("cluster3"), "{e}");
        let e = step_action("{ load_off = false }").unwrap_err();
        assert!(e.contains("`load_off = false` means nothing"), "{e}");
    }
}
