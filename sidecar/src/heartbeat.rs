//! The heartbeat POST to the master (contract §3): load and latency metrics for the
//! instance's current incarnation. Liveness is the lease's job; a lost heartbeat only
//! delays fresh load numbers.

use std::time::Duration;

use serde::Serialize;
use url::Url;

use crate::config::Secret;
use crate::http::{snippet, Client, Error as HttpError, Request, Target};
use crate::mapping::{HeartbeatMetrics, LatencyMetrics, LoadMetrics};

/// The body, as the master's protobuf JSON parser reads it.
#[derive(Debug, Clone, Serialize)]
pub struct HeartbeatBody<'a> {
    pub name: &'a str,
    pub incarnation_id: &'a str,
    pub load_metrics: LoadMetrics,
    pub latency_metrics: LatencyMetrics,
}

impl<'a> HeartbeatBody<'a> {
    pub fn new(name: &'a str, incarnation_id: &'a str, metrics: HeartbeatMetrics) -> Self {
        HeartbeatBody {
            name,
            incarnation_id,
            load_metrics: metrics.load_metrics,
            latency_metrics: metrics.latency_metrics,
        }
    }
}

/// What the master said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 200: recorded.
    Ok,
    /// 409: the master does not know this incarnation: register again.
    Conflict,
    /// 401: our token is wrong. Logged; the sidecar keeps running.
    Unauthorized,
    /// Anything else, with a short excerpt of the body.
    Other(u16, String),
}

impl Answer {
    /// The label value in the sidecar's own metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Answer::Ok => "ok",
            Answer::Conflict => "conflict",
            Answer::Unauthorized => "unauthorized",
            Answer::Other(..) => "other",
        }
    }
}

/// Posts heartbeats to one master.
#[derive(Clone)]
pub struct HeartbeatClient {
    http: Client,
    target: Result<Target, String>,
    token: Secret,
    timeout: Duration,
}

impl std::fmt::Debug for HeartbeatClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeartbeatClient")
            .field("url", &self.target.as_ref().map(|t| t.url().as_str()))
            .field("token", &self.token)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl HeartbeatClient {
    pub fn new(http: Client, url: Url, token: Secret, timeout: Duration) -> HeartbeatClient {
        HeartbeatClient {
            http,
            target: Target::new(&url),
            token,
            timeout,
        }
    }

    /// POST one heartbeat. `Err` is a transport failure (no answer within the timeout).
    /// Blocks.
    pub fn send(&self, body: &HeartbeatBody<'_>) -> Result<Answer, String> {
        let target = self.target.as_ref().map_err(Clone::clone)?;
        let json = serde_json::to_vec(body).map_err(|e| format!("encoding the body: {e}"))?;
        let token = (!self.token.is_empty()).then(|| ("x-internal-token", self.token.expose()));
        let request = Request::post_json(target, &json).headers(token.as_slice());
        let response = self
            .http
            .send(request, 64 * 1024, self.timeout)
            .map_err(|e| match e {
                HttpError::TimedOut(t) => format!("no answer within {t:?}"),
                e => e.to_string(),
            })?;
        Ok(match response.head.status {
            200 => Answer::Ok,
            409 => Answer::Conflict,
            401 => Answer::Unauthorized,
            other => Answer::Other(other, snippet(&response.body, 120)),
        })
    }
}
