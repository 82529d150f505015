//! mock-vllm: a CPU-only fake vLLM OpenAI server that a sidecar, a router or a load test
//! cannot tell from vLLM except by speed of thought: real queueing and timing, the
//! `/metrics` page of several vLLM releases written byte-for-byte like
//! `prometheus_client`, and scriptable faults.
//!
//! # Layout
//!
//! A clock-free core (state and rules) and an axum shell around it. The core reads no
//! clock, socket or `/proc`: the shell hands it [`clock::Now`] and
//! [`process::ProcessView`] values. No import cycle.
//!
//! Shell:
//! - [`server`]: [`start`] binds and serves; [`MockVllm`] is the handle (stop, crash,
//!   restart, health, faults, gauge overrides, state). Owns the accept loop.
//! - [`routes`]: the router, wiring only. Handlers: [`openai`] (`/v1/completions`,
//!   `/v1/chat/completions`, plain and SSE: queue, sleeps, stats), [`info`] (`/health`,
//!   `/v1/models`, `/version`), [`scrape`] (`/metrics`: snapshot, render, deliver
//!   faults), [`control`] (the `/_mock/*` API), [`instrument`] (the `http_*` layer).
//! - [`body`]: the one capped body reader; [`clock`]: [`clock::Now`], the only clock
//!   reads; [`process`]: what `/proc/self` says (the `process_*` families).
//!
//! Core:
//! - [`core`]: [`core::VllmCore`], one whole fake vLLM in virtual time for simulators:
//!   `submit`/`advance`/`next_event_time` (the load model, `core::load`), `health`,
//!   `metrics` (the page into a reused buffer, faults applied, `core::scrape`),
//!   `crash`/`restart`; built from the modules below, never a second model.
//! - [`state`]: what handlers and handle share (`Shared`, the engines' `Core`,
//!   [`Health`]) and the operations on it, time as an argument; no sockets.
//! - [`sched`]: one engine's slots, KV cache and FIFO queue as a plain state machine
//!   ([`sched::Scheduler`]); [`engine`]: the load model around it, latencies and
//!   waking waiters ([`engine::Engine::admit`]); [`latency`]: prefill and inter-token
//!   times at a batch size ([`latency::Latency`]) and the pretend prefix cache;
//!   [`stats`]: counters and histograms of what happened ([`stats::EngineStats`]).
//! - [`answer`]: a completion's output length and its body or SSE chunks, from its
//!   plan. [`validate`]: vLLM's request rules and errors (`validate::parse`); [`request`]:
//!   bodies decoded without a JSON tree (`request::fields`); [`tokenizer`]: the
//!   4-characters-per-token rule.
//! - [`metrics`]: which families each dialect exports; [`metrics::page`] writes the page
//!   of a [`metrics::Snapshot`] ([`metrics::page_into`]: into a reused buffer).
//!   [`exposition`]: the text and OpenMetrics writers (`floatToGoString` and all; `le`
//!   texts and slow-path floats remembered per thread).
//! - [`scrape_faults`]: what `metrics_*` faults make of a scrape
//!   ([`scrape_faults::ScrapePlan::decide`]); [`faults`]: [`Fault`] (and `hang`).
//! - [`config`]: [`Config`] and [`Dialect`]; [`waveform`]: [`Waveform`] for gauge
//!   overrides; [`error`]: vLLM-shaped error bodies.
//! - [`event`]: every event mock-vllm reports, as one typed value: [`VllmEvent`].

pub mod answer;
pub mod body;
pub mod clock;
pub mod config;
pub mod control;
pub mod core;
pub mod engine;
pub mod error;
pub mod event;
pub mod exposition;
pub mod faults;
pub mod health;
pub mod info;
pub mod instrument;
pub mod latency;
pub mod metrics;
pub mod openai;
pub mod process;
pub mod request;
pub mod routes;
pub mod sched;
pub mod scrape;
pub mod scrape_faults;
pub mod server;
pub mod sleep;
pub mod state;
pub mod stats;
pub mod tokenizer;
pub mod validate;
pub mod waveform;

pub use config::{Config, Dialect};
pub use event::{Lifecycle, VllmEvent};
pub use faults::Fault;
pub use health::Health;
pub use server::{start, MockVllm};
pub use waveform::Waveform;
