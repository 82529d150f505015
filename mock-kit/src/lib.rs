//! Plumbing shared by `mock-etcd`, `mock-vllm` and `mock-master`, so that the three fakes
//! serve, shut down, take faults and report events the same way, with one convention
//! for every fake's control API (`/_mock/...`, [`faults`]).
//!
//! # Layout
//!
//! - [`cli`]: what the three binaries share: flags parsed with one usage-error exit
//!   ([`cli::parse_or_exit`]) and the SIGTERM/SIGINT stop ([`cli::stop_signal`]).
//! - [`shutdown`]: [`Shutdown`], the explicit stop signal every loop selects on.
//! - [`serve`]: [`serve::spawn`] binds nothing itself: it serves a router on a listener
//!   the caller bound and answers a [`ServerHandle`] (address, stop, join).
//! - [`faults`]: [`FaultRegistry`], armed faults with an id, a use count and a deadline,
//!   plus the generic `/_mock/faults` routes; time as an argument in
//!   [`FaultRegistry::fire_at`] and its siblings (`add_at`, `any_at`, `list_at`).
//! - [`freeze`]: [`Freeze`], an in-process fake stopped as by `SIGSTOP`: requests held
//!   ([`freeze::hold_requests`]) and background loops waiting ([`Freeze::thawed`]).
//! - [`events`]: [`Event`] and the [`EventSink`] trait through which a fake reports what
//!   happened to it; scenarios merge these into one timeline. Virtual timestamps through
//!   [`Events::with_clock`] or [`Events::emit_at`].
//! - [`fake_event`]: [`FakeEvent`], a fake's event as a typed value (kind and detail),
//!   emitted in one call with [`Events::emit_event`].

pub mod cli;
pub mod events;
pub mod fake_event;
pub mod faults;
pub mod freeze;
pub mod serve;
pub mod shutdown;

pub use events::{Event, EventSink, Events};
pub use fake_event::FakeEvent;
pub use faults::{FaultRegistry, MAX_FAULT_BODY};
pub use freeze::Freeze;
pub use serve::ServerHandle;
pub use shutdown::Shutdown;
