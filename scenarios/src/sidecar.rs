//! The real `vllm-sidecar` binary as a child process: real flags, real signals.
//!
//! The sidecar is the thing under test, so it runs exactly as in production: a separate
//! process whose stdout/stderr lines go into the timeline, stopped with SIGTERM (graceful:
//! it must revoke its lease) or SIGKILL (the lease must expire on its own).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::sync::watch;

use mock_kit::Events;

use crate::cluster::Signal;
use crate::lock;

/// The kind of event each line the sidecar writes becomes (in virtual time: each of
/// its core's notes).
pub const LOG_EVENT: &str = "log";

/// Where the sidecar binary is: `$VLLM_SIDECAR_BIN`; else the one next to the runner when
/// run outside cargo, or under cargo when it is newer than every sidecar source; else
/// built by `cargo build -p sidecar` in the runner's own profile and target dir (never a
/// stale binary). Resolved once per process.
pub fn locate_binary() -> Result<PathBuf, String> {
    static FOUND: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    FOUND.get_or_init(locate_uncached).clone()
}

fn locate_uncached() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("VLLM_SIDECAR_BIN") {
        let p = PathBuf::from(p);
        let why = || format!("VLLM_SIDECAR_BIN={} is not a file", p.display());
        return p.is_file().then(|| p.clone()).ok_or_else(why);
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    // Tests and examples run from `deps/` and `examples/` in the profile's directory.
    let mut profile_dir = exe.parent();
    while let Some(d) = profile_dir.filter(|d| d.ends_with("deps") || d.ends_with("examples")) {
        profile_dir = d.parent();
    }
    let beside = profile_dir.map(|d| d.join("vllm-sidecar"));
    if let Some(p) = beside.filter(|p| p.is_file()) {
        // Outside cargo any binary beside the runner is the one shipped with it; under
        // cargo only one newer than every sidecar source (as after `cargo test
        // --workspace`, which builds it with the workspace's features: a nested
        // `cargo build -p sidecar` would rebuild dependencies with other features).
        if std::env::var_os("CARGO").is_none() || newer_than_sources(&p) {
            return Ok(p);
        }
    }
    build_binary(profile_dir)
}

/// Whether `binary` was written after every file the sidecar is built from.
fn newer_than_sources(binary: &Path) -> bool {
    let (Some(built), Some(workspace)) = (modified(binary), workspace()) else {
        return false;
    };
    let mut pending = vec![workspace.join("sidecar/src")];
    let mut sources = vec![
        workspace.join("sidecar/Cargo.toml"),
        workspace.join("Cargo.toml"),
        workspace.join("Cargo.lock"),
    ];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return false;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                sources.push(path);
            }
        }
    }
    sources
        .iter()
        .all(|s| modified(s).is_some_and(|m| m <= built))
}

/// The workspace's root directory.
fn workspace() -> Option<&'static Path> {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent()
}

fn modified(path: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn build_binary(profile_dir: Option<&Path>) -> Result<PathBuf, String> {
    let workspace = workspace().ok_or("no workspace root")?;
    let profile = profile_dir
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "debug".into());
    let target = profile_dir
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| workspace.join("target"));
    let mut cmd =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace)
        .env("CARGO_TARGET_DIR", &target)
        .args(["build", "-q", "-p", "sidecar", "--bin", "vllm-sidecar"]);
    if profile != "debug" {
        // `--profile release` is `--release`.
        cmd.args(["--profile", &profile]);
    }
    let status = cmd
        .status()
        .map_err(|e| format!("running cargo build for vllm-sidecar: {e}"))?;
    if !status.success() {
        return Err(format!(
            "cargo build -p sidecar --bin vllm-sidecar failed: {status}"
        ));
    }
    let p = target.join(&profile).join("vllm-sidecar");
    let why = || format!("built vllm-sidecar but {} does not exist", p.display());
    p.is_file().then(|| p.clone()).ok_or_else(why)
}

/// Have the kernel SIGKILL the child if the runner dies (a killed test run must not leave
/// 200 orphaned sidecars behind). Linux ties this to the spawning *thread*: spawn from a
/// runtime worker, never from `spawn_blocking`, whose idle threads exit.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2),
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// How to start one sidecar process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The program, found.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables set for it.
    pub env: Vec<(String, String)>,
    /// Variables the profile maps settings to that this sidecar is not given: unset,
    /// so the runner's own environment never stands in for them.
    pub unset: Vec<String>,
}

/// How many of a process's last output lines are kept, to say why it exited.
const KEPT_LINES: usize = 12;

/// A process's last output lines, each with its stream (`stderr: ...`).
type LastLines = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;

/// A running (or exited) sidecar process.
#[derive(Debug)]
pub struct SidecarProc {
    group: Pauser,
    last_lines: LastLines,
}

