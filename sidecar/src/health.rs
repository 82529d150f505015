//! vLLM's `/health`: the lease proves the sidecar is alive, this proves vLLM is, so a dead
//! engine beside a live sidecar is never left routable.

use std::time::Duration;

use reqwest::Url;
use serde_json::Value;

use crate::http::read_capped;

/// Probes one vLLM server.
#[derive(Debug, Clone)]
pub struct HealthProbe {
    http: reqwest::Client,
    health_url: Url,
    models_url: Url,
    timeout: Duration,
}

impl HealthProbe {
    pub fn new(http: reqwest::Client, vllm_url: &Url, timeout: Duration) -> HealthProbe {
        let base = vllm_url.as_str().trim_end_matches('/').to_string();
        let join =
            |path: &str| Url::parse(&format!("{base}{path}")).unwrap_or_else(|_| vllm_url.clone());
        HealthProbe {
            http,
            health_url: join("/health"),
            models_url: join("/v1/models"),
            timeout,
        }
    }

    /// True iff `/health` answers 2xx within the timeout.
    pub async fn is_healthy(&self) -> bool {
        let probe = async {
            let response = self.http.get(self.health_url.clone()).send().await?;
            let ok = response.status().is_success();
            // Drain (bounded) so the connection can be reused.
            let _ = read_capped(response, 64 * 1024).await;
            Ok::<bool, reqwest::Error>(ok)
        };
        match tokio::time::timeout(self.timeout, probe).await {
            Ok(Ok(ok)) => ok,
            Ok(Err(e)) => {
                tracing::debug!(error = %crate::http::describe(e), "vLLM health probe failed");
                false
            }
            Err(_) => {
                tracing::debug!("vLLM health probe timed out");
                false
            }
        }
    }

    /// The first model id from `/v1/models`, for the registration log line only.
    pub async fn served_model(&self) -> Option<String> {
        let fetch = async {
            let response = self.http.get(self.models_url.clone()).send().await.ok()?;
            let bytes = read_capped(response, 1024 * 1024).await.ok()?;
            let value: Value = serde_json::from_slice(&bytes).ok()?;
            value
                .get("data")?
                .as_array()?
                .first()?
                .get("id")?
                .as_str()
                .map(str::to_string)
        };
        tokio::time::timeout(self.timeout, fetch)
            .await
            .ok()
            .flatten()
    }
}
