//! `scenarios explore`: random fault schedules in virtual time, every invariant on, and
//! a minimal replayable scenario for each violation.
//!
//! Hand-written scenarios find the failures someone thought of; this searches for the
//! others, as deterministic-simulation testing does: a seed gives a random cluster and
//! fault schedule ([`generate`]), kept as data that renders to an ordinary scenario
//! file ([`schedule`]); each runs in the simulation; a failed invariant is shrunk to a
//! small schedule that fails the same way ([`shrink`]) and written with the commands
//! that replay it. A sweep ([`sweep`]) records what it covered ([`coverage`]) and what
//! it found in a JSON summary that shards of one sweep merge ([`summary`]).
//!
//! # Layout
//!
//! - [`generate`]: seed → [`schedule::Schedule`]: [`generate::generate`].
//! - [`swarm`]: a seed's enabled fault kinds and intensities: [`swarm::Mix::draw`].
//! - [`schedule`]: the schedule as data, its edits and its TOML: [`schedule::Schedule::to_toml`].
//! - [`shrink`]: greedy shrinking against a judge closure: [`shrink::shrink`].
//! - [`coverage`]: fault kind × sidecar phase counts: [`coverage::Coverage`].
//! - [`recovery_stats`]: recovery times per fault kind, mergeable: [`recovery_stats::RecoveryStats`].
//! - [`summary`]: `summary.json`, shards and merging: [`summary::merge_dirs`].
//! - [`sweep`]: seeds on worker threads, findings written: [`sweep::sweep`].

pub mod coverage;
pub mod generate;
pub mod recovery_stats;
pub mod schedule;
pub mod shrink;
pub mod summary;
pub mod swarm;
pub mod sweep;
