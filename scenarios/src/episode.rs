//! Fault episodes: intervals derived from the executed actions (a partition from its
//! start until healed, a crash until restart), each saying whom it disturbs and what it
//! excuses.
//!
//! The [`EpisodeBook`] is what each action family writes its episodes into: it knows
//! the action being recorded (its time and label), the instance names, and the tokens
//! the master and each sidecar hold, so a family only says which episode it opens or
//! closes. The invariants ([`crate::verdict`]) read the finished list.

use serde::Serialize;

use crate::topology::{LinkKind, ProcessKind, Topology};

/// Whom an episode disturbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Scope {
    /// Every instance (or the cluster as a whole).
    All,
    /// One instance, by index.
    Instance(usize),
}

impl Scope {
    /// Whether it disturbs instance `i`.
    pub fn covers(self, i: usize) -> bool {
        self == Scope::All || self == Scope::Instance(i)
    }
}

/// What opened an episode and on whom: an open episode is closed by its key (or by a
/// kind of key), and one opened under the key of an open one ends it. `u64`s are the
/// opening action's time (ms), which keeps episodes of repeated actions apart.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum EpisodeKey {
    /// An instance's first registration, while its vLLM starts.
    StartUp(usize),
    /// An instance's sidecar sends another token than the master's.
    TokenMismatch(usize),
    /// A sidecar started (a routine registration).
    SidecarStart(Scope, u64),
    /// A sidecar stopped or killed.
    SidecarDown(Scope),
    /// A sidecar drained, until its undrain.
    Drained(Scope),
    /// vLLM's `/health` down or hanging, until up again.
    VllmHealth(Scope),
    /// vLLM crashed, until restarted.
    VllmCrash(Scope),
    /// vLLM asleep (`POST /sleep`) until woken.
    VllmSleep(Scope),
    /// A fault on vLLM's `/metrics` or completions.
    VllmFault(Scope, u64),
    /// vLLM's counters reset.
    CounterReset(u64),
    /// A fault on etcd's gateway.
    EtcdFault(u64),
    /// A lease expired by the fake etcd.
    Expire(u64),
    /// The fake etcd lost its data.
    LoseData(u64),
    /// The master's lag after a data loss.
    LoseDataMaster(u64),
    /// A real etcd member down (its index).
    EtcdKill(String),
    /// A real etcd cluster electing a leader after a member died.
    EtcdElection(u64),
    /// The master restarted.
    MasterRestart(u64),
    /// A master replica killed.
    MasterKill(u64),
    /// A fault on the master's heartbeat endpoint.
    MasterFault(u64),
    /// Watch lines the master lost while its etcd link dropped etcd's answers.
    MasterLostLines(u64),
    /// A link fault: the link, whose, which etcd endpoint.
    Link(LinkKind, Scope, Option<usize>),
    /// A process stopped (paused or throttled), whose, from when.
    Stopped(ProcessKind, Scope, u64),
}

/// A disturbance interval derived from actions.
#[derive(Clone, Debug, Serialize)]
pub struct Episode {
    /// What caused it, for reports (the action's label).
    pub label: String,
    /// Whom it disturbs.
    pub scope: Scope,
    /// When it began (ms).
    pub start_ms: u64,
    /// When it ended (ms); `None`: not by the end of the run.
    pub end_ms: Option<u64>,
    /// A missing key is excused during (and for a grace after) this episode.
    pub excuses_registration: bool,
    /// vLLM unhealthy, or cut off from its sidecar: the instance is not expected to be
    /// routable.
    pub vllm_down: bool,
    /// 401s are expected (token mismatch).
    pub token_mismatch: bool,
    /// The master's view may lag etcd (its watch is cut or it restarted).
    pub excuses_master: bool,
    /// More time to register again after this episode than the scenario's grace: the
    /// sidecar's etcd path was cut, so an attempt in flight first meets its etcd
    /// timeout and its registration backoff (capped at the lease TTL) runs.
    pub extra_grace_ms: u64,
    /// Shown as a fault in reports and recovery times (not a routine start).
    pub is_fault: bool,
    /// A graceful stop or a drain: the sidecar is expected to revoke its lease at once.
    pub expects_revoke: bool,
    /// A sidecar stopped for longer than its lease's TTL: once it continues, its own
    /// clock tells it the lease is gone, so the incarnation from before the stop must
    /// not be heartbeated again.
    pub outlives_lease: bool,
    /// When not 0: the episode lasts this long past the end of every fault that
    /// overlaps it (what it excuses can only be repaired once nothing blocks it).
    pub outlasts_faults_ms: u64,
    key: EpisodeKey,
}

