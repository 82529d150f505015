//! The health probe a DELETE triggers: `GET http://<name>/health`, a few attempts.
//!
//! The lease is gone, but the process may be fine (a keepalive hiccup, an etcd that lost
//! the lease): a 200 from `/health` keeps the instance routable (LEASE_LOST) while it
//! proves itself with heartbeats; anything else makes it SUSPECT.

use std::time::Duration;

/// Probe settings (the real master: 2 attempts, 1000 ms each, 100 ms apart).
#[derive(Debug, Clone)]
pub struct Prober {
    http: reqwest::Client,
    attempts: u32,
    interval: Duration,
}

impl Prober {
    pub fn new(attempts: u32, timeout: Duration, interval: Duration) -> reqwest::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .pool_max_idle_per_host(0)
            .build()?;
        Ok(Prober {
            http,
            attempts: attempts.max(1),
            interval,
        })
    }

    /// True as soon as one attempt answers 200.
    pub async fn healthy(&self, name: &str) -> bool {
        let url = format!("http://{name}/health");
        for attempt in 1..=self.attempts {
            match self.http.get(&url).send().await {
                Ok(resp) if resp.status() == reqwest::StatusCode::OK => return true,
                Ok(resp) => {
                    tracing::warn!(name, attempt, status = %resp.status(), "health probe failed")
                }
                Err(e) => tracing::warn!(name, attempt, error = %e, "health probe failed"),
            }
            if attempt < self.attempts {
                tokio::time::sleep(self.interval).await;
            }
        }
        false
    }
}
