//! A real etcd (the Debian `etcd-server` binary, 3.4) on loopback, for tests and
//! scenarios: one member or a cluster, members killed and restarted on the same ports,
//! nothing left behind.
//!
//! Why a crate of its own: the fakes are checked against real etcd in four places, and
//! each had its own launcher with its own partial fix for one race. A port has to be
//! chosen before etcd binds it, and in between another connection can take it; etcd
//! then exits, and the old launchers waited out their whole deadline for a member that
//! was already gone. Here ports come from outside the ephemeral range ([`ports`]), a
//! member that exits is noticed at once with the end of its log, and a start that fails
//! is retried on fresh ports and a fresh data dir.
//!
//! The API is blocking (std only), so sync tests use it as is and async code calls it
//! from `spawn_blocking`.
//!
//! # Layout
//!
//! - [`ports`]: loopback ports below the ephemeral range, never twice per process.
//! - [`health`]: one bounded `GET /health`.
//! - [`member`]: an etcd process and the watchman that kills it if we die first.

pub mod health;
pub mod member;
pub mod ports;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use member::{Process, Spec};

/// Where etcd is looked for when `ETCD_BIN` is not set and it is not on `PATH`.
pub const DEFAULT_BIN: &str = "/usr/bin/etcd";

/// Lines of a member's log quoted when it fails.
const LOG_LINES: usize = 5;
/// Pause between readiness rounds.
const POLL: Duration = Duration::from_millis(50);
/// Timeout of each step of one health check.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The etcd binary: `ETCD_BIN`, else `etcd` on `PATH`, else [`DEFAULT_BIN`].
pub fn binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ETCD_BIN") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .map(|dir| dir.join("etcd"))
        .chain([PathBuf::from(DEFAULT_BIN)])
        .find(|p| p.is_file())
}

/// Why real etcd cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    match binary() {
        Some(_) => None,
        None => Some(
            "real etcd not installed (no `etcd` on PATH or ETCD_BIN; apt-get install etcd-server)"
                .to_string(),
        ),
    }
}

/// What to start.
#[derive(Clone, Debug)]
pub struct Options {
    /// Members in the cluster (1 or more).
    pub members: usize,
    /// Extra flags for every member, e.g. `--auth-token-ttl 2`.
    pub args: Vec<String>,
    /// Heartbeat 50 ms and election timeout 500 ms, so a killed leader is replaced
    /// well within a lease TTL.
    pub fast_elections: bool,
    /// How long each try waits for every member to be healthy.
    pub ready_within: Duration,
    /// Starts tried, each on fresh ports and a fresh data dir.
    pub tries: u32,
    /// Part of the temp dir's name, to tell whose it is.
    pub tag: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            members: 1,
            args: Vec::new(),
            fast_elections: false,
            ready_within: Duration::from_secs(20),
            tries: 3,
            tag: "local-etcd".to_string(),
        }
    }
}

/// Why etcd could not be started or driven.
#[derive(Debug)]
pub enum Error {
    /// No etcd binary: callers usually skip, with this message.
    NotInstalled(String),
    /// It did not start (or restart); the message ends with the member's log.
    Start(String),
    /// No member with that index.
    NoMember(usize),
    Io(std::io::Error),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NotInstalled(why) | Error::Start(why) => f.write_str(why),
            Error::NoMember(i) => write!(f, "no etcd member {i}"),
            Error::Io(e) => write!(f, "etcd: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Io(e) => e,
            Error::NotInstalled(_) => std::io::Error::new(std::io::ErrorKind::NotFound, e),
            other => std::io::Error::other(other),
        }
    }
}

struct Member {
    spec: Spec,
    process: Option<Process>,
}

/// A running real etcd: its members, killed and their data removed on drop.
pub struct Cluster {
    bin: PathBuf,
    opts: Options,
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    /// This cluster's temp dir: every try's data dirs and logs.
    root: PathBuf,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("clients", &self.client_addrs())
            .finish()
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl Cluster {
    /// One member with default options.
    pub fn start_one() -> Result<Cluster, Error> {
        Cluster::start(Options::default())
    }

    /// Start the members and wait until every one is healthy; a failed try (a member
    /// exits, or is not healthy in time) is retried on fresh ports.
    pub fn start(opts: Options) -> Result<Cluster, Error> {
        let bin = binary().ok_or_else(|| Error::NotInstalled(unavailable().unwrap_or_default()))?;
        let unique = format!(
            "{}-{}-{}",
            opts.tag,
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let root = std::env::temp_dir().join(&unique);
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root)?;
        let mut cluster = Cluster {
            bin,
            members: Vec::new(),
            initial_cluster: String::new(),
            token: unique,
            root,
            opts,
        };
        let mut failures = Vec::new();
        for attempt in 1..=cluster.opts.tries.max(1) {
            match cluster.try_start(attempt) {
                Ok(()) => return Ok(cluster),
                Err(e) => {
                    cluster.kill_all();
                    failures.push(format!("try {attempt}: {e}"));
                }
            }
        }
        Err(Error::Start(format!(
            "etcd did not start in {} tries:\n{}",
            failures.len(),
            failures.join("\n")
        )))
    }

    fn try_start(&mut self, attempt: u32) -> Result<(), Error> {
        let dir = self.root.join(format!("try{attempt}"));
        std::fs::create_dir_all(&dir)?;
        self.members = (0..self.opts.members.max(1))
            .map(|i| {
                Ok(Member {
                    spec: Spec {
                        name: format!("m{i}"),
                        client: ports::pick()?,
                        peer: ports::pick()?,
                        data_dir: dir.join(format!("m{i}")),
                        log: dir.join(format!("m{i}.log")),
                    },
                    process: None,
                })
            })
            .collect::<Result<_, std::io::Error>>()?;
        self.initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}=http://{}", m.spec.name, m.spec.peer))
            .collect::<Vec<_>>()
            .join(",");
        for i in 0..self.members.len() {
            self.spawn(i, "new")?;
        }
        let all: Vec<usize> = (0..self.members.len()).collect();
        self.wait_ready(&all)
    }

