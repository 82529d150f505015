//! Load actions: open-loop request load on one instance's vLLM directly, or routed by
//! the master; and stopping every load.
//!
//! Load opens no episode: it disturbs nothing the invariants excuse, it is what some
//! awaits (routed share, waiting requests) observe.

use serde::{Deserialize, Serialize};

use super::words;
use crate::cluster::{Cluster, LoadSpec};
use crate::dur::Dur;
use crate::episode::EpisodeBook;
use crate::topology::{target_indices, Target, Topology};

/// A load action, written `load = { ... }` or `load_off = true` in a step's `action`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum LoadAction {
    /// Open-loop load: `rps` completions per second for `duration`, to one instance's
    /// vLLM directly, or routed by the master when `instance` is absent.
    Load {
        /// The instance whose vLLM gets the load; `None`: routed by the master.
        #[serde(default)]
        instance: Option<Target>,
        /// Requests per second offered (0 < rps <= 2000).
        rps: f64,
        /// How long the load runs.
        duration: Dur,
        /// Each request's `max_tokens` (default 64).
        #[serde(default = "default_max_tokens")]
        max_tokens: u32,
    },
    /// End every load now: `load_off = true`.
    LoadOff(bool),
}

fn default_max_tokens() -> u32 {
    64
}

impl LoadAction {
    /// The instance the load goes to; `None`: routed by the master, or `load_off`.
    pub fn instance(&self) -> Option<&str> {
        match self {
            LoadAction::Load { instance, .. } => instance.as_deref(),
            LoadAction::LoadOff(_) => None,
        }
    }

    /// Checks the instance exists (one, not `all`) and the rate is in range.
    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        match self {
            LoadAction::Load { instance, rps, .. } => {
                if let Some(i) = instance {
                    topo.check_target(i, false)?;
                }
                if !(rps.is_finite() && *rps > 0.0 && *rps <= 2000.0) {
                    return Err(format!("load rps {rps} (allowed 0 < rps <= 2000)"));
                }
                Ok(())
            }
            LoadAction::LoadOff(b) => words::flag(*b, "load_off"),
        }
    }

    /// A short label for reports: `load 20 rps on i0 for 10s`.
    pub fn describe(&self) -> String {
        match self {
            LoadAction::Load {
                instance,
                rps,
                duration,
                ..
            } => {
                let to = instance
                    .as_ref()
                    .map_or("via the master".into(), |i| format!("on {i}"));
                format!("load {rps} rps {to} for {duration}")
            }
            LoadAction::LoadOff(_) => words::plain(self),
        }
    }

    /// Starts the load, or ends every load.
    pub async fn apply(&self, c: &mut impl Cluster) -> Result<Option<String>, String> {
        match self {
            LoadAction::Load {
                instance,
                rps,
                duration,
                max_tokens,
            } => {
                let count = c.topology().instances;
                let first = |t: &Target| target_indices(count, t).first().copied();
                let instance = instance
                    .as_ref()
                    .map(|t| first(t).ok_or("no such instance"))
                    .transpose()?;
                c.load_start(LoadSpec {
                    instance,
                    rps: *rps,
                    duration: duration.0,
                    max_tokens: *max_tokens,
                })?
            }
            LoadAction::LoadOff(_) => c.load_off(),
        }
        Ok(None)
    }

    /// Load opens no episode (see the module's summary).
    pub fn episodes(&self, _book: &mut EpisodeBook<'_>) {}
}
