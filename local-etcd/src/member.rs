//! One etcd process, and the watchman that kills it if this process dies first.
//!
//! `Drop` stops etcd when a test ends normally, but not when the test process is
//! killed (a CI timeout, a Ctrl-C on one process). So next to each etcd runs a small
//! shell that waits on a pipe from this process; the pipe closes when this process goes,
//! however it goes, and the shell then kills etcd and removes the cluster's temp dir. Unlike
//! `PR_SET_PDEATHSIG`, this does not depend on which thread spawned etcd, so one etcd can
//! be shared by tests on other threads.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// How a member is to be started.
#[derive(Clone, Debug)]
pub struct Spec {
    pub name: String,
    pub client: SocketAddr,
    pub peer: SocketAddr,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

/// A running etcd and its watchman.
#[derive(Debug)]
pub struct Process {
    etcd: Child,
    watchman: Child,
}

impl Process {
    /// Start etcd for `spec`; its output goes to the spec's log file. Should this
    /// process die first, the watchman removes `leftovers` too.
    pub fn spawn(
        bin: &Path,
        spec: &Spec,
        args: &[String],
        leftovers: &Path,
    ) -> std::io::Result<Process> {
        let log = File::create(&spec.log)?;
        let mut etcd = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        // `read` is a shell builtin, so the watchman has no child that could outlive it.
        // It ignores the signals a Ctrl-C or a hang-up sends the whole process group, so
        // it is still there to clean up after them; it says so before it waits.
        let script = r#"trap '' INT TERM HUP; echo armed; while read -r _; do :; done; kill -9 "$1" 2>/dev/null; rm -rf "$2""#;
        let watchman = Command::new("sh")
            .args(["-c", script, "watchman"])
            .arg(etcd.id().to_string())
            .arg(leftovers)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .and_then(armed);
        match watchman {
            Ok(watchman) => Ok(Process { etcd, watchman }),
            Err(e) => {
                let _ = etcd.kill();
                let _ = etcd.wait();
                Err(e)
            }
        }
    }

    /// The exit status, once etcd has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.etcd.try_wait().ok().flatten()
    }

    /// SIGKILL etcd and reap it; its data stays.
    pub fn kill(self) {
        drop(self);
    }
}

impl Drop for Process {
    // The watchman goes first, so it cannot kill a reused pid or remove data that a
    // restart will need.
    fn drop(&mut self) {
        let _ = self.watchman.kill();
        let _ = self.watchman.wait();
        let _ = self.etcd.kill();
        let _ = self.etcd.wait();
    }
}

/// The watchman, once it has said it is armed (its traps are set).
fn armed(mut watchman: Child) -> std::io::Result<Child> {
    let mut said = String::new();
    if let Some(out) = watchman.stdout.take() {
        // A few bytes from a local shell: it says them or exits (EOF).
        BufReader::new(out.take(64)).read_line(&mut said)?;
    }
    if said.trim() == "armed" {
        Ok(watchman)
    } else {
        let _ = watchman.kill();
        let _ = watchman.wait();
        Err(std::io::Error::other(
            "the etcd watchman shell did not start",
        ))
    }
}

/// The last `lines` lines of a log file, for error messages.
pub fn log_tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let skip = all.len().saturating_sub(lines);
    all.into_iter().skip(skip).collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "{what}: not within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn spec(tag: &str) -> Spec {
        let dir =
            std::env::temp_dir().join(format!("local-etcd-member-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        Spec {
            name: "m0".into(),
            client: "127.0.0.1:1".parse().unwrap(),
            peer: "127.0.0.1:2".parse().unwrap(),
            data_dir: dir.join("data"),
            log: dir.join("m0.log"),
        }
    }

    // `sleep` stands in for etcd: the watchman neither knows nor cares.
    #[test]
    fn when_our_end_of_the_pipe_closes_the_watchman_kills_it_and_removes_its_data() {
        let spec = spec("orphan");
        let mut p =
            Process::spawn(Path::new("sleep"), &spec, &["600".into()], &spec.data_dir).unwrap();
        assert!(p.exited().is_none());
        // A Ctrl-C or hang-up reaches the whole group; the watchman must outlive it.
        for signal in ["-INT", "-TERM", "-HUP"] {
            let sent = Command::new("kill")
                .args([signal, &p.watchman.id().to_string()])
                .status()
                .unwrap();
            assert!(sent.success());
        }
        // What the kernel does when this process dies, however it dies.
        drop(p.watchman.stdin.take());
        wait_for("stand-in killed", || p.exited().is_some());
        wait_for("data removed", || !spec.data_dir.exists());
        let _ = std::fs::remove_dir_all(spec.data_dir.parent().unwrap());
    }

    #[test]
    fn a_kill_keeps_the_data_for_a_restart() {
        let spec = spec("kill");
        let p = Process::spawn(Path::new("sleep"), &spec, &["600".into()], &spec.data_dir).unwrap();
        // The watchman is reaped before its pipe closes, so nothing can act later.
        p.kill();
        assert!(spec.data_dir.exists(), "a kill must not remove the data");
        let _ = std::fs::remove_dir_all(spec.data_dir.parent().unwrap());
    }

    #[test]
    fn the_log_tail_is_the_last_lines() {
        let dir = std::env::temp_dir().join(format!("local-etcd-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("x.log");
        std::fs::write(&log, "a\nb\nc\n").unwrap();
        assert_eq!(log_tail(&log, 2), "b\nc");
        assert_eq!(log_tail(&log, 9), "a\nb\nc");
        assert_eq!(log_tail(&dir.join("missing"), 2), "");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
