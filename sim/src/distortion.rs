//! The one seam through which a simulated sidecar's shell may be made to lie to its core
//! or to its peers (test-only: [`crate::planted`]'s bugs are its only users).
//!
//! Why a seam and not branches: the shell ([`crate::sidecar_node::SidecarNode`]) runs the
//! core as the production driver does, and reads the same with or without a distortion:
//! it hands each command, each answer and each restart through the [`Distortion`] it
//! holds, if any, and has no code of its own for any one bug. With none held, every
//! command runs as issued and every answer reaches the core unchanged.

use std::fmt;
use std::time::Duration;

use sidecar::core::{Answer, Command, CommandId, CoreConfig, Registration};

use crate::command_kind::Kind;

/// The id of a command the core never issued: an exchange a distortion sends unasked
/// carries it, and its answer is nobody's.
pub const STRAY: CommandId = CommandId(0);

/// What becomes of a command the core issued.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Run it (as given: possibly rewritten).
    Run(Command),
    /// Do not send it: the core gets this answer to it at once.
    Answered(CommandId, Answer),
}

/// What a restarted process starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    /// Its core's seed.
    pub seed: u64,
    /// The token it sends the master.
    pub token: String,
}

/// A distortion of how one sidecar's shell runs its core.
pub trait Distortion: fmt::Debug {
    /// A command the core issued, given its registration at the time.
    fn command(&mut self, command: Command, reg: &Registration) -> Verdict;

    /// The answer an exchange of `kind` for command `id` gave, before the core gets it;
    /// `None`: the core gets nothing (an exchange it never asked for).
    fn answer(&mut self, id: CommandId, kind: Kind, answer: Answer) -> Option<Answer>;

    /// A command to run now that the core did not issue (its id [`STRAY`]), after the
    /// core's own; asked after every step.
    fn unasked(&mut self, now: Duration, reg: &Registration) -> Option<Command>;

    /// The process continued after being stopped for `stopped`: how much of that the
    /// shell's clock missed (the core is told the time that much behind from now on).
    fn resumed(&mut self, _stopped: Duration) -> Duration {
        Duration::ZERO
    }

    /// The process in this slot is started again with `config`: its start (`previous`:
    /// its last life's seed), and the distortion of the new process.
    fn restart(&self, config: &CoreConfig, previous: u64, start: &mut Start)
        -> Box<dyn Distortion>;
}