/// The episodes of one run, written action by action.
pub struct EpisodeBook<'a> {
    topo: &'a Topology,
    names: Vec<String>,
    eps: Vec<Episode>,
    master_token: Option<String>,
    sidecar_tokens: Vec<Option<String>>,
    /// The action being recorded: when, its label, its detail (e.g. the member killed).
    t: u64,
    label: String,
    detail: Option<String>,
}

impl Episode {
    /// What opened it and on whom.
    pub fn key(&self) -> &EpisodeKey {
        &self.key
    }

    /// The master may answer anything meanwhile (409s included): it restarted, lagged
    /// etcd, or had its heartbeat endpoint faulted.
    pub fn disturbs_master(&self) -> bool {
        self.excuses_master || matches!(self.key, EpisodeKey::MasterFault(_))
    }
}

impl<'a> EpisodeBook<'a> {
    /// A book with the start-up episodes: every instance registers for the first time,
    /// and a sidecar whose token differs from the master's is expected to get 401s.
    pub fn new(topo: &'a Topology) -> EpisodeBook<'a> {
        let mut book = EpisodeBook {
            topo,
            names: topo.instance_names(),
            eps: Vec::new(),
            master_token: topo.token.clone(),
            sidecar_tokens: (0..topo.instances)
                .map(|i| topo.instance(i).token)
                .collect(),
            t: 0,
            label: String::new(),
            detail: None,
        };
        book.start_up();
        book
    }

    fn start_up(&mut self) {
        let topo = self.topo;
        for i in 0..topo.instances {
            let spec = topo.instance(i);
            let delay = spec.vllm_startup_delay.as_ms();
            self.open_as(
                format!("start-up {}", spec.name),
                EpisodeKey::StartUp(i),
                Scope::Instance(i),
                Some(delay),
                |e| {
                    e.excuses_registration = true;
                    e.vllm_down = delay > 0;
                    e.is_fault = false;
                },
            );
            if spec.start_sidecar && !tokens_match(topo.token.as_deref(), spec.token.as_deref()) {
                self.open_token_mismatch(i);
            }
        }
    }

    /// Record the next action: episodes opened from now on start at `t_ms` under `label`.
    pub fn action(&mut self, t_ms: u64, label: &str, detail: Option<&str>) {
        self.t = t_ms;
        self.label = label.to_string();
        self.detail = detail.map(str::to_string);
    }

    /// The topology the run is on.
    pub fn topology(&self) -> &Topology {
        self.topo
    }

    /// The current action's detail (e.g. the etcd member actually killed).
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// The current action's label.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The current action's time.
    pub fn t(&self) -> u64 {
        self.t
    }

    /// The scopes a target names: `all`, or the one instance (none if unknown).
    pub fn scopes(&self, target: &str) -> Vec<Scope> {
        if target == "all" {
            return vec![Scope::All];
        }
        let i = self.names.iter().position(|n| n == target);
        i.map(Scope::Instance).into_iter().collect()
    }

    /// Open an episode under the current action's label; one already open under the
    /// same key ends now. `dur_ms`: it ends by itself that long after (`None`: open).
    pub fn open(
        &mut self,
        key: EpisodeKey,
        scope: Scope,
        dur_ms: Option<u64>,
        set: impl Fn(&mut Episode),
    ) {
        self.open_as(self.label.clone(), key, scope, dur_ms, set);
    }

    /// How long after its etcd path heals a sidecar may take to register again, past
    /// the scenario's grace: an attempt in flight meets its etcd timeout, then the
    /// registration backoff (capped at the lease TTL) runs.
    pub fn etcd_recovery_ms(&self) -> u64 {
        self.topo.etcd_timeout.as_ms() + self.topo.lease_ttl.saturating_mul(1000)
    }

    /// [`Self::open`] under a label of its own.
    pub fn open_as(
        &mut self,
        label: String,
        key: EpisodeKey,
        scope: Scope,
        dur_ms: Option<u64>,
        set: impl Fn(&mut Episode),
    ) {
        let t = self.t;
        self.close(&key);
        let mut e = Episode {
            label,
            scope,
            start_ms: t,
            end_ms: dur_ms.map(|d| t + d),
            excuses_registration: false,
            vllm_down: false,
            token_mismatch: false,
            excuses_master: false,
            extra_grace_ms: 0,
            is_fault: true,
            expects_revoke: false,
            outlasts_faults_ms: 0,
            outlives_lease: false,
            key,
        };
        set(&mut e);
        self.eps.push(e);
    }

    /// End the open episode under `key` now.
    pub fn close(&mut self, key: &EpisodeKey) {
        self.close_where(|k| k == key);
    }

    /// End the open episode keyed `key(scope)` now; for [`Scope::All`], every open
    /// episode with a key of that kind, whatever its scope.
    pub fn close_scope(&mut self, scope: Scope, key: fn(Scope) -> EpisodeKey) {
        let key = key(scope);
        let kind = std::mem::discriminant(&key);
        let all = scope == Scope::All;
        self.close_where(|k| *k == key || (all && std::mem::discriminant(k) == kind));
    }

    /// End every open episode whose key `which` picks now.
    pub fn close_where(&mut self, which: impl Fn(&EpisodeKey) -> bool) {
        let t = self.t;
        let open = |e: &&mut Episode| which(&e.key) && e.end_ms.is_none_or(|end| end > t);
        for e in self.eps.iter_mut().filter(open) {
            e.end_ms = Some(t.max(e.start_ms));
        }
    }

    /// The master's token is now `token` (`""`: no check).
    pub fn set_master_token(&mut self, token: &str) {
        self.master_token = Some(token.to_string()).filter(|t| !t.is_empty());
    }

    /// The sidecars in `scope` now send `token`.
    pub fn set_sidecar_token(&mut self, scope: Scope, token: &str) {
        for (i, tok) in self.sidecar_tokens.iter_mut().enumerate() {
            if scope.covers(i) {
                *tok = Some(token.to_string());
            }
        }
    }

    /// After a token may have changed: a mismatch opens (or stays) a token episode of
    /// that instance, a match ends it.
    pub fn recheck_tokens(&mut self) {
        for i in 0..self.sidecar_tokens.len() {
            let key = EpisodeKey::TokenMismatch(i);
            let tok = self.sidecar_tokens.get(i).cloned().flatten();
            if tokens_match(self.master_token.as_deref(), tok.as_deref()) {
                self.close(&key);
            } else if !self.eps.iter().any(|e| e.key == key && e.end_ms.is_none()) {
                self.open_token_mismatch(i);
            }
        }
    }

    fn open_token_mismatch(&mut self, i: usize) {
        let name = self.names.get(i).cloned().unwrap_or_default();
        self.open_as(
            format!("token mismatch {name}"),
            EpisodeKey::TokenMismatch(i),
            Scope::Instance(i),
            None,
            |e| {
                e.token_mismatch = true;
                e.is_fault = false;
            },
        );
    }

    /// The episodes, none ending after the run did.
    pub fn finish(mut self, end_ms: u64) -> Vec<Episode> {
        outlast_faults(&mut self.eps);
        for e in &mut self.eps {
            e.end_ms = e.end_ms.map(|end| end.min(end_ms.max(e.start_ms)));
        }
        self.eps
    }

    /// The episodes of the actions recorded so far, as [`EpisodeBook::finish`] answers
    /// them for a run that goes on: an episode still open may end later.
    pub fn so_far(&self) -> Vec<Episode> {
        let mut eps = self.eps.clone();
        outlast_faults(&mut eps);
        eps
    }
}

/// Whether episode `e` was open at some time from `from` to `to`.
pub(crate) fn overlaps(e: &Episode, from: u64, to: u64) -> bool {
    e.start_ms <= to && e.end_ms.is_none_or(|end| end >= from)
}

/// Stretch each episode with `outlasts_faults_ms` past the faults overlapping it (and
/// those overlapping the stretch, until nothing changes; an open fault leaves it open).
fn outlast_faults(eps: &mut [Episode]) {
    for i in 0..eps.len() {
        let Some(e) = eps.get(i) else { break };
        let by = e.outlasts_faults_ms;
        if by == 0 {
            continue;
        }
        let (start, mut end) = (e.start_ms, e.end_ms);
        loop {
            let blockers = eps
                .iter()
                .filter(|o| (o.is_fault || o.token_mismatch) && o.outlasts_faults_ms == 0);
            let stretched = blockers
                .filter(|o| overlaps(o, start, end.unwrap_or(u64::MAX)))
                .map(|o| o.end_ms.map(|x| x + by))
                .fold(end, |acc, x| Some(acc?.max(x?)));
            if stretched == end {
                break;
            }
            end = stretched;
        }
        if let Some(e) = eps.get_mut(i) {
            e.end_ms = end;
        }
    }
}

fn tokens_match(master: Option<&str>, sidecar: Option<&str>) -> bool {
    master.is_none_or(|m| m.is_empty() || sidecar == Some(m))
}

#[cfg(test)]
mod tests {
    use super::EpisodeKey;
    use crate::spec::Scenario;
    use crate::verdict::{episodes, ActionRecord};

