//! Which of the sidecar's commands an exchange carries: what its outcome is read as.
//!
//! Its own module because both the simulated driver (`sidecar_node`) and the seam that
//! may distort its answers (`distortion`, used by `planted`) name it, and neither should
//! depend on the other for it.

/// The kinds of command that become exchanges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Health,
    Scrape,
    Heartbeat,
    /// An etcd call: its answer comes from the etcd client ([`crate::etcd_client`]),
    /// after every step of the call.
    Etcd(EtcdCall),
}

/// The etcd calls of the sidecar, as the core's answer needs them told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdCall {
    /// The TTL asked for: the driver answers a grant with it, not etcd's.
    Grant {
        ttl: i64,
    },
    Put,
    Keepalive,
    Revoke,
    /// A read of the MASTER key (`--follow-master`).
    MasterRead,
}
