//! Real etcd (the Debian `etcd` binary) on loopback: one member, or a three-member
//! cluster whose members (or leader) a scenario can kill and restart.
//!
//! Why: the fake etcd is written from the contract; a real etcd keeps it honest and adds
//! what no fake reproduces faithfully (elections, a leader dying mid-keepalive).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::process::{Child, Command};

use mock_kit::Events;

pub const ETCD_BIN: &str = "/usr/bin/etcd";

/// Why real etcd cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    let bin = std::env::var("ETCD_BIN").unwrap_or_else(|_| ETCD_BIN.to_string());
    if Path::new(&bin).is_file() {
        None
    } else {
        Some(format!(
            "real etcd not installed ({bin} missing; apt-get install etcd-server)"
        ))
    }
}

struct Member {
    name: String,
    client: SocketAddr,
    peer: SocketAddr,
    data_dir: PathBuf,
    child: Option<Child>,
}

/// A running real etcd cluster (1 or 3 members).
pub struct RealEtcd {
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    root: PathBuf,
    events: Events,
    http: reqwest::Client,
}

impl std::fmt::Debug for RealEtcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealEtcd")
            .field("clients", &self.client_addrs())
            .finish()
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn free_port() -> std::io::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    l.local_addr()
}

impl RealEtcd {
    /// Start `n` members on free loopback ports and wait until every one is healthy.
    pub async fn start(n: usize, events: Events) -> std::io::Result<RealEtcd> {
        let bin_missing = unavailable();
        if let Some(why) = bin_missing {
            return Err(std::io::Error::new(std::io::ErrorKind::NotFound, why));
        }
        let unique = format!(
            "{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let root = std::env::temp_dir().join(format!("scenarios-etcd-{unique}"));
        std::fs::create_dir_all(&root)?;
        let mut members = Vec::new();
        for i in 0..n {
            members.push(Member {
                name: format!("m{i}"),
                client: free_port()?,
                peer: free_port()?,
                data_dir: root.join(format!("m{i}")),
                child: None,
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}=http://{}", m.name, m.peer))
            .collect::<Vec<_>>()
            .join(",");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .map_err(std::io::Error::other)?;
        let mut etcd = RealEtcd {
            members,
            initial_cluster,
            token: format!("scn-{unique}"),
            root,
            events,
            http,
        };
        for i in 0..n {
            etcd.spawn_member(i, "new")?;
        }
        for i in 0..n {
            etcd.wait_healthy(i, Duration::from_secs(20)).await?;
        }
        etcd.events.emit(
            "started",
            serde_json::json!({"members": etcd.client_addrs()}),
        );
        Ok(etcd)
    }

    fn spawn_member(&mut self, i: usize, state: &str) -> std::io::Result<()> {
        let bin = std::env::var("ETCD_BIN").unwrap_or_else(|_| ETCD_BIN.to_string());
        let (initial_cluster, token) = (self.initial_cluster.clone(), self.token.clone());
        let m = self
            .members
            .get_mut(i)
            .ok_or_else(|| std::io::Error::other(format!("no etcd member {i}")))?;
        let mut cmd = Command::new(bin);
        cmd.args([
            "--name",
            &m.name,
            "--data-dir",
            &m.data_dir.to_string_lossy(),
            "--listen-client-urls",
            &format!("http://{}", m.client),
            "--advertise-client-urls",
            &format!("http://{}", m.client),
            "--listen-peer-urls",
            &format!("http://{}", m.peer),
            "--initial-advertise-peer-urls",
            &format!("http://{}", m.peer),
            "--initial-cluster",
            &initial_cluster,
            "--initial-cluster-token",
            &token,
            "--initial-cluster-state",
            state,
            // Fast elections so a killed leader is replaced within a lease TTL.
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
            "--log-level",
            "error",
            "--logger",
            "zap",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
        crate::sidecar::die_with_parent(&mut cmd);
        m.child = Some(cmd.spawn()?);
        Ok(())
    }

    async fn wait_healthy(&self, i: usize, within: Duration) -> std::io::Result<()> {
        let addr = self
            .members
            .get(i)
            .map(|m| m.client)
            .ok_or_else(|| std::io::Error::other("no member"))?;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let ok = self
                .http
                .get(format!("http://{addr}/health"))
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success());
            if let Some(r) = ok {
                if r.text().await.is_ok_and(|t| t.contains("true")) {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() > deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("etcd member {i} at {addr} not healthy within {within:?}"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Client addresses, member order.
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.members.iter().map(|m| m.client).collect()
    }

    /// Index of the current leader, asked of the live members.
    pub async fn leader(&self) -> Option<usize> {
        for m in self.members.iter().filter(|m| m.child.is_some()) {
            let Ok(r) = self
                .http
                .post(format!("http://{}/v3/maintenance/status", m.client))
                .body("{}")
                .send()
                .await
            else {
                continue;
            };
            let Ok(v) = r.json::<serde_json::Value>().await else {
                continue;
            };
            let leader = v.get("leader").and_then(json_u64);
            let me = v.pointer("/header/member_id").and_then(json_u64);
            if let Some(leader) = leader.filter(|l| *l != 0) {
                if leader == me.unwrap_or(0) {
                    return self.members.iter().position(|x| x.client == m.client);
                }
                // Ask the others who they are.
                for (i, other) in self
                    .members
                    .iter()
                    .enumerate()
                    .filter(|(_, o)| o.child.is_some())
                {
                    let Ok(r) = self
                        .http
                        .post(format!("http://{}/v3/maintenance/status", other.client))
                        .body("{}")
                        .send()
                        .await
                    else {
                        continue;
                    };
                    let Ok(v) = r.json::<serde_json::Value>().await else {
                        continue;
                    };
                    if v.pointer("/header/member_id").and_then(json_u64) == Some(leader) {
                        return Some(i);
                    }
                }
            }
        }
        None
    }

    /// Kill a member (SIGKILL). `which` is `"leader"` or an index. Answers the index.
    pub async fn kill(&mut self, which: &str) -> std::io::Result<usize> {
        let i = self.resolve(which).await?;
        if let Some(m) = self.members.get_mut(i) {
            if let Some(mut c) = m.child.take() {
                let _ = c.kill().await;
            }
        }
        self.events
            .emit("member_killed", serde_json::json!({"member": i}));
        Ok(i)
    }

    /// Start a killed member again (same data dir, same ports).
    pub async fn restart(&mut self, which: &str) -> std::io::Result<usize> {
        let i = match which.parse::<usize>() {
            Ok(i) => i,
            Err(_) => self
                .members
                .iter()
                .position(|m| m.child.is_none())
                .ok_or_else(|| std::io::Error::other("no killed member to restart"))?,
        };
        if self.members.get(i).is_some_and(|m| m.child.is_none()) {
            self.spawn_member(i, "existing")?;
            self.wait_healthy(i, Duration::from_secs(20)).await?;
            self.events
                .emit("member_restarted", serde_json::json!({"member": i}));
        }
        Ok(i)
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
            .filter(|i| *i < self.members.len())
            .ok_or_else(|| std::io::Error::other(format!("no etcd member `{which}`")))
    }
}

fn json_u64(v: &serde_json::Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

impl Drop for RealEtcd {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(c) = m.child.as_mut() {
                let _ = c.start_kill();
            }
        }
        let root = self.root.clone();
        // Give the processes a moment to die before removing their data.
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let _ = std::fs::remove_dir_all(root);
        });
    }
}
