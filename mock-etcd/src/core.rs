//! [`EtcdCore`]: the whole fake etcd as one value, without sockets or clocks.
//!
//! Why a module of its own: a simulator must run the fake's own rules in virtual time,
//! and the HTTP shell must run the very same ones. Every gateway operation is a method
//! that is given the time (`now`, a [`Duration`] since an arbitrary start) and the
//! token the client sent, checks in etcd's order (size limits, the request's own
//! fields, the token, the raft limit for writes) and answers the gateway's message.
//! Lease expiry happens only when the caller says so ([`EtcdCore::expire_due`]); token
//! letters come from a generator seeded by the caller; watch answers go to a
//! [`WatchSink`] of the caller's choosing. Same calls, same times, same seed: same
//! answers. The wire form of the calls is [`crate::calls`].

use std::sync::Arc;
use std::time::Duration;

use crate::alarm::{self, Alarms};
use crate::answers::*;
use crate::codec::Header;
use crate::config::Config;
use crate::data::Data;
use crate::decode;
use crate::error::EtcdError;
use crate::kv_ops::{self, DeleteRangeResponse, PutResponse, RangeResponse, TxnResponse};
use crate::permits::Permits;
use crate::requests::*;
use crate::size;
use crate::store::Lease;
use crate::tokens::Auth;
use crate::watchers::{self, WatchResponse, WatchSink};

/// The fake etcd's state and rules: data, revisions, leases, watchers, auth tokens.
pub struct EtcdCore {
    config: Config,
    data: Data,
    auth: Auth,
    alarms: Alarms,
}

/// One open watch stream: its watchers share a sink, automatic IDs and the outcome
/// of the token check made when it opened. Made by [`EtcdCore::watch_open`].
pub struct WatchStream {
    id: u64,
    next_id: i64,
    /// The stream's user, or why its token was refused.
    access: Result<Option<String>, EtcdError>,
    sink: Arc<dyn WatchSink>,
}

