//! Load actions: open-loop request load on one instance's vLLM directly, or routed by
//! the master; and stopping every load.
//!
//! Load opens no episode: it disturbs nothing the invariants excuse, it is what some
//! awaits (routed share, waiting requests) observe.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sim::load::Load;
use sim::NodeId;

use super::words;
use crate::cluster::Cluster;
use crate::dur::Dur;
use crate::episode::EpisodeBook;
use crate::load::LoadGen;
use crate::sim_cluster::{node_index, SimCluster};
use crate::topology::{Target, Topology};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum LoadAction {
    /// Open-loop load: `rps` completions per second for `duration`, to one instance's
    /// vLLM directly, or routed by the master when `instance` is absent.
    Load {
        #[serde(default)]
        instance: Option<Target>,
        rps: f64,
        duration: Dur,
        #[serde(default = "default_max_tokens")]
        max_tokens: u32,
    },
    LoadOff(bool),
}

fn default_max_tokens() -> u32 {
    64
}

impl LoadAction {
    pub fn instance(&self) -> Option<&str> {
        match self {
            LoadAction::Load { instance, .. } => instance.as_deref(),
            LoadAction::LoadOff(_) => None,
        }
    }

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

    pub fn describe(&self) -> String {
        match self {
            LoadAction::Load {
                instance: Some(i),
                rps,
                duration,
                ..
            } => format!("load {rps} rps on {i} for {duration}"),
            LoadAction::Load {
                instance: None,
                rps,
                duration,
                ..
            } => format!("load {rps} rps via the master for {duration}"),
            LoadAction::LoadOff(_) => words::plain(self),
        }
    }

    pub async fn apply_real(&self, c: &mut Cluster) -> Result<Option<String>, String> {
        match self {
            LoadAction::Load {
                instance,
                rps,
                duration,
                max_tokens,
            } => {
                let (url, route) = match instance {
                    Some(t) => {
                        let i = c.targets(t).into_iter().next().ok_or("no such instance")?;
                        let url = c.instances.get(i).map(|x| x.vllm.url());
                        (url.unwrap_or_default(), false)
                    }
                    None => (c.master.url(), true),
                };
                let names: Vec<String> = c
                    .instances
                    .iter()
                    .map(|x| x.register_addr.clone())
                    .collect();
                let gen = LoadGen::start(
                    url,
                    route.then(|| (names, c.routed.clone())),
                    *rps,
                    duration.0,
                    *max_tokens,
                    c.seed ^ c.timeline.now(),
                    c.timeline.source("load"),
                );
                match c.load.lock() {
                    Ok(mut g) => g.push(gen),
                    Err(p) => p.into_inner().push(gen),
                }
            }
            LoadAction::LoadOff(_) => c.stop_loads(),
        }
        Ok(None)
    }

    pub fn sim_unsupported(&self) -> Option<String> {
        None
    }

    pub fn apply_sim(&self, c: &mut SimCluster, now: Duration) -> Result<Option<String>, String> {
        match self {
            LoadAction::Load {
                instance,
                rps,
                duration,
                max_tokens,
            } => {
                // Routed by the master when no instance is named; the request body is
                // checked by instance i0's vLLM rules (every fake has the same).
                let t = instance.as_deref().unwrap_or("i0");
                let i = c.targets(t).into_iter().next().ok_or("no such instance")?;
                let to = match instance {
                    Some(_) => NodeId::Vllm(node_index(i)),
                    None => NodeId::Master,
                };
                let load = {
                    let v = c.vllm(i)?;
                    Load::new(to, v, *rps, now + duration.0, "hello", *max_tokens)?
                };
                c.world.add_load(now, load);
            }
            LoadAction::LoadOff(_) => c.world.end_loads(),
        }
        Ok(None)
    }

    pub fn episodes(&self, _book: &mut EpisodeBook<'_>) {}
}
