//! What a heartbeat meets before its body is read, decided without I/O or clock: the
//! armed faults (a delay, then a chosen status) and the token check. Shared by the HTTP
//! shell ([`crate::heartbeat`], which reads the body only if the gate lets it through)
//! and by [`crate::core::MasterCore::on_heartbeat`].

use std::time::Duration;

use mock_kit::FaultRegistry;

use crate::auth::Token;
use crate::beat::{self, Answer};
use crate::fault::Fault;

/// An answer given before the body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub body: &'static str,
    /// Whether an armed fault chose the status.
    pub fault: bool,
}

/// The token and the faults (both shared: clones see the same ones).
#[derive(Debug, Clone, Default)]
pub struct Gate {
    pub token: Token,
    pub faults: FaultRegistry<Fault>,
}

impl Gate {
    /// At `now` (in the faults' time base), with `presented` as the token header read
    /// (see [`crate::auth::presented`]): the delay an armed latency fault adds, and the
    /// answer if the request stops here (an armed status, else 401 on a bad token).
    pub fn check(
        &self,
        now: Duration,
        presented: Option<&[u8]>,
    ) -> (Option<Duration>, Option<Refusal>) {
        check(&self.token, &self.faults, now, presented)
    }
}

/// [`Gate::check`] on the parts (the HTTP shell keeps them apart in its state).
pub fn check(
    token: &Token,
    faults: &FaultRegistry<Fault>,
    now: Duration,
    presented: Option<&[u8]>,
) -> (Option<Duration>, Option<Refusal>) {
    let delay = faults
        .fire_at(now, |f| match f {
            Fault::Latency { ms } => Some(*ms),
            _ => None,
        })
        .map(Duration::from_millis);
    let armed = faults.fire_at(now, |f| match f {
        Fault::HeartbeatStatus { status } => Some(*status),
        _ => None,
    });
    if let Some(status) = armed {
        // A final answer must be 2xx..5xx; anything else armed becomes a 500.
        let status = Some(status)
            .filter(|s| (200..=599).contains(s))
            .unwrap_or(500);
        let refusal = Refusal {
            status,
            body: beat::body_for(status),
            fault: true,
        };
        return (delay, Some(refusal));
    }
    if !token.admits(presented) {
        let a = Answer::InvalidToken;
        let refusal = Refusal {
            status: a.status(),
            body: a.body(),
            fault: false,
        };
        return (delay, Some(refusal));
    }
    (delay, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_then_token() {
        let ms = Duration::from_millis;
        let gate = Gate {
            token: Token::new(Some("s".into())),
            faults: FaultRegistry::new(),
        };
        assert_eq!(gate.check(ms(0), Some(b"s")), (None, None));
        let (_, r) = gate.check(ms(0), Some(b"x"));
        assert_eq!(r.map(|r| (r.status, r.fault)), Some((401, false)));
        gate.faults
            .add_at(ms(0), Fault::Latency { ms: 250 }, Some(1), None);
        gate.faults.add_at(
            ms(0),
            Fault::HeartbeatStatus { status: 409 },
            None,
            Some(ms(10)),
        );
        let (delay, r) = gate.check(ms(5), None);
        assert_eq!(delay, Some(ms(250)));
        assert_eq!(
            r,
            Some(Refusal {
                status: 409,
                body: beat::body_for(409),
                fault: true
            })
        );
        // The status fault ran out at 10 ms; the latency one after one use.
        assert_eq!(gate.check(ms(10), Some(b"s")), (None, None));
        gate.faults
            .add_at(ms(10), Fault::HeartbeatStatus { status: 42 }, Some(1), None);
        assert_eq!(gate.check(ms(10), None).1.map(|r| r.status), Some(500));
    }
}
