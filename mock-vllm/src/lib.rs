//! mock-vllm: a CPU-only fake vLLM OpenAI server that a sidecar, a router or a load test
//! cannot tell from vLLM except by speed of thought: real queueing and timing, the
//! `/metrics` page of several vLLM releases written byte-for-byte like
//! `prometheus_client`, and scriptable faults.
//!
//! # Layout
//!
//! - [`config`]: [`Config`] (capacity, latency model, seed) and [`Dialect`].
//! - [`server`]: [`start`] binds and serves; [`MockVllm`] is the handle (stop, crash,
//!   restart, health, faults, gauge overrides, state). Owns the accept loop.
//! - [`state`]: what handlers and handle share (`Shared`, the engines' `Core`,
//!   [`Health`]) and the operations on it; no sockets.
//! - [`routes`]: the router (wiring only). [`info`]: `/health`, `/v1/models`,
//!   `/version`; [`scrape`]: `/metrics` and its faults; [`instrument`]: the `http_*`
//!   instrumentation layer.
//! - [`openai`]: `/v1/completions` and `/v1/chat/completions`, plain and SSE;
//!   [`request`]: their bodies decoded without a JSON tree (`request::fields`);
//!   [`validate`]: vLLM's request rules and errors (`validate::parse`), pure.
//! - [`engine`]: the load model of one engine: slots, FIFO queue, KV cache, latencies
//!   ([`engine::Engine::admit`]).
//! - [`stats`]: counters and histograms of what really happened
//!   ([`stats::EngineStats`]).
//! - [`metrics`]: which families each dialect exports; [`exposition`]: the text and
//!   OpenMetrics writers (`floatToGoString` and all).
//! - [`faults`]: [`Fault`]; [`waveform`]: [`Waveform`] for gauge overrides.
//! - [`control`]: the `/_mock/*` API; [`error`]: vLLM-shaped error bodies; [`body`]:
//!   the capped body reader.
//! - [`tokenizer`]: the deterministic 4-characters-per-token rule.
//! - [`clock`]: [`clock::Now`], the only clock reads; [`process`]: what `/proc/self` says (the
//!   `process_*` families).

pub mod body;
pub mod clock;
pub mod config;
pub mod control;
pub mod engine;
pub mod error;
pub mod exposition;
pub mod faults;
pub mod info;
pub mod instrument;
pub mod metrics;
pub mod openai;
pub mod process;
pub mod request;
pub mod routes;
pub mod scrape;
pub mod scrape_faults;
pub mod server;
pub mod state;
pub mod stats;
pub mod tokenizer;
pub mod validate;
pub mod waveform;

pub use config::{Config, Dialect};
pub use faults::Fault;
pub use server::{start, MockVllm};
pub use state::Health;
pub use waveform::Waveform;