/// Exit code as the runner reports it: the code, or 128 + signal.
fn code_of(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// Environment variables a sidecar under test never inherits (any case: both spellings
/// of each proxy variable are read).
const SCRUBBED_ENV: [&str; 16] = [
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "SSL_CERT_FILE",
    // Settings sidecars also read from the environment: the harness gives each one
    // itself, or means it unset.
    "XLLM_INTERNAL_TOKEN",
    "ETCD_ENDPOINTS",
    "ETCD_NAMESPACE",
    "ETCD_USERNAME",
    "ETCD_PASSWORD",
];

impl SidecarProc {
    /// Start the process `launch` says; its output lines go to `events` as `log` events.
    pub fn spawn(launch: &Launch, events: Events) -> std::io::Result<SidecarProc> {
        let args = &launch.args;
        let mut cmd = Command::new(&launch.program);
        // Hermetic: every link of the mock cluster is plain HTTP on loopback, so a proxy
        // or CA bundle from the runner's environment must not reach the sidecars (a
        // proxy would take their traffic; a system bundle costs each one a 220 KB
        // parse at start-up, 200 at once in `many-instances`).
        for var in SCRUBBED_ENV
            .iter()
            .copied()
            .chain(launch.unset.iter().map(String::as_str))
        {
            cmd.env_remove(var);
        }
        cmd.args(args)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            // Its own process group, which every signal goes to: a wrapper that runs
            // the sidecar as its child passes none of them on by itself.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn()?;
        let pid = child.id();
        events.emit("spawn", serde_json::json!({"pid": pid, "args": args}));
        let last_lines = LastLines::default();
        if let Some(out) = child.stdout.take() {
            pipe_lines(out, "stdout", &events, &last_lines);
        }
        if let Some(err) = child.stderr.take() {
            pipe_lines(err, "stderr", &events, &last_lines);
        }
        let (tx, exit) = watch::channel(None);
        // The waiter owns the child and reaps it (SIGCHLD-driven, no polling).
        tokio::spawn(async move {
            let code = child.wait().await.map_or(-1, code_of);
            events.emit("exit", serde_json::json!({"code": code}));
            let _ = tx.send(Some(code));
        });
        Ok(SidecarProc {
            group: Pauser { pid, exit },
            last_lines,
        })
    }

    /// Its last output lines (at most a dozen), oldest first, each prefixed with its
    /// stream: what it said before it exited.
    pub fn last_lines(&self) -> Vec<String> {
        lock(&self.last_lines).iter().cloned().collect()
    }

    /// Exit code once exited.
    pub fn exit_code(&self) -> Option<i32> {
        *self.group.exit.borrow()
    }

    /// Whether the process has not exited yet.
    pub fn running(&self) -> bool {
        self.exit_code().is_none()
    }

    /// What stops and continues the process (its group) later, while it runs.
    pub fn pauser(&self) -> Option<Pauser> {
        self.group.pid.map(|_| self.group.clone())
    }

    /// Send `signal` without waiting (the timeline observes what follows).
    pub fn send(&self, signal: Signal) {
        self.group.signal(match signal {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
            Signal::Drain => libc::SIGUSR1,
            Signal::Undrain => libc::SIGUSR2,
        });
    }

    /// Wait up to `timeout` for the exit; answers the exit code, `None` if still running.
    pub async fn wait(&mut self, timeout: Duration) -> Option<i32> {
        let mut rx = self.group.exit.clone();
        let exited = tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await;
        let code = exited.ok()?.ok()?;
        *code
    }
}

/// Signals to one sidecar's process group while it runs; nothing once it exited. As a
/// pauser, it stops (`SIGSTOP`) and continues (`SIGCONT`) the process, as a debugger, a
/// VM pause or a spent CPU quota does.
#[derive(Clone, Debug)]
pub struct Pauser {
    pid: Option<u32>,
    exit: watch::Receiver<Option<i32>>,
}

impl Pauser {
    fn signal(&self, sig: i32) {
        if let (Some(pid), None) = (self.pid, *self.exit.borrow()) {
            // SAFETY: kill(2) on the process group of a pid we spawned (its leader), while
            // its waiter has not seen it exit (it is reaped only after, so the pid is not
            // yet reused).
            unsafe {
                libc::kill(-(pid as i32), sig);
            }
        }
    }

    /// Stop (`true`) or continue (`false`) the process.
    pub fn set(&self, stopped: bool) {
        self.signal(if stopped {
            libc::SIGSTOP
        } else {
            libc::SIGCONT
        });
    }
}

impl Drop for SidecarProc {
    fn drop(&mut self) {
        self.group.signal(libc::SIGKILL);
    }
}

/// Read `r`'s lines (the process's `stream`) in a task: each becomes a `log` event and
/// one of its last lines.
fn pipe_lines(
    r: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    stream: &'static str,
    events: &Events,
    last: &LastLines,
) {
    let (events, last) = (events.clone(), last.clone());
    tokio::spawn(async move {
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line: String = line.chars().take(4096).collect();
            {
                let mut g = lock(&last);
                if g.len() == KEPT_LINES {
                    g.pop_front();
                }
                g.push_back(format!("{stream}: {line}"));
            }
            let detail = match serde_json::from_str::<serde_json::Value>(&line) {
                Ok(v @ serde_json::Value::Object(_)) => v,
                _ => serde_json::json!({"line": line, "stream": stream}),
            };
            events.emit(LOG_EVENT, detail);
        }
    });
}
