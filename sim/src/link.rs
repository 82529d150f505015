//! Simulated links with the TCP fault proxy's vocabulary (`scenarios/src/proxy.rs`):
//! latency with jitter, bandwidth, blackhole, reset, refuse, one-way partition, heal.
//!
//! A link joins a client node to a server node. Its fault is named as the proxy names it
//! (the same serde form, so a scenario's `fault = { latency = { ms = 100 } }` reads the
//! same here), and each message crosses it in one direction: a request client → server
//! ([`Direction::ToTarget`]), its answer server → client ([`Direction::FromTarget`]).
//! [`LinkFault::leg`] decides what happens to one message; what happens to exchanges
//! already under way when the fault changes is the proxy's too:
//!
//! - `reset` and `refuse` kill open connections: every exchange in flight on the link
//!   fails at once (the caller sees a reset), new ones fail at once (reset / refused);
//! - `blackhole` swallows every message; when it heals, the proxy closes the swallowed
//!   connections, so the exchanges stuck in it fail at that moment;
//! - a one-way partition drops messages one way and leaves connections open: a request
//!   lost on the way in, or an answer lost on the way out (after the server acted on the
//!   request), leaves the caller to its own timeout.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::node::NodeId;

/// What a link does wrong; `Heal` is the absence of a fault. The proxy's `LinkFault`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum LinkFault {
    Heal,
    /// Delay every message by `ms` plus a uniform random `0..=jitter_ms`.
    Latency {
        ms: u64,
        #[serde(default)]
        jitter_ms: u64,
    },
    /// At most this many bytes per second: a message takes its size / rate.
    Bandwidth {
        bytes_per_sec: u64,
    },
    /// Swallow every message; never answer.
    Blackhole,
    /// Reset open connections and every new one.
    Reset,
    /// Refuse connects.
    Refuse,
    /// Drop messages flowing one way; connections stay open.
    Partition {
        direction: Direction,
    },
}

/// Which way a message flows, from the client's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Client → server: requests.
    ToTarget,
    /// Server → client: answers.
    FromTarget,
}

/// What happens to one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leg {
    /// Arrives after this long.
    Deliver(Duration),
    /// Never arrives (blackhole: `stuck` until the link heals; partition: for good).
    Lost { stuck: bool },
    /// The connection is reset at once.
    Reset,
    /// The connect is refused at once.
    Refused,
}

impl LinkFault {
    /// The fate of a message of `bytes` bytes sent `dir` over a link with this fault and
    /// a healthy one-way delay of `base`. Jitter is drawn from `rng` (only when nonzero,
    /// so a run without jitter draws nothing here).
    pub fn leg(&self, dir: Direction, bytes: usize, base: Duration, rng: &mut StdRng) -> Leg {
        match self {
            LinkFault::Heal => Leg::Deliver(base),
            LinkFault::Latency { ms, jitter_ms } => {
                let extra = (*jitter_ms > 0).then(|| rng.gen_range(0..=*jitter_ms));
                let extra = extra.unwrap_or(0);
                Leg::Deliver(base + Duration::from_millis(ms.saturating_add(extra)))
            }
            LinkFault::Bandwidth { bytes_per_sec } => {
                let secs = bytes as f64 / (*bytes_per_sec).max(1) as f64;
                Leg::Deliver(base + Duration::from_secs_f64(secs.min(60.0)))
            }
            LinkFault::Blackhole => Leg::Lost { stuck: true },
            LinkFault::Partition { direction } if *direction == dir => Leg::Lost { stuck: false },
            LinkFault::Partition { .. } => Leg::Deliver(base),
            // Only new connections meet these: open ones were reset when the fault was
            // set (see `Links::set`).
            LinkFault::Reset => Leg::Reset,
            LinkFault::Refuse => match dir {
                Direction::ToTarget => Leg::Refused,
                Direction::FromTarget => Leg::Reset,
            },
        }
    }
}

/// What changing a link's fault does to the exchanges under way on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnChange {
    Nothing,
    /// Every exchange in flight fails now with a reset.
    ResetOpen,
    /// The exchanges stuck in the blackhole fail now (the proxy closes them).
    CloseStuck,
}

/// Every link's fault, by (client, server); a pair never set is healthy.
#[derive(Debug, Clone)]
pub struct Links {
    faults: BTreeMap<(NodeId, NodeId), LinkFault>,
    /// The one-way delay of a healthy link.
    pub base: Duration,
}

impl Links {
    pub fn new(base: Duration) -> Links {
        Links {
            faults: BTreeMap::new(),
            base,
        }
    }

    /// The fault on the link from `client` to `server`.
    pub fn fault(&self, client: NodeId, server: NodeId) -> &LinkFault {
        self.faults
            .get(&(client, server))
            .unwrap_or(&LinkFault::Heal)
    }

