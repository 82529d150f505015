//! Starts a real `etcd` on loopback for differential tests and the load test: free
//! ports, a temp data dir, killed (and the dir removed) on drop.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct RealEtcd {
    child: Child,
    dir: PathBuf,
    pub url: String,
}

/// The etcd binary, if installed.
pub fn etcd_binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("ETCD_BIN") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("etcd"))
        .chain([
            PathBuf::from("/usr/bin/etcd"),
            PathBuf::from("/usr/local/bin/etcd"),
        ])
        .find(|p| p.is_file())
}

/// A free loopback port, never the same twice in this process (two etcds started at
/// once must not share one).
fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

impl RealEtcd {
    /// Start etcd and wait (bounded) until it answers `/health`. None if not installed.
    pub async fn start(extra: &[&str]) -> Option<RealEtcd> {
        let bin = etcd_binary()?;
        let (client, peer) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!(
            "mock-etcd-diff-{}-{}-{}",
            std::process::id(),
            client,
            mock_kit::events::now_ms()
        ));
        std::fs::create_dir_all(&dir).ok()?;
        let curl = format!("http://127.0.0.1:{client}");
        let purl = format!("http://127.0.0.1:{peer}");
        let child = Command::new(bin)
            .args([
                "--name",
                "default",
                "--data-dir",
                dir.to_str()?,
                "--listen-client-urls",
                &curl,
                "--advertise-client-urls",
                &curl,
                "--listen-peer-urls",
                &purl,
                "--initial-advertise-peer-urls",
                &purl,
                "--initial-cluster",
                &format!("default={purl}"),
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let etcd = RealEtcd {
            child,
            dir,
            url: curl,
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(r) = http.get(format!("{}/health", etcd.url)).send().await {
                if r.status().is_success() {
                    // A leader exists once a linearizable read answers.
                    if let Ok(r) = http
                        .post(format!("{}/v3/kv/range", etcd.url))
                        .body(r#"{"key":"AA=="}"#)
                        .send()
                        .await
                    {
                        if r.status().is_success() {
                            return Some(etcd);
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("real etcd did not become healthy within 20 s");
    }
}

impl Drop for RealEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
