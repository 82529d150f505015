//! Sidecar actions: start (optionally with another token), stop (SIGTERM), kill
//! (SIGKILL), drain (SIGUSR1) and undrain (SIGUSR2) the `vllm-sidecar` of an instance,
//! or of `all`.
//!
//! A stopped or killed sidecar is not expected to be registered: its episode excuses the
//! missing key at once (the exit itself is observed directly), and a start is a routine
//! first registration, not a fault. A drain is an operator's choice with the same
//! excuse until the undrain, and, like a stop, must revoke the lease at once.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use sidecar::core::Input;

use super::words;
use crate::cluster::Cluster;
use crate::episode::EpisodeBook;
use crate::sim_cluster::{node_index, SimCluster};
use crate::topology::{Target, Topology};

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub enum SidecarAction {
    #[serde(rename = "sidecar_start")]
    Start {
        instance: Target,
        /// Start with this token instead (token rotation).
        #[serde(default)]
        token: Option<String>,
    },
    /// SIGTERM, then wait for exit.
    #[serde(rename = "sidecar_stop")]
    Stop(Target),
    /// SIGKILL.
    #[serde(rename = "sidecar_kill")]
    Kill(Target),
    /// SIGUSR1: revoke the lease and stay deregistered (a rolling upgrade).
    #[serde(rename = "sidecar_drain")]
    Drain(Target),
    /// SIGUSR2: register again after a drain.
    #[serde(rename = "sidecar_undrain")]
    Undrain(Target),
}

impl SidecarAction {
    pub fn instance(&self) -> Option<&str> {
        match self {
            SidecarAction::Start { instance, .. }
            | SidecarAction::Stop(instance)
            | SidecarAction::Kill(instance)
            | SidecarAction::Drain(instance)
            | SidecarAction::Undrain(instance) => Some(instance),
        }
    }

    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        topo.check_target(self.instance().unwrap_or_default(), true)
    }

    pub fn describe(&self) -> String {
        words::plain(self)
    }

    /// Signals only: the timeline (awaits on exit and on the key) observes the rest.
    pub async fn apply_real(&self, c: &mut Cluster) -> Result<Option<String>, String> {
        match self {
            SidecarAction::Start { instance, token } => {
                let bin = c.sidecar_bin()?;
                for i in c.targets(instance) {
                    c.start_sidecar(i, &bin, token.clone())?;
                }
            }
            SidecarAction::Stop(t) => {
                for i in c.targets(t) {
                    if let Some(p) = c.instances.get(i).and_then(|x| x.sidecar.as_ref()) {
                        p.terminate();
                    }
                }
            }
            SidecarAction::Kill(t) => {
                for i in c.targets(t) {
                    if let Some(p) = c.instances.get(i).and_then(|x| x.sidecar.as_ref()) {
                        p.kill_now();
                    }
                }
            }
            SidecarAction::Drain(t) | SidecarAction::Undrain(t) => {
                let drain = matches!(self, SidecarAction::Drain(_));
                for i in c.targets(t) {
                    if let Some(p) = c.instances.get(i).and_then(|x| x.sidecar.as_ref()) {
                        if drain {
                            p.drain();
                        } else {
                            p.undrain();
                        }
                    }
                }
            }
        }
        Ok(None)
    }

    pub fn sim_unsupported(&self) -> Option<String> {
        None
    }

    pub fn apply_sim(&self, c: &mut SimCluster, now: Duration) -> Result<Option<String>, String> {
        match self {
            SidecarAction::Start { instance, token } => {
                for i in c.targets(instance) {
                    start_sim(c, i, token.clone())?;
                }
            }
            SidecarAction::Stop(t) => {
                for i in c.targets(t) {
                    c.world.input_at(now, node_index(i), Input::Shutdown);
                }
            }
            SidecarAction::Kill(t) => {
                for i in c.targets(t) {
                    c.world.kill_sidecar(node_index(i));
                }
            }
            SidecarAction::Drain(t) | SidecarAction::Undrain(t) => {
                let input = match self {
                    SidecarAction::Drain(_) => Input::Drain,
                    _ => Input::Undrain,
                };
                for i in c.targets(t) {
                    c.world.input_at(now, node_index(i), input.clone());
                }
            }
        }
        Ok(None)
    }

    pub fn episodes(&self, book: &mut EpisodeBook<'_>) {
        let t = book.t();
        match self {
            SidecarAction::Start { instance, token } => {
                for s in book.scopes(instance) {
                    book.open(format!("sidecar_start:{s:?}:{t}"), s, Some(0), |e| {
                        e.excuses_registration = true;
                        e.is_fault = false;
                    });
                    if let Some(token) = token {
                        book.set_sidecar_token(s, token);
                    }
                }
                book.recheck_tokens();
            }
            SidecarAction::Stop(target) | SidecarAction::Kill(target) => {
                // The sidecar is not running: no registration is expected (observed directly).
                let graceful = matches!(self, SidecarAction::Stop(_));
                for s in book.scopes(target) {
                    book.open(format!("sidecar_down:{s:?}"), s, Some(0), |e| {
                        e.excuses_registration = true;
                        e.expects_revoke = graceful;
                    });
                }
            }
            SidecarAction::Drain(target) => {
                for s in book.scopes(target) {
                    book.open(format!("drained:{s:?}"), s, None, |e| {
                        e.excuses_registration = true;
                        e.expects_revoke = true;
                    });
                }
            }
            SidecarAction::Undrain(target) => {
                for s in book.scopes(target) {
                    book.close(&format!("drained:{s:?}"));
                }
            }
        }
    }
}

/// Start instance `i`'s sidecar in the world again, configured as the real one would be.
fn start_sim(c: &mut SimCluster, i: usize, token: Option<String>) -> Result<(), String> {
    let running = c
        .world
        .sidecars()
        .get(i)
        .is_some_and(|s| s.exited().is_none())
        && c.instances
            .get(i)
            .is_some_and(|x| x.started && !x.flag_error);
    let inst = c.instances.get_mut(i).ok_or("no such instance")?;
    if running {
        return Err(format!("sidecar {} is already running", inst.name));
    }
    if let Some(t) = token {
        inst.token = Some(t);
    }
    c.spawn_sidecar(i);
    Ok(())
}
