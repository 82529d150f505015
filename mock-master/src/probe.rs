//! The health probe a DELETE triggers: `GET http://<name>/health`, one attempt at a
//! time. How many attempts and how far apart is the core's decision
//! ([`crate::core::Command::Probe`]); this is the HTTP call of one of them.
//!
//! The lease is gone, but the process may be fine (a keepalive hiccup, an etcd that lost
//! the lease): a 200 from `/health` keeps the instance routable (LEASE_LOST) while it
//! proves itself with heartbeats; anything else makes it SUSPECT.

use std::time::Duration;

/// The probe's HTTP client (the real master: 1000 ms per attempt).
#[derive(Debug, Clone)]
pub struct Prober {
    http: reqwest::Client,
}

impl Prober {
    pub fn new(timeout: Duration) -> reqwest::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .pool_max_idle_per_host(0)
            .build()?;
        Ok(Prober { http })
    }

    /// One attempt: true if `url` answers 200 within `timeout` (and the client's own).
    pub async fn attempt(&self, name: &str, url: &str, attempt: u32, timeout: Duration) -> bool {
        match tokio::time::timeout(timeout, self.http.get(url).send()).await {
            Ok(Ok(resp)) if resp.status() == reqwest::StatusCode::OK => true,
            Ok(Ok(resp)) => {
                tracing::warn!(name, attempt, status = %resp.status(), "health probe failed");
                false
            }
            Ok(Err(e)) => {
                tracing::warn!(name, attempt, error = %e, "health probe failed");
                false
            }
            Err(_) => {
                tracing::warn!(name, attempt, "health probe timed out");
                false
            }
        }
    }
}
