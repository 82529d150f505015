//! The sidecar's three peers over HTTP, on reqwest: etcd's v3 JSON gateway
//! ([`etcd::EtcdClient`]), vLLM ([`vllm::VllmClient`]) and the master's heartbeat
//! endpoint ([`master::MasterClient`]), all built on clients from [`http::build_client`].
//!
//! Why they are thin and hold no decisions: the decision core decides when to probe,
//! register, refresh, scrape, post or revoke, and must run the same in simulated time.
//! These clients only turn one command into one exchange (or one call through every etcd
//! endpoint) and its answer into a typed result: every timeout, size cap, endpoint order
//! and error class lives here, every "what next" lives in the core. What a vLLM or
//! master exchange's outcome means is a pure function of an [`exchange::Exchange`]
//! (as etcd's calls are [`etcd::plan`]), so a simulator runs the same classification.
//!
//! Wiring them (two reqwest clients: GETs to vLLM follow redirects, POSTs never do):
//!
//! ```no_run
//! use std::time::Duration;
//! use sidecar::config::Secret;
//! use sidecar::peers::{etcd::EtcdClient, http, master::MasterClient, vllm::VllmClient};
//!
//! # async fn wire() -> Result<(), String> {
//! let gets = http::build_client(http::Redirects::Follow)?;
//! let posts = http::build_client(http::Redirects::Never)?;
//! let url = |s: &str| url::Url::parse(s).map_err(|e| e.to_string());
//! let etcd = EtcdClient::new(
//!     vec![url("http://127.0.0.1:2379")?],
//!     String::new(),           // no etcd auth
//!     Secret::default(),
//!     Duration::from_secs(3),  // --etcd-timeout, per endpoint attempt
//!     posts.clone(),
//! );
//! let vllm = VllmClient::new(
//!     gets,
//!     &url("http://127.0.0.1:18000")?,
//!     url("http://127.0.0.1:18000/metrics")?,
//!     Duration::from_secs(3),  // --health-timeout
//!     Duration::from_secs(3),  // scrape timeout
//!     8 << 20,                 // --metrics-max-bytes
//! );
//! let master = MasterClient::new(
//!     posts,
//!     url("http://127.0.0.1:9998/v1/internal/heartbeat")?,
//!     Secret::default(),
//!     Duration::from_secs(3),
//! );
//! vllm.probe_health().await?;
//! let lease = etcd.lease_grant(6).await.map_err(|e| e.to_string())?;
//! let page = vllm.fetch_metrics().await.map_err(|e| e.to_string())?;
//! let status = master.post_heartbeat(String::from("{}")).await?;
//! # let _ = (lease, page, status);
//! # Ok(())
//! # }
//! ```

pub mod etcd;
pub mod exchange;
pub mod http;
pub mod master;
pub mod vllm;
