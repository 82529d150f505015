//! The core's [`Answer`] for each etcd call's result: one mapping for the production
//! driver and for a simulator that decodes etcd with [`crate::peers::etcd::decode`].

use crate::core::Answer;
use crate::peers::etcd::EtcdError;

/// A lease grant's result (`ttl`: the TTL asked for, which the core reasons with).
pub fn grant(result: Result<i64, EtcdError>, ttl: i64) -> Answer {
    match result {
        Ok(lease) => Answer::LeaseGranted { lease, ttl },
        Err(e) => Answer::GrantFailed(e.to_string()),
    }
}

/// A keepalive's result: only etcd's own word makes a lease gone.
pub fn keepalive(result: Result<i64, EtcdError>) -> Answer {
    match result {
        Ok(ttl) => Answer::KeepaliveTtl(ttl),
        Err(EtcdError::LeaseNotFound) => Answer::LeaseNotFound,
        Err(e) => Answer::KeepaliveFailed(e.to_string()),
    }
}

pub fn put(result: Result<(), EtcdError>) -> Answer {
    match result {
        Ok(()) => Answer::PutDone,
        Err(e) => Answer::PutFailed(e.to_string()),
    }
}

pub fn revoke(result: Result<(), EtcdError>) -> Answer {
    match result {
        Ok(()) => Answer::RevokeDone,
        Err(e) => Answer::RevokeFailed(e.to_string()),
    }
}
