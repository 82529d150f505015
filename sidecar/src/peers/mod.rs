//! The sidecar's three peers over HTTP, on reqwest: etcd's v3 JSON gateway
//! ([`etcd::EtcdClient`]), vLLM ([`vllm::VllmClient`]) and the master's heartbeat
//! endpoint ([`master::MasterClient`]), all built on clients from [`http::build_client`].
//!
//! Why they are thin and hold no decisions: the decision core decides when to probe,
//! register, refresh, scrape, post or revoke, and must run the same in simulated time.
//! These clients only turn one command into one exchange (or one call through every etcd
//! endpoint) and its answer into a typed result: every timeout, size cap, endpoint order
//! and error class lives here, every "what next" lives in the core.

pub mod etcd;
pub mod http;
pub mod master;
pub mod vllm;
