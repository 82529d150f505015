//! Capabilities: what a sidecar may do beyond the contract. A scenario, a step or an
//! invariant that needs one its sidecar's profile does not declare is skipped with that
//! reason, never failed: the report keeps "violates the contract" apart from "lacks an
//! improvement". The contract itself (what keeps an instance registered and routable
//! under the library's faults) is no capability: no profile can declare it away.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// For an enum of unit variants, each listed with the name serde writes it by
/// (`Variant => "name"`): `ALL`, `as_str`, `parse` by that name, and `Display` by it.
macro_rules! named {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// Every variant, in order.
            pub const ALL: [$ty; [$($name),+].len()] = [$($ty::$variant),+];

            /// Its name as files and reports write it (serde's name for it).
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name),+
                }
            }

            /// The variant named `s`.
            pub fn parse(s: &str) -> Option<$ty> {
                $ty::ALL.into_iter().find(|v| v.as_str() == s)
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use named;

/// One improvement or extension a sidecar may lack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// SIGUSR1 drains (revoke, stay deregistered), SIGUSR2 undrains.
    Drain,
    /// A keepalive that times out in a blackout shorter than the TTL is not a lost
    /// lease: the same incarnation survives it.
    OneIncarnationThroughShortBlackout,
    /// A lease the sidecar gives up is revoked, so its key goes at once.
    RevokesGivenUpLease,
    /// Reads OpenMetrics 1.0 `/metrics` pages.
    Openmetrics,
    /// Logs in our sidecar's words (checks that read log lines).
    LogWording,
    /// Follows the elected master of several xllm-service replicas (reads
    /// `XLLM:SERVICE:MASTER`) instead of posting to one fixed URL.
    FollowsMaster,
}

named!(Capability {
    Drain => "drain",
    OneIncarnationThroughShortBlackout => "one_incarnation_through_short_blackout",
    RevokesGivenUpLease => "revokes_given_up_lease",
    Openmetrics => "openmetrics",
    LogWording => "log_wording",
    FollowsMaster => "follows_master",
});

/// A set of capabilities.
pub type Capabilities = BTreeSet<Capability>;

/// Every capability (our sidecar's, and the simulated core's).
pub fn all() -> Capabilities {
    Capability::ALL.into_iter().collect()
}

/// What of `needed` is not in `have`, as a skip reason (`None`: nothing is missing).
pub fn missing(needed: &Capabilities, have: &Capabilities) -> Option<String> {
    let lacking: Vec<&str> = needed.difference(have).map(|c| c.as_str()).collect();
    (!lacking.is_empty()).then(|| format!("needs {}", lacking.join(", ")))
}
