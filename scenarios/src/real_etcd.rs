//! Real etcd (the Debian `etcd` binary) on loopback: one member, or a three-member
//! cluster whose members (or leader) a scenario can kill and restart.
//!
//! Why: the fake etcd is written from the contract (`docs/contract.md` §1); a real etcd
//! keeps it honest and adds what no fake reproduces faithfully (elections, a leader
//! dying mid-keepalive).
//!
//! The processes (ports, start-up retries, clean-up) are `local-etcd`'s; this adds what
//! a scenario needs on top: events on its timeline, who the leader is, and kills and
//! restarts by name, run off the runtime's threads.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use local_etcd::{Cluster, Options};
use mock_kit::Events;

/// Why real etcd cannot run here, if it cannot.
pub use local_etcd::unavailable;

/// A running real etcd cluster (1 or 3 members).
pub struct RealEtcd {
    /// Blocking calls on it run in `spawn_blocking`.
    cluster: Arc<Mutex<Cluster>>,
    clients: Vec<SocketAddr>,
    /// Which members this run has not killed.
    live: Vec<bool>,
    events: Events,
    http: reqwest::Client,
}

/// Run a blocking call on the cluster off the runtime's threads.
async fn blocking<T: Send + 'static>(
    cluster: &Arc<Mutex<Cluster>>,
    call: impl FnOnce(&mut Cluster) -> Result<T, local_etcd::Error> + Send + 'static,
) -> std::io::Result<T> {
    let cluster = Arc::clone(cluster);
    tokio::task::spawn_blocking(move || {
        let mut c = cluster.lock().unwrap_or_else(|p| p.into_inner());
        call(&mut c).map_err(std::io::Error::from)
    })
    .await
    .map_err(std::io::Error::other)?
}

impl RealEtcd {
    /// Start `n` members on loopback and wait until every one is healthy.
    pub async fn start(n: usize, events: Events) -> std::io::Result<RealEtcd> {
        let opts = Options {
            members: n,
            // A killed leader is replaced within a lease TTL.
            fast_elections: true,
            tag: "scenarios-etcd".into(),
            ..Options::default()
        };
        let cluster = tokio::task::spawn_blocking(move || Cluster::start(opts))
            .await
            .map_err(std::io::Error::other)??;
        let clients = cluster.client_addrs();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .map_err(std::io::Error::other)?;
        events.emit("started", serde_json::json!({"members": clients}));
        Ok(RealEtcd {
            cluster: Arc::new(Mutex::new(cluster)),
            live: vec![true; clients.len()],
            clients,
            events,
            http,
        })
    }

    /// Client addresses, member order.
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.clients.clone()
    }

    /// Index of the current leader, asked of the live members: the first leader one of
    /// them names that one of them is.
    pub async fn leader(&self) -> Option<usize> {
        // Each live member that answers: its index, its id and the leader it names.
        let mut answers = Vec::new();
        let live = self.clients.iter().zip(&self.live).enumerate();
        for (i, (client, _)) in live.filter(|(_, (_, l))| **l) {
            if let Some(v) = self.status(*client).await {
                let id = |at: &str| v.pointer(at).and_then(json_u64);
                answers.push((i, id("/header/member_id"), id("/leader")));
            }
        }
        let mut leaders = answers.iter().filter_map(|(_, _, l)| l.filter(|l| *l != 0));
        let is = |l: u64| answers.iter().find(|(_, me, _)| *me == Some(l));
        leaders.find_map(is).map(|(i, _, _)| *i)
    }

    /// A member's `/v3/maintenance/status` answer, if it gives one.
    async fn status(&self, client: SocketAddr) -> Option<serde_json::Value> {
        let r = self
            .http
            .post(format!("http://{client}/v3/maintenance/status"))
            .body("{}")
            .send()
            .await
            .ok()?;
        r.json().await.ok()
    }

    /// Kill a member (SIGKILL). `which` is `"leader"` or an index. Answers the index.
    pub async fn kill(&mut self, which: &str) -> std::io::Result<usize> {
        let i = self.resolve(which).await?;
        blocking(&self.cluster, move |c| c.kill(i)).await?;
        self.mark(i, false, "member_killed");
        Ok(i)
    }

    /// Start a killed member again (same data dir, same ports).
    pub async fn restart(&mut self, which: &str) -> std::io::Result<usize> {
        let i = match which.parse::<usize>() {
            Ok(i) => i,
            Err(_) => self
                .live
                .iter()
                .position(|live| !live)
                .ok_or_else(|| std::io::Error::other("no killed member to restart"))?,
        };
        if self.live.get(i) == Some(&false) {
            blocking(&self.cluster, move |c| c.restart(i)).await?;
            self.mark(i, true, "member_restarted");
        }
        Ok(i)
    }

    /// Member `i` is now `live` (or not), as the timeline's `event` says.
    fn mark(&mut self, i: usize, live: bool, event: &str) {
        if let Some(l) = self.live.get_mut(i) {
            *l = live;
        }
        self.events.emit(event, serde_json::json!({"member": i}));
    }

    async fn resolve(&self, which: &str) -> std::io::Result<usize> {
        if which == "leader" {
            return self
                .leader()
                .await
                .ok_or_else(|| std::io::Error::other("no etcd leader found"));
        }
        which
            .parse::<usize>()
            .ok()
            .filter(|i| *i < self.clients.len())
            .ok_or_else(|| std::io::Error::other(format!("no etcd member `{which}`")))
    }
}

fn json_u64(v: &serde_json::Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}
