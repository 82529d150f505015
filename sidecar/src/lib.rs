//! `vllm-sidecar`: registers one vLLM server with xllm-service and reports its load.
//!
//! vLLM cannot register itself in etcd, so this program runs beside it: it waits for
//! vLLM's `/health`, puts the instance key in etcd under a lease, keeps the lease alive,
//! scrapes vLLM's `/metrics` and posts heartbeats to the master.
//!
//! # Layout
//!
//! Data flows one way: `/metrics` bytes → [`prom`] (borrowed samples) → [`mapping`]
//! (interval state) → heartbeat body → master.
//!
//! - [`prom`]: the Prometheus / OpenMetrics text parser, lenient and strict:
//!   `prom::parse(text, options)`.
//! - [`mapping`]: from parsed samples to the heartbeat's load and latency metrics, with
//!   the state kept between scrapes: `mapping::Mapper::observe`.
//! - [`tools`]: the `parse` and `preview` subcommands.

pub mod mapping;
pub mod prom;
pub mod tools;
