//! What vLLM's `/health` endpoint does, as the control API sets it and the events name it.

use serde::{Deserialize, Serialize};

/// What `/health` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Up,
    /// 503.
    Down,
    /// Never answers.
    Hang,
}

impl Health {
    pub(crate) fn code(self) -> u8 {
        match self {
            Health::Up => 0,
            Health::Down => 1,
            Health::Hang => 2,
        }
    }

    pub(crate) fn from_code(c: u8) -> Self {
        match c {
            1 => Health::Down,
            2 => Health::Hang,
            _ => Health::Up,
        }
    }
}
