//! A real `etcd` on loopback for differential tests and the load test (see
//! `local-etcd`): killed, and its data removed, on drop.

#![allow(dead_code)]

use std::path::PathBuf;

use local_etcd::{Cluster, Options};

pub struct RealEtcd {
    _cluster: Cluster,
    pub url: String,
}

/// The etcd binary, if installed.
pub fn etcd_binary() -> Option<PathBuf> {
    local_etcd::binary()
}

impl RealEtcd {
    /// Start etcd with `extra` flags and wait (bounded) until it is healthy. None if
    /// not installed.
    pub async fn start(extra: &[&str]) -> Option<RealEtcd> {
        etcd_binary()?;
        let opts = Options {
            args: extra.iter().map(|s| s.to_string()).collect(),
            tag: "mock-etcd-diff".into(),
            ..Options::default()
        };
        let cluster = tokio::task::spawn_blocking(move || Cluster::start(opts))
            .await
            .expect("etcd start-up task")
            .unwrap_or_else(|e| panic!("{e}"));
        let url = cluster.url();
        Some(RealEtcd {
            _cluster: cluster,
            url,
        })
    }
}
