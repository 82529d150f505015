//! vLLM's `/health`: the lease proves the sidecar is alive, this proves vLLM is, so a dead
//! engine beside a live sidecar is never left routable.

use std::time::Duration;

use serde_json::Value;
use url::Url;

use crate::http::{Client, Pending, Request, Target};

/// A probe sent, its answer not read yet.
#[derive(Debug)]
pub struct Probe(Result<Pending, String>);

impl Probe {
    /// True iff `/health` answered 2xx within the timeout. Blocks.
    pub fn finish(self) -> bool {
        match self.0.and_then(|p| p.finish().map_err(|e| e.to_string())) {
            Ok(response) => response.head.is_success(),
            Err(e) => {
                tracing::debug!(error = %e, "vLLM health probe failed");
                false
            }
        }
    }
}

/// Probes one vLLM server.
#[derive(Debug, Clone)]
pub struct HealthProbe {
    http: Client,
    health: Option<Target>,
    models: Option<Target>,
    timeout: Duration,
}

impl HealthProbe {
    pub fn new(http: Client, vllm_url: &Url, timeout: Duration) -> HealthProbe {
        let base = vllm_url.as_str().trim_end_matches('/').to_string();
        let join = |path: &str| Target::parse(&format!("{base}{path}")).ok();
        HealthProbe {
            http,
            health: join("/health"),
            models: join("/v1/models"),
            timeout,
        }
    }

    /// True iff `/health` answers 2xx within the timeout. Blocks.
    pub fn is_healthy(&self) -> bool {
        self.start().finish()
    }

    /// Send the probe now; [`Probe::finish`] reads the answer.
    pub fn start(&self) -> Probe {
        let Some(target) = &self.health else {
            return Probe(Err("no /health URL".into()));
        };
        // The body is read (bounded) so the connection can be reused.
        Probe(
            self.http
                .start(Request::get(target), 64 * 1024, self.timeout)
                .map_err(|e| e.to_string()),
        )
    }

    /// The first model id from `/v1/models`, for the registration log line only. Blocks.
    pub fn served_model(&self) -> Option<String> {
        let target = self.models.as_ref()?;
        let response = self
            .http
            .send(Request::get(target), 1024 * 1024, self.timeout)
            .ok()?;
        let value: Value = serde_json::from_slice(&response.body).ok()?;
        value
            .get("data")?
            .as_array()?
            .first()?
            .get("id")?
            .as_str()
            .map(str::to_string)
    }
}
