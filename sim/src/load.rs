//! Open-loop request load on a fake vLLM: completions arriving as a Poisson process at
//! `rps` (gaps drawn from the world's generator), each one validated by mock-vllm's own
//! request rules and submitted to its core. The load generator is the scenario's client,
//! not a peer of the sidecar: its requests do not cross a simulated link.

use std::time::Duration;

use mock_vllm::validate::{Api, Req};
use rand::rngs::StdRng;
use rand::Rng;

use crate::node::NodeId;
use crate::vllm_node::VllmNode;

/// Steady load on one vLLM node until `until`.
#[derive(Debug)]
pub struct Load {
    pub to: NodeId,
    pub rps: f64,
    pub until: Duration,
    /// The request, as mock-vllm parsed it.
    req: Req,
}

impl Load {
    /// `rps` completions per second of `prompt` asking for `max_tokens`, validated by
    /// `vllm`'s rules; a body it refuses is the error.
    pub fn new(
        to: NodeId,
        vllm: &VllmNode,
        rps: f64,
        until: Duration,
        prompt: &str,
        max_tokens: u32,
    ) -> Result<Load, String> {
        let body = serde_json::json!({
            "model": vllm.model(),
            "prompt": prompt,
            "max_tokens": max_tokens,
        })
        .to_string();
        let req = vllm
            .parse(Api::Completions, body.as_bytes())
            .map_err(|e| format!("mock-vllm refused the load's request: {e:?}"))?;
        Ok(Load {
            to,
            rps,
            until,
            req,
        })
    }

    /// The gap to the next arrival: exponential with mean 1/rps.
    pub fn next_gap(&self, rng: &mut StdRng) -> Duration {
        let u: f64 = rng.gen_range(f64::EPSILON..1.0);
        Duration::from_secs_f64((-u.ln() / self.rps.max(1e-9)).min(3600.0))
    }

    /// The request to submit (mock-vllm's `Req` is a plain `Copy` value).
    pub fn request(&self) -> Req {
        self.req
    }
}