    fn record(t_ms: u64, action: &str) -> ActionRecord {
        let text = format!("name = \"t\"\ndescription = \"d\"\n[topology]\netcd = \"fake\"\n[[step]]\naction = {action}\n");
        let sc = Scenario::parse("t.toml", &text).unwrap();
        ActionRecord {
            sidecar_states: Default::default(),
            step: 1,
            t_ms,
            label: action.into(),
            action: sc.steps[0].action.clone().unwrap(),
            error: None,
            detail: None,
        }
    }

    /// When the master's lag after a revision-resetting data loss stops being excused.
    fn lag_excused_until(records: &[ActionRecord]) -> Option<u64> {
        let sc = Scenario::parse("t.toml", "name = \"t\"\ndescription = \"d\"\n[topology]\netcd = \"fake\"\nheartbeat_interval = \"500ms\"\n").unwrap();
        let eps = episodes(&sc, records, 60_000);
        eps.iter()
            .find(|e| matches!(e.key(), EpisodeKey::LoseDataMaster(_)))
            .and_then(|e| e.end_ms)
    }

    #[test]
    fn a_data_loss_excuses_the_master_until_a_heartbeat_past_the_faults_over_it() {
        let lose = record(5000, "{ etcd_lose_data = { reset_revision = true } }");
        // The new incarnation's first heartbeat: a keepalive (500 ms) to notice the
        // loss, then up to one and a half heartbeat intervals (750 ms).
        assert_eq!(lag_excused_until(std::slice::from_ref(&lose)), Some(6250));
        // A cut link from before then keeps that heartbeat away: a heartbeat past it.
        let cut = record(5900, "{ link = { link = \"sidecar_master\", instance = \"i0\", fault = \"refuse\", duration = \"2s\" } }");
        assert_eq!(lag_excused_until(&[lose.clone(), cut]), Some(8400));
        let token = record(5000, "{ master_token = \"tok-b\" }");
        let back = record(14_000, "{ master_token = \"\" }");
        assert_eq!(
            lag_excused_until(&[token, lose.clone(), back]),
            Some(14_500)
        );
        // A fault starting after the stretch it would have overlapped changes nothing.
        let late = record(9000, "{ master_fault = { fault = { heartbeat_status = { status = 503 } }, duration = \"1s\" } }");
        assert_eq!(lag_excused_until(&[lose, late]), Some(6250));
    }
}