    fn spawn(&mut self, i: usize, state: &str) -> Result<(), Error> {
        let args = self.args_of(i, state)?;
        let bin = self.bin.clone();
        let m = self.members.get_mut(i).ok_or(Error::NoMember(i))?;
        m.process = Some(Process::spawn(&bin, &m.spec, &args, &self.root)?);
        Ok(())
    }

    fn args_of(&self, i: usize, state: &str) -> Result<Vec<String>, Error> {
        let spec = &self.members.get(i).ok_or(Error::NoMember(i))?.spec;
        let client = format!("http://{}", spec.client);
        let peer = format!("http://{}", spec.peer);
        let mut args: Vec<String> = [
            "--name",
            &spec.name,
            "--data-dir",
            &spec.data_dir.to_string_lossy(),
            "--listen-client-urls",
            &client,
            "--advertise-client-urls",
            &client,
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
            "--initial-cluster",
            &self.initial_cluster,
            "--initial-cluster-token",
            &self.token,
            "--initial-cluster-state",
            state,
            // Structured and quiet: what lands in the log is what went wrong.
            "--logger",
            "zap",
            "--log-level",
            "warn",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if self.opts.fast_elections {
            args.extend(
                ["--heartbeat-interval", "50", "--election-timeout", "500"].map(String::from),
            );
        }
        args.extend(self.opts.args.iter().cloned());
        Ok(args)
    }

    /// Wait until the members `which` are all healthy; fail at once if one exits.
    fn wait_ready(&mut self, which: &[usize]) -> Result<(), Error> {
        let within = self.opts.ready_within;
        let deadline = Instant::now() + within;
        let mut pending: Vec<usize> = which.to_vec();
        loop {
            let mut still = Vec::new();
            for &i in &pending {
                let m = self.members.get_mut(i).ok_or(Error::NoMember(i))?;
                let Some(process) = m.process.as_mut() else {
                    return Err(Error::Start(format!("etcd member {i} is not running")));
                };
                if let Some(status) = process.exited() {
                    return Err(Error::Start(format!(
                        "etcd member {i} ({}) exited ({status}); its log ends:\n{}",
                        m.spec.client,
                        member::log_tail(&m.spec.log, LOG_LINES)
                    )));
                }
                if !health::healthy(m.spec.client, PROBE_TIMEOUT) {
                    still.push(i);
                }
            }
            pending = still;
            let Some(&late) = pending.first() else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                let spec = &self.members.get(late).ok_or(Error::NoMember(late))?.spec;
                return Err(Error::Start(format!(
                    "etcd member {late} ({}) not healthy within {within:?}; its log ends:\n{}",
                    spec.client,
                    member::log_tail(&spec.log, LOG_LINES)
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    fn kill_all(&mut self) {
        for m in &mut self.members {
            if let Some(p) = m.process.take() {
                p.kill();
            }
        }
    }

    /// Members in the cluster.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Never true for a started cluster; here because `len` is.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Client addresses, in member order.
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.members.iter().map(|m| m.spec.client).collect()
    }

    /// Client URLs (`http://127.0.0.1:port`), in member order.
    pub fn client_urls(&self) -> Vec<String> {
        self.client_addrs()
            .iter()
            .map(|a| format!("http://{a}"))
            .collect()
    }

    /// The first member's client URL: the whole of a one-member cluster.
    pub fn url(&self) -> String {
        self.client_urls().into_iter().next().unwrap_or_default()
    }

    /// Member `i`'s log file.
    pub fn log(&self, i: usize) -> Option<&Path> {
        self.members.get(i).map(|m| m.spec.log.as_path())
    }

    /// Whether member `i` is running (started and not exited).
    pub fn is_running(&mut self, i: usize) -> bool {
        self.members
            .get_mut(i)
            .and_then(|m| m.process.as_mut())
            .is_some_and(|p| p.exited().is_none())
    }

    /// SIGKILL member `i`; its data stays for [`Cluster::restart`].
    pub fn kill(&mut self, i: usize) -> Result<(), Error> {
        let m = self.members.get_mut(i).ok_or(Error::NoMember(i))?;
        if let Some(p) = m.process.take() {
            p.kill();
        }
        Ok(())
    }

    /// Start member `i` again on its ports and data (killing it first if it runs), and
    /// wait until it is healthy. An early exit (its port briefly still held) is retried.
    pub fn restart(&mut self, i: usize) -> Result<(), Error> {
        self.kill(i)?;
        let mut failures = Vec::new();
        for _ in 0..self.opts.tries.max(1) {
            self.spawn(i, "existing")?;
            match self.wait_ready(&[i]) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    self.kill(i)?;
                    failures.push(e.to_string());
                    std::thread::sleep(POLL);
                }
            }
        }
        Err(Error::Start(format!(
            "etcd member {i} did not restart:\n{}",
            failures.join("\n")
        )))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_all();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