impl WatchStream {
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl EtcdCore {
    /// `epoch_ms`: a wall-clock reading (ms since the Unix epoch) that auto lease IDs
    /// start from, as etcd's do; `seed`: the generator of token letters.
    pub fn new(config: Config, epoch_ms: u64, seed: u64) -> Self {
        let header = Header {
            cluster_id: config.cluster_id,
            member_id: config.member_id,
            revision: 0,
            raft_term: config.raft_term,
        };
        EtcdCore {
            data: Data::new(&config, header, epoch_ms),
            auth: Auth::new(&config.users, config.token_ttl, seed),
            alarms: Alarms::default(),
            config,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The keys, history, leases and watchers (read-only).
    pub fn data(&self) -> &Data {
        &self.data
    }

    pub fn data_mut(&mut self) -> &mut Data {
        &mut self.data
    }

    pub fn auth(&self) -> &Auth {
        &self.auth
    }

    pub fn auth_mut(&mut self) -> &mut Auth {
        &mut self.auth
    }

    pub fn alarms(&self) -> &Alarms {
        &self.alarms
    }

    pub fn alarms_mut(&mut self) -> &mut Alarms {
        &mut self.alarms
    }

    /// The database size the quota is checked against (`status`'s `dbSize`).
    pub fn db_size(&self) -> u64 {
        self.data.db_size().max(0) as u64
    }

    pub fn revision(&self) -> i64 {
        self.data.rev
    }

    /// Keys (decoded as text), leases with the time left at `now`, revision,
    /// watchers, auth: what `GET /_mock/state` answers.
    pub fn snapshot(&self, now: Duration) -> serde_json::Value {
        let store = self.data();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let keys: Vec<serde_json::Value> = store
            .iter()
            .map(|kv| {
                serde_json::json!({
                    "key": text(&kv.key),
                    "value": text(&kv.value),
                    "lease": kv.lease,
                    "create_revision": kv.create_revision,
                    "mod_revision": kv.mod_revision,
                    "version": kv.version,
                })
            })
            .collect();
        let leases: Vec<serde_json::Value> = store
            .leases_by_expiry()
            .into_iter()
            .map(|l| {
                serde_json::json!({
                    "id": l.id,
                    "ttl": l.ttl,
                    "remaining_ms": l.expires.saturating_sub(now).as_millis() as u64,
                    "keys": l.keys.iter().map(|k| text(k)).collect::<Vec<_>>(),
                })
            })
            .collect();
        serde_json::json!({
            "revision": store.rev,
            "compact_revision": store.compact_rev,
            "keys": keys,
            "leases": leases,
            "watchers": store.watchers.len(),
            "auth": {
                "enabled": self.auth.enabled(),
                "tokens": self.auth.tokens(),
                "users": self.auth.accounts().user_names(),
                "roles": self.auth.accounts().role_names(),
            },
            "alarms": self.alarms.errors(),
            "retained": {
                "live_bytes": store.data_bytes(),
                "history_bytes": store.history_bytes(),
            },
        })
    }

    /// The full response header at the current revision.
    pub fn header(&self) -> Header {
        self.data.watchers.header(self.data.rev)
    }

    // ---- auth ----

    /// Validate the token if one was sent (refreshing it); answers its user.
    pub fn check_token(
        &mut self,
        token: Option<&str>,
        now: Duration,
    ) -> Result<Option<String>, EtcdError> {
        self.auth.check(token, now)
    }

    /// The key permissions of `user` (any while auth is off).
    fn permits<'a>(&'a self, user: &'a Option<String>) -> Permits<'a> {
        Permits {
            accounts: self.auth.accounts(),
            user: user.as_deref(),
        }
    }

    pub fn authenticate(
        &mut self,
        token: Option<&str>,
        req: &AuthenticateRequest,
        now: Duration,
    ) -> Result<AuthenticateResponse, EtcdError> {
        self.check_token(token, now)?;
        let token = self.auth.authenticate(&req.name, &req.password, now)?;
        Ok(AuthenticateResponse {
            header: self.header(),
            token,
        })
    }

    // ---- KV ----

    pub fn range(
        &mut self,
        token: Option<&str>,
        req: &RangeRequest,
        now: Duration,
    ) -> Result<RangeResponse, EtcdError> {
        size::check_grpc(&self.config, size::range(req))?;
        kv_ops::check_range(req)?;
        let user = self.check_token(token, now)?;
        self.permits(&user).range(req)?;
        let mut resp = kv_ops::range(&self.data, req)?;
        resp.header = self.header();
        Ok(resp)
    }

    pub fn put(
        &mut self,
        token: Option<&str>,
        req: &PutRequest,
        now: Duration,
    ) -> Result<PutResponse, EtcdError> {
        let len = size::put(req);
        size::check_grpc(&self.config, len)?;
        kv_ops::check_put(req)?;
        let user = self.check_token(token, now)?;
        size::check_raft(&self.config, len)?;
        self.check_space(alarm::put_cost(req))?;
        self.alarms.check_corrupt()?;
        let on_lease = self.data.leases.get(&req.lease).map(|l| &l.keys);
        let lease_keys = on_lease.into_iter().flatten().map(Vec::as_slice);
        self.permits(&user).put(req, lease_keys)?;
        let mut resp = kv_ops::put(&mut self.data, req)?;
        resp.header = self.header();
        Ok(resp)
    }

    pub fn delete_range(
        &mut self,
        token: Option<&str>,
        req: &DeleteRangeRequest,
        now: Duration,
    ) -> Result<DeleteRangeResponse, EtcdError> {
        let len = size::delete(req);
        size::check_grpc(&self.config, len)?;
        kv_ops::check_delete(req)?;
        let user = self.check_token(token, now)?;
        size::check_raft(&self.config, len)?;
        self.alarms.check_corrupt()?;
        self.permits(&user).delete(req)?;
        let mut resp = kv_ops::delete_range(&mut self.data, req);
        resp.header = self.header();
        Ok(resp)
    }

    pub fn txn(
        &mut self,
        token: Option<&str>,
        req: &TxnRequest,
        now: Duration,
    ) -> Result<TxnResponse, EtcdError> {
        let len = size::txn(req);
        size::check_grpc(&self.config, len)?;
        kv_ops::check_txn(req)?;
        let user = self.check_token(token, now)?;
        size::check_raft(&self.config, len)?;
        self.check_space(alarm::txn_cost(req))?;
        if alarm::txn_writes(req) {
            self.alarms.check_corrupt()?;
        }
        self.permits(&user).txn(req)?;
        let mut resp = kv_ops::apply_txn(&mut self.data, req)?;
        resp.header = self.header();
        Ok(resp)
    }

    pub fn compaction(
        &mut self,
        token: Option<&str>,
        req: &CompactionRequest,
        now: Duration,
    ) -> Result<HeaderOnly, EtcdError> {
        self.check_token(token, now)?;
        self.alarms.check_corrupt()?;
        self.data.compact(req.revision)?;
        Ok(HeaderOnly {
            header: self.header(),
        })
    }

    // ---- leases ----

    /// Grant a lease expiring `TTL` seconds after `now` (raised to the minimum TTL).
    pub fn grant(
        &mut self,
        token: Option<&str>,
        req: &GrantRequest,
        now: Duration,
    ) -> Result<GrantResponse, EtcdError> {
        self.check_token(token, now)?;
        self.check_space(alarm::LEASE_OVERHEAD)?;
        self.alarms.check_corrupt()?;
        let (id, ttl) = self.data.grant(req.id, req.ttl, now)?;
        Ok(GrantResponse {
            header: self.header(),
            id,
            ttl,
        })
    }

    /// Revoke a lease, deleting its keys in one revision.
    pub fn revoke(
        &mut self,
        token: Option<&str>,
        req: &IdRequest,
        now: Duration,
    ) -> Result<HeaderOnly, EtcdError> {
        let user = self.check_token(token, now)?;
        self.alarms.check_corrupt()?;
        let Some(lease) = self.data.leases.get(&req.id) else {
            return Err(EtcdError::lease_not_found());
        };
        let keys = lease.keys.iter().map(Vec::as_slice);
        self.permits(&user).lease_keys(keys)?;
        if self.data.revoke(req.id).is_none() {
            return Err(EtcdError::lease_not_found());
        }
        Ok(HeaderOnly {
            header: self.header(),
        })
    }

    /// One keepalive: the lease lives `TTL` seconds from `now`; an unknown lease is
    /// answered without `TTL`. Never checks a token, as etcd.
    pub fn keepalive(&mut self, req: &IdRequest, now: Duration) -> KeepAliveLine {
        let ttl = self.data.keepalive(req.id, now).unwrap_or(0);
        KeepAliveLine {
            result: GrantResponse {
                header: self.header(),
                id: req.id,
                ttl,
            },
        }
    }

    /// Remaining whole seconds at `now` (`TTL` -1 for an unknown lease).
    pub fn time_to_live(&self, req: &IdRequest, now: Duration) -> TimeToLiveResponse {
        match self.data.leases.get(&req.id) {
            Some(l) => TimeToLiveResponse {
                header: self.header(),
                id: l.id,
                ttl: l.remaining_secs(now),
                granted: l.ttl,
                keys: if req.keys {
                    l.keys.iter().cloned().collect()
                } else {
                    Vec::new()
                },
            },
            None => TimeToLiveResponse {
                header: self.header(),
                id: req.id,
                ttl: -1,
                granted: 0,
                keys: Vec::new(),
            },
        }
    }

    /// Every lease, by deadline.
    pub fn leases(&self) -> LeasesResponse {
        LeasesResponse {
            header: self.header(),
            leases: self
                .data
                .leases_by_expiry()
                .into_iter()
                .map(|l| LeaseStatus { id: l.id })
                .collect(),
        }
    }

    /// Expire every lease whose deadline is at or before `now` (each lease's keys go in
    /// one revision, watchers told); answers them, earliest deadline first.
    pub fn expire_due(&mut self, now: Duration) -> Vec<Lease> {
        self.data.expire_due(now)
    }

    /// When the next lease falls due, if any: a simulator's next expiry event.
    pub fn next_expiry(&mut self) -> Option<Duration> {
        self.data.next_deadline()
    }

    // ---- faults ----

    /// Expire one lease now (its keys deleted in one revision). None if unknown.
    pub fn expire_lease(&mut self, id: i64) -> Option<Lease> {
        self.data.revoke(id)
    }

    /// Expire every lease now, in ID order.
    pub fn expire_all(&mut self) -> Vec<Lease> {
        let ids: Vec<i64> = self.data.leases.keys().copied().collect();
        ids.into_iter()
            .filter_map(|id| self.data.revoke(id))
            .collect()
    }

    /// Lose every key, lease, token, watcher, alarm and the users and roles made
    /// through the API (the configured users stay), as an etcd restarted without its
    /// data dir and set up again (`reset_revision`: back to revision 1). `epoch_ms`: the wall clock now, that
    /// auto lease IDs start from again. The caller ends its watch streams.
    pub fn lose_data(&mut self, reset_revision: bool, epoch_ms: u64) {
        self.data.lose_data(reset_revision, epoch_ms);
        self.data.watchers.clear();
        self.auth.reset_accounts(&self.config.users);
        self.alarms = Alarms::default();
    }

    // ---- watch ----

    /// Open a watch stream whose answers go to `sink`; the token is checked once, here
    /// (a failed check makes each create fail with the reason, as etcd does).
    pub fn watch_open(
        &mut self,
        token: Option<&str>,
        sink: Arc<dyn WatchSink>,
        now: Duration,
    ) -> WatchStream {
        WatchStream {
            access: self.check_token(token, now),
            id: self.data.watchers.new_stream(),
            next_id: 0,
            sink,
        }
    }

    /// One `WatchRequest` object of the stream's body, as JSON. Err (Go's wording) if
    /// it does not decode: the gateway then stops reading the stream.
    pub fn watch_json(&mut self, stream: &mut WatchStream, msg: &[u8]) -> Result<(), String> {
        let req: WatchRequest = decode::parse_value(msg)?;
        self.watch_request(stream, req);
        Ok(())
    }

    /// Create, cancel or progress (in that order of precedence), answers to the sink.
    pub fn watch_request(&mut self, stream: &mut WatchStream, req: WatchRequest) {
        let rev = self.data.rev;
        if let Some(c) = req.create_request {
            let permitted = match &stream.access {
                Ok(user) => self.permits(user).range(&range_of(&c)),
                Err(e) => Err(e.clone()),
            };
            if let Err(e) = &permitted {
                let reason = e.rpc_error();
                let resp = WatchResponse {
                    header: Some(self.header()),
                    watch_id: -1,
                    created: true,
                    canceled: true,
                    cancel_reason: &reason,
                    ..Default::default()
                };
                stream.sink.send(watchers::line(&resp), rev);
                return;
            }
            let data = &mut self.data;
            let s = watchers::Stream {
                id: stream.id,
                next_id: &mut stream.next_id,
                out: &stream.sink,
            };
            watchers::create(&data.store, &mut data.watchers, s, c);
        } else if let Some(c) = req.cancel_request {
            self.data
                .watchers
                .cancel(rev, stream.id, c.watch_id, &*stream.sink);
        } else if req.progress_request.is_some() {
            self.data.watchers.progress(rev, &*stream.sink);
        }
    }

    /// The stream ended: its watchers go.
    pub fn watch_close(&mut self, stream: &WatchStream) {
        self.data.watchers.drop_stream(stream.id);
    }

    /// The IDs of a stream's live watchers.
    pub fn watch_ids(&self, stream: u64) -> Vec<i64> {
        self.data.watchers.ids_of(stream)
    }
}

/// The keys a watch selects, as the range a read of them would name.
fn range_of(c: &CreateRequest) -> RangeRequest {
    RangeRequest {
        key: c.key.clone(),
        range_end: c.range_end.clone(),
        ..Default::default()
    }
}
