//! The simulated sidecar's etcd client: the production client's own call plan
//! (`sidecar::peers::etcd::plan`: the request bodies, endpoint order and failover,
//! authentication and one re-authentication on a rejected token), its typed decoding
//! (`sidecar::peers::etcd::decode`) and the driver's mapping of the result to the core's
//! answer (`sidecar::driver::answers`), carried out over simulated links (each
//! endpoint a link of its own to the one etcd: [`crate::node::NodeId::EtcdEndpoint`]).
//! Nothing is restated here: this only turns the plan's steps into exchanges and their
//! outcomes into what a transport saw.

use std::time::Duration;

use sidecar::config::Config;
use sidecar::core::{Answer, CommandId};
use sidecar::driver::answers;
use sidecar::peers::etcd::plan::{Call, CallError, Session, Step};
use sidecar::peers::etcd::{decode, EtcdRequest, Exchange};
use sidecar::peers::http::display_url;

use crate::command_kind::EtcdCall;
use crate::node::{Failure, NodeId, Outcome, Reply, Request};

/// What a call needs next.
#[derive(Debug)]
pub enum Progress {
    /// An exchange with `to` (one etcd endpoint), failing after `timeout`; `log`: the
    /// client's info line, if any.
    Send {
        to: NodeId,
        request: Request,
        timeout: Duration,
        log: Option<String>,
    },
    /// The call is over: the core's answer.
    Done(Answer),
}

struct InFlight {
    id: CommandId,
    kind: EtcdCall,
    call: Call,
    endpoint: usize,
    timeout: Duration,
}

/// One sidecar's etcd client: its session (preferred endpoint, token) and its calls
/// under way.
pub struct EtcdClient {
    session: Session,
    calls: Vec<InFlight>,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient")
            .field("preferred", &self.session.preferred())
            .field("calls", &self.calls.len())
            .finish_non_exhaustive()
    }
}

impl EtcdClient {
    /// The client the sidecar with `config` builds.
    pub fn new(config: &Config) -> EtcdClient {
        let shown = config.etcd_endpoints.iter().map(display_url).collect();
        let mut session = Session::new(
            shown,
            config.etcd_username.clone(),
            config.etcd_password.clone(),
            config.etcd_timeout,
        );
        // As the driver builds its client (`driver/exec.rs`).
        session.set_failover_after(config.keepalive_period());
        EtcdClient {
            session,
            calls: Vec::new(),
        }
    }

    /// The process is gone: its calls under way are forgotten (a restart builds a new
    /// client).
    pub fn clear(&mut self) {
        self.calls.clear();
    }

    /// Start command `id`'s call.
    pub fn start(&mut self, id: CommandId, kind: EtcdCall, request: &EtcdRequest) -> Progress {
        let mut call = Call::new(request);
        let step = call.start(&mut self.session);
        let flight = InFlight {
            id,
            kind,
            call,
            endpoint: 0,
            timeout: Duration::ZERO,
        };
        self.advance(flight, step)
    }

    /// The exchange of command `id`'s call ended with `outcome` (`None`: no such call).
    pub fn on_outcome(&mut self, id: CommandId, outcome: Outcome) -> Option<Progress> {
        let at = self.calls.iter().position(|c| c.id == id)?;
        let mut flight = self.calls.swap_remove(at);
        let timeout = flight.timeout;
        let exchange: Exchange<'_> = match &outcome {
            Outcome::Reply(Reply::Gateway { status, body }) => Ok((*status, body.as_slice())),
            Outcome::Reply(other) => Err(format!("unexpected answer {other:?}")),
            Outcome::Failed(Failure::Timeout) => Err(format!("no answer within {timeout:?}")),
            Outcome::Failed(f) => Err(f.describe()),
        };
        let step = flight
            .call
            .feed(&mut self.session, flight.endpoint, exchange);
        Some(self.advance(flight, step))
    }

    fn advance(&mut self, mut flight: InFlight, step: Step) -> Progress {
        match step {
            Step::Done(done) => Progress::Done(answer(flight.kind, done)),
            Step::Send(send) => {
                let request = Request::Etcd {
                    path: send.path,
                    body: flight.call.body().clone(),
                    token: send.token.map(|t| t.expose().to_string()),
                };
                let log = send.reauthenticating.map(|reason| {
                    format!("etcd rejected the auth token, authenticating again: {reason}")
                });
                flight.endpoint = send.endpoint;
                flight.timeout = send.timeout;
                self.calls.push(flight);
                Progress::Send {
                    to: NodeId::etcd_endpoint(send.endpoint),
                    request,
                    timeout: send.timeout,
                    log,
                }
            }
        }
    }
}

/// The core's answer to a finished call of `kind`.
fn answer(kind: EtcdCall, done: Result<Vec<u8>, CallError>) -> Answer {
    match kind {
        EtcdCall::Grant { ttl } => answers::grant(decode::lease_grant(done), ttl),
        EtcdCall::Put => answers::put(decode::put(done)),
        EtcdCall::Keepalive => answers::keepalive(decode::lease_keepalive(done)),
        EtcdCall::Revoke => answers::revoke(decode::lease_revoke(done)),
        EtcdCall::MasterRead => answers::master_key(decode::range(done)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_tries_each_endpoint_and_a_timeout_leaves_the_lease_possibly_alive() {
        let config = Config::from_flags([
            "--etcd-endpoints",
            "127.0.0.1:2379,127.0.0.1:2380",
            "--register-addr",
            "a:1",
        ])
        .unwrap();
        let mut client = EtcdClient::new(&config);
        let id = CommandId(5);
        let first = client.start(
            id,
            EtcdCall::Keepalive,
            &EtcdRequest::Keepalive { lease: 9 },
        );
        let Progress::Send {
            to,
            request,
            timeout,
            log,
        } = first
        else {
            panic!("{first:?}");
        };
        assert_eq!((to, log), (NodeId::Etcd, None));
        // Another endpoint remains: at most the keepalive period (2 s), not the 3 s.
        assert_eq!(timeout, Duration::from_secs(2));
        let body = "{\"ID\":\"9\"}".into();
        let path = "/v3/lease/keepalive";
        let token = None;
        assert_eq!(request, Request::Etcd { path, body, token });
        let second = client.on_outcome(id, Outcome::Failed(Failure::Timeout));
        let Some(Progress::Send { to, timeout, .. }) = second else {
            panic!("{second:?}");
        };
        assert_eq!(
            (to, timeout),
            (NodeId::EtcdEndpoint(1), Duration::from_secs(3))
        );
        let done = client.on_outcome(id, Outcome::Failed(Failure::Refused));
        let Some(Progress::Done(Answer::KeepaliveFailed(m))) = done else {
            panic!("{done:?}");
        };
        assert!(
            m.contains("all endpoints failed for /v3/lease/keepalive"),
            "{m}"
        );
        assert!(m.contains("http://127.0.0.1:2380/: "), "{m}");
        assert!(client
            .on_outcome(id, Outcome::Failed(Failure::Refused))
            .is_none());
    }
}
