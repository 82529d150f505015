//! Sidecar actions: start (optionally with another token), stop (SIGTERM), kill
//! (SIGKILL), drain (SIGUSR1) and undrain (SIGUSR2) the `vllm-sidecar` of an instance,
//! or of `all`.
//!
//! A stopped or killed sidecar is not expected to be registered: its episode excuses the
//! missing key at once (the exit itself is observed directly), and a start is a routine
//! first registration, not a fault. A drain is an operator's choice with the same
//! excuse until the undrain, and, like a stop, must revoke the lease at once.

use serde::{Deserialize, Serialize};

use super::words;
use crate::cluster::{Cluster, Signal};
use crate::episode::{EpisodeBook, EpisodeKey};
use crate::topology::{target_indices, Target, Topology};

/// A sidecar action, written `{ sidecar_<verb> = "i0" }` (or `"all"`) in a step's `action`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub enum SidecarAction {
    /// Start the instance's sidecar: `sidecar_start = { instance = "i0", token = "t2" }`.
    #[serde(rename = "sidecar_start")]
    Start {
        /// The instance (a name or `all`).
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
    /// The instance the action acts on (a name or `all`).
    pub fn instance(&self) -> Option<&str> {
        match self {
            SidecarAction::Start { instance, .. }
            | SidecarAction::Stop(instance)
            | SidecarAction::Kill(instance)
            | SidecarAction::Drain(instance)
            | SidecarAction::Undrain(instance) => Some(instance),
        }
    }

    /// Checks the instance exists (or is `all`).
    pub fn check(&self, topo: &Topology) -> Result<(), String> {
        topo.check_target(self.instance().unwrap_or_default(), true)
    }

    /// The action's compact TOML, for reports: `sidecar_kill i0`.
    pub fn describe(&self) -> String {
        words::plain(self)
    }

    /// Signals only: the timeline (awaits on exit and on the key) observes the rest.
    pub async fn apply(&self, c: &mut impl Cluster) -> Result<Option<String>, String> {
        let instance = self.instance().unwrap_or_default();
        for i in target_indices(c.topology().instances, instance) {
            match self {
                SidecarAction::Start { token, .. } => c.sidecar_start(i, token.clone())?,
                SidecarAction::Stop(_) => c.sidecar_signal(i, Signal::Term)?,
                SidecarAction::Kill(_) => c.sidecar_signal(i, Signal::Kill)?,
                SidecarAction::Drain(_) => c.sidecar_signal(i, Signal::Drain)?,
                SidecarAction::Undrain(_) => c.sidecar_signal(i, Signal::Undrain)?,
            }
        }
        Ok(None)
    }

    /// Opens or closes the episodes this action causes (see the module's summary).
    pub fn episodes(&self, book: &mut EpisodeBook<'_>) {
        let t = book.t();
        match self {
            SidecarAction::Start { instance, token } => {
                for s in book.scopes(instance) {
                    book.open(EpisodeKey::SidecarStart(s, t), s, Some(0), |e| {
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
                let graceful = matches!(self, SidecarAction::Stop(_));
                for s in book.scopes(target) {
                    book.open(EpisodeKey::SidecarDown(s), s, Some(0), |e| {
                        e.excuses_registration = true;
                        e.expects_revoke = graceful;
                    });
                }
            }
            SidecarAction::Drain(target) => {
                for s in book.scopes(target) {
                    book.open(EpisodeKey::Drained(s), s, None, |e| {
                        e.excuses_registration = true;
                        e.expects_revoke = true;
                    });
                }
            }
            SidecarAction::Undrain(target) => {
                for s in book.scopes(target) {
                    book.close(&EpisodeKey::Drained(s));
                }
            }
        }
    }
}
