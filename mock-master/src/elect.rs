//! Replica mode's etcd calls: the election's decisions ([`crate::election`], inside the
//! core) carried out against etcd. Each call runs in a task of its own, so a slow txn
//! never holds a keepalive back, and is abandoned at shutdown, so a stopped replica
//! renews nothing and its leases expire as a killed process's would.

use std::time::Duration;

use mock_kit::{Events, Freeze, Shutdown};

use crate::election::{Call, Op, Outcome};
use crate::etcd::EtcdClient;
use crate::event::MasterEvent;
use crate::registry::Registry;

/// How often the election's timers are looked at: a small fraction of a 1 s keepalive
/// period, so that keepalives and the lease-lost check are late by at most this.
pub const STEP: Duration = Duration::from_millis(50);

/// What the election's calls need.
#[derive(Clone)]
pub struct Caller {
    pub registry: Registry,
    pub etcd: EtcdClient,
    pub events: Events,
    pub shutdown: Shutdown,
    /// While frozen (a stopped process) no call is made and no answer is read: its
    /// leases run out as a stopped master's do.
    pub freeze: Freeze,
}

/// Run until shutdown.
pub async fn run(c: Caller) {
    loop {
        tokio::select! {
            _ = c.shutdown.wait() => return,
            _ = c.freeze.thawed() => {}
        }
        for call in c.registry.election_step() {
            spawn_call(call, &c);
        }
        tokio::select! {
            _ = c.shutdown.wait() => return,
            _ = tokio::time::sleep(STEP) => {}
        }
    }
}

/// Make `call`, hand its outcome back, and make the calls that follow from it.
fn spawn_call(call: Call, c: &Caller) {
    let c = c.clone();
    tokio::spawn(async move {
        let outcome = tokio::select! {
            _ = c.shutdown.wait() => return,
            o = async {
                let o = carry_out(&c.etcd, &call.op).await;
                c.freeze.thawed().await;
                o
            } => o,
        };
        if let Outcome::Failed { error } = &outcome {
            tracing::warn!(op = op_name(&call.op), %error, "election call failed");
            c.events.emit_event(&MasterEvent::EtcdError {
                op: op_name(&call.op),
                error,
            });
        }
        for next in c.registry.on_election_result(call.id, outcome) {
            spawn_call(next, &c);
        }
    });
}

/// The call's name in `etcd_error` events.
fn op_name(op: &Op) -> &'static str {
    match op {
        Op::Grant { .. } => "lease_grant",
        Op::PutService { .. } => "put_service",
        Op::CreateMaster { .. } => "txn_master",
        Op::KeepAlive { .. } => "lease_keepalive",
    }
}

/// One call against etcd (bounded by the client's call timeout).
pub async fn carry_out(etcd: &EtcdClient, op: &Op) -> Outcome {
    let failed = |e: crate::etcd::EtcdError| Outcome::Failed { error: e.0 };
    match op {
        Op::Grant { ttl_secs, .. } => match etcd.lease_grant(*ttl_secs).await {
            Ok(lease) => Outcome::Granted { lease },
            Err(e) => failed(e),
        },
        Op::PutService { key, value, lease } => {
            match etcd
                .put_on_lease(key.as_bytes(), value.as_bytes(), *lease)
                .await
            {
                Ok(revision) => Outcome::Put { revision },
                Err(e) => failed(e),
            }
        }
        Op::CreateMaster { key, value, lease } => {
            match etcd
                .create_if_absent(key.as_bytes(), value.as_bytes(), *lease)
                .await
            {
                Ok(t) if t.succeeded => Outcome::Won {
                    revision: t.revision,
                },
                Ok(t) => Outcome::Lost {
                    holder: t.value.map(|v| String::from_utf8_lossy(&v).into_owned()),
                    revision: t.revision,
                },
                Err(e) => failed(e),
            }
        }
        Op::KeepAlive { lease, .. } => match etcd.lease_keepalive(*lease).await {
            Ok(ttl_secs) => Outcome::Alive { ttl_secs },
            Err(e) => failed(e),
        },
    }
}