    /// Replace the link's fault; says what becomes of the exchanges under way.
    pub fn set(&mut self, client: NodeId, server: NodeId, fault: LinkFault) -> OnChange {
        let was = self.fault(client, server).clone();
        // `reset` and `refuse` kill the connections open on the link.
        let change = if matches!(fault, LinkFault::Reset | LinkFault::Refuse) {
            OnChange::ResetOpen
        } else if was == LinkFault::Blackhole && fault != LinkFault::Blackhole {
            OnChange::CloseStuck
        } else {
            OnChange::Nothing
        };
        if fault == LinkFault::Heal {
            self.faults.remove(&(client, server));
        } else {
            self.faults.insert((client, server), fault);
        }
        change
    }

    /// The fate of one message between `client` and `server` going `dir`.
    pub fn leg(
        &self,
        client: NodeId,
        server: NodeId,
        dir: Direction,
        bytes: usize,
        rng: &mut StdRng,
    ) -> Leg {
        self.fault(client, server).leg(dir, bytes, self.base, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(1)
    }

    const BASE: Duration = Duration::from_micros(100);

    #[test]
    fn heal_delivers_after_the_base_delay() {
        let leg = LinkFault::Heal.leg(Direction::ToTarget, 10, BASE, &mut rng());
        assert_eq!(leg, Leg::Deliver(BASE));
    }

    #[test]
    fn latency_adds_jitter_within_bounds_and_varies() {
        let fault = LinkFault::Latency {
            ms: 100,
            jitter_ms: 20,
        };
        let mut rng = rng();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let Leg::Deliver(d) = fault.leg(Direction::FromTarget, 1, BASE, &mut rng) else {
                panic!("latency must deliver");
            };
            assert!(d >= BASE + Duration::from_millis(100));
            assert!(d <= BASE + Duration::from_millis(120));
            seen.insert(d);
        }
        assert!(seen.len() > 5, "jitter should vary: {seen:?}");
    }

    #[test]
    fn bandwidth_delays_by_size() {
        let fault = LinkFault::Bandwidth {
            bytes_per_sec: 1000,
        };
        let leg = fault.leg(Direction::FromTarget, 500, Duration::ZERO, &mut rng());
        assert_eq!(leg, Leg::Deliver(Duration::from_millis(500)));
    }

    #[test]
    fn blackhole_swallows_both_ways_until_healed() {
        for dir in [Direction::ToTarget, Direction::FromTarget] {
            let leg = LinkFault::Blackhole.leg(dir, 1, BASE, &mut rng());
            assert_eq!(leg, Leg::Lost { stuck: true });
        }
        let mut links = Links::new(BASE);
        let (c, s) = (NodeId::Sidecar(0), NodeId::Etcd);
        assert_eq!(links.set(c, s, LinkFault::Blackhole), OnChange::Nothing);
        assert_eq!(links.set(c, s, LinkFault::Heal), OnChange::CloseStuck);
        assert_eq!(links.fault(c, s), &LinkFault::Heal);
    }

    #[test]
    fn reset_and_refuse_fail_at_once_and_kill_open_connections() {
        let mut links = Links::new(BASE);
        let (c, s) = (NodeId::Sidecar(0), NodeId::Master);
        assert_eq!(links.set(c, s, LinkFault::Reset), OnChange::ResetOpen);
        assert_eq!(
            links.leg(c, s, Direction::ToTarget, 1, &mut rng()),
            Leg::Reset
        );
        assert_eq!(links.set(c, s, LinkFault::Refuse), OnChange::ResetOpen);
        assert_eq!(
            links.leg(c, s, Direction::ToTarget, 1, &mut rng()),
            Leg::Refused
        );
    }

    #[test]
    fn partition_is_one_way_and_per_link() {
        let mut links = Links::new(BASE);
        let (c, s) = (NodeId::Sidecar(1), NodeId::Vllm(1));
        let fault = LinkFault::Partition {
            direction: Direction::FromTarget,
        };
        assert_eq!(links.set(c, s, fault), OnChange::Nothing);
        let mut r = rng();
        assert_eq!(
            links.leg(c, s, Direction::ToTarget, 1, &mut r),
            Leg::Deliver(BASE)
        );
        assert_eq!(
            links.leg(c, s, Direction::FromTarget, 1, &mut r),
            Leg::Lost { stuck: false }
        );
        // Another link is untouched.
        assert_eq!(
            links.leg(NodeId::Sidecar(0), s, Direction::FromTarget, 1, &mut r),
            Leg::Deliver(BASE)
        );
    }

    #[test]
    fn faults_read_as_the_proxy_writes_them() {
        let f: LinkFault =
            serde_json::from_str(r#"{"latency":{"ms":100,"jitter_ms":20}}"#).unwrap();
        assert_eq!(
            f,
            LinkFault::Latency {
                ms: 100,
                jitter_ms: 20
            }
        );
        let f: LinkFault =
            serde_json::from_str(r#"{"partition":{"direction":"to_target"}}"#).unwrap();
        assert_eq!(
            f,
            LinkFault::Partition {
                direction: Direction::ToTarget
            }
        );
        assert_eq!(
            serde_json::from_str::<LinkFault>(r#""blackhole""#).unwrap(),
            LinkFault::Blackhole
        );
    }
}
