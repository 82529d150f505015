//! What the sidecar makes of a gateway answer, for the simulated sidecar: the sidecar's
//! own decoding (`sidecar::peers::etcd::decode`: the client's answer classification by
//! gRPC code and its typed decoding) and the driver's mapping of the result to the
//! core's answer (`sidecar::driver::answers`). Nothing is restated here; this only
//! turns a simulated exchange into what a transport saw.
//!
//! One endpoint only: the client's endpoint failover and re-authentication are not
//! simulated.

use std::time::Duration;

use sidecar::core::Answer;
use sidecar::driver::answers;
use sidecar::peers::etcd::{decode, Exchange};

use crate::node::{Failure, Outcome, Reply};

/// The etcd calls of the sidecar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdCall {
    /// The TTL asked for: the driver answers a grant with it, not etcd's.
    Grant {
        ttl: i64,
    },
    Put,
    Keepalive,
    Revoke,
}

/// The core's answer to etcd call `kind` that ended with `outcome`; `shown` is the
/// endpoint as the client's messages show it, `timeout` the etcd timeout.
pub fn answer(kind: EtcdCall, outcome: Outcome, shown: &str, timeout: Duration) -> Answer {
    let exchange: Exchange<'_> = match &outcome {
        Outcome::Reply(Reply::Gateway { status, body }) => Ok((*status, body.as_slice())),
        Outcome::Reply(other) => Err(format!("unexpected answer {other:?}")),
        Outcome::Failed(Failure::Timeout) => Err(format!("no answer within {timeout:?}")),
        Outcome::Failed(f) => Err(f.describe().to_string()),
    };
    match kind {
        EtcdCall::Grant { ttl } => answers::grant(decode::lease_grant(shown, exchange), ttl),
        EtcdCall::Put => answers::put(decode::put(shown, exchange)),
        EtcdCall::Keepalive => answers::keepalive(decode::lease_keepalive(shown, exchange)),
        EtcdCall::Revoke => answers::revoke(decode::lease_revoke(shown, exchange)),
    }
}
