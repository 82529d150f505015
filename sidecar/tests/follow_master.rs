//! The whole sidecar in-process with `--follow-master`: mock-etcd (or a real etcd 3.4,
//! when installed) holds the MASTER key, two wiremock masters answer heartbeats, and
//! the key is switched from one to the other under the running sidecar.
//!
//! Both masters serve the same HTTP port, on 127.0.0.1 and 127.0.0.2: the key names a
//! host and its RPC port, and the sidecar keeps one HTTP port (`--master-http-port`)
//! for whichever master it names.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

use sidecar::config::{Config, Secret};
use sidecar::core::master_key;
use sidecar::driver::Sidecar;
use sidecar::peers::etcd::EtcdClient;
use sidecar::peers::http::{build_client, Redirects};
use sidecar::shutdown;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

const METRICS: &str =
    "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 2.0\n";
const HEARTBEAT: &str = "/v1/internal/heartbeat";
/// The masters' RPC port, as their `service_name` names it (nothing listens there).
const RPC_PORT: u16 = 7777;

async fn mount(server: &MockServer, m: &str, p: &str, response: ResponseTemplate) {
    Mock::given(method(m))
        .and(path(p))
        .respond_with(response)
        .mount(server)
        .await;
}

/// A master answering every heartbeat 200, on `listener`.
async fn master(listener: TcpListener) -> MockServer {
    let server = MockServer::builder().listener(listener).start().await;
    mount(&server, "POST", HEARTBEAT, ResponseTemplate::new(200)).await;
    server
}

/// Two listeners on one port, on 127.0.0.1 and 127.0.0.2; `None` where 127.0.0.2
/// cannot be bound (not every system routes all of 127/8 to loopback).
fn two_hosts_one_port() -> Option<(TcpListener, TcpListener)> {
    for _ in 0..20 {
        let a = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).ok()?;
        let port = a.local_addr().ok()?.port();
        match TcpListener::bind(SocketAddr::from(([127, 0, 0, 2], port))) {
            Ok(b) => return Some((a, b)),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(_) => return None,
        }
    }
    None
}

async fn heartbeats(server: &MockServer) -> usize {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path() == HEARTBEAT)
        .count()
}

/// Wait until `server` has received more than `after` heartbeats; answers how long it
/// took, or panics at `deadline`.
async fn heartbeat_arrives(server: &MockServer, after: usize, deadline: Duration) -> Duration {
    let started = Instant::now();
    while heartbeats(server).await <= after {
        assert!(
            started.elapsed() < deadline,
            "no heartbeat within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    started.elapsed()
}

/// Where the MASTER key lives.
enum Etcd {
    Mock(mock_etcd::MockEtcd),
    /// A real etcd on loopback (see `local-etcd`), killed on drop.
    Real(local_etcd::Cluster),
}

impl Etcd {
    async fn mock() -> Option<Etcd> {
        let events = mock_kit::Events::none("mock-etcd");
        let etcd = mock_etcd::start(mock_etcd::Config::default(), events).await;
        Some(Etcd::Mock(etcd.expect("mock-etcd starts")))
    }

    fn real() -> Option<Etcd> {
        if let Some(why) = local_etcd::unavailable() {
            eprintln!("SKIPPED: {why}");
            return None;
        }
        let options = local_etcd::Options {
            tag: "sidecar-follow".into(),
            ..Default::default()
        };
        let cluster = local_etcd::Cluster::start(options).unwrap_or_else(|e| panic!("{e}"));
        Some(Etcd::Real(cluster))
    }

    fn url(&self) -> String {
        match self {
            Etcd::Mock(etcd) => etcd.url(),
            Etcd::Real(cluster) => cluster.url(),
        }
    }
}

struct World {
    etcd: Etcd,
    vllm: MockServer,
    first: MockServer,
    second: Option<MockServer>,
    port: u16,
    writer: EtcdClient,
}

impl World {
    async fn start(etcd: Option<Etcd>) -> Option<World> {
        let etcd = etcd?;
        let Some((a, b)) = two_hosts_one_port() else {
            eprintln!("SKIPPED: cannot bind 127.0.0.2 beside 127.0.0.1");
            return None;
        };
        let port = a.local_addr().ok()?.port();
        let vllm = MockServer::start().await;
        mount(&vllm, "GET", "/health", ResponseTemplate::new(200)).await;
        let page = ResponseTemplate::new(200)
            .set_body_string(METRICS)
            .insert_header("content-type", "text/plain; version=0.0.4");
        mount(&vllm, "GET", "/metrics", page).await;
        let writer = EtcdClient::new(
            vec![etcd.url().parse().ok()?],
            String::new(),
            Secret::default(),
            Duration::from_secs(2),
            build_client(Redirects::Never).ok()?,
        );
        Some(World {
            etcd,
            vllm,
            first: master(a).await,
            second: Some(master(b).await),
            port,
            writer,
        })
    }

    fn config(&self, read_interval: &str) -> Config {
        let port = self.port.to_string();
        let flags = vec![
            "--etcd-endpoints".to_string(),
            self.etcd.url(),
            "--etcd-namespace".into(),
            "ns".into(),
            "--vllm-url".into(),
            self.vllm.uri(),
            "--register-addr".into(),
            "127.0.0.1:18000".into(),
            // Nothing listens here: only the MASTER key leads to a master.
            "--xllm-service-url".into(),
            "http://127.0.0.1:1".into(),
            "--follow-master".into(),
            "--master-http-port".into(),
            port,
            "--master-read-interval".into(),
            read_interval.into(),
            "--lease-ttl".into(),
            "3".into(),
            "--keepalive-interval".into(),
            "0.2".into(),
            "--heartbeat-interval".into(),
            "0.2".into(),
            "--health-timeout".into(),
            "1".into(),
            "--etcd-timeout".into(),
            "1".into(),
        ];
        Config::from_flags(flags).unwrap()
    }

    /// The master key names `host` (with the RPC port, as xllm-service writes it).
    async fn elect(&self, host: &str) {
        let value = format!("{host}:{RPC_PORT}");
        self.writer
            .put(&master_key("ns"), &value, 0)
            .await
            .expect("the master key is written");
    }
}

async fn run(
    world: &World,
    read_interval: &str,
) -> (shutdown::Trigger, tokio::task::JoinHandle<()>) {
    let sidecar = Sidecar::new(world.config(read_interval)).unwrap();
    let (trigger, listener) = shutdown::channel();
    (trigger, tokio::spawn(sidecar.run(listener)))
}

async fn stop(trigger: shutdown::Trigger, task: tokio::task::JoinHandle<()>) {
    trigger.fire();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("sidecar stops")
        .unwrap();
}

#[tokio::test]
async fn a_switched_master_key_moves_heartbeats_within_one_read_interval() {
    let Some(w) = World::start(Etcd::mock().await).await else {
        return;
    };
    switch_between_two_masters(w).await;
}

#[tokio::test]
async fn a_switched_master_key_in_a_real_etcd_moves_heartbeats_too() {
    let Some(w) = World::start(Etcd::real()).await else {
        return;
    };
    switch_between_two_masters(w).await;
}

async fn switch_between_two_masters(mut w: World) {
    w.elect("127.0.0.1").await;
    let (trigger, task) = run(&w, "1").await;
    heartbeat_arrives(&w.first, 0, Duration::from_secs(10)).await;

    // The first master stays up and answers 200: only the steady read sees the switch.
    w.elect("127.0.0.2").await;
    let second = w.second.take().unwrap();
    // Bound: read interval (1 s) + heartbeat interval (0.2 s) + round trips.
    let took = heartbeat_arrives(&second, 0, Duration::from_secs(3)).await;
    assert!(took < Duration::from_millis(2500), "{took:?}");
    // Nothing more goes to the first once one has reached the second.
    let first_then = heartbeats(&w.first).await;
    heartbeat_arrives(&second, heartbeats(&second).await, Duration::from_secs(2)).await;
    heartbeat_arrives(&second, heartbeats(&second).await, Duration::from_secs(2)).await;
    assert_eq!(heartbeats(&w.first).await, first_then);

    // The second dies and the key names the first again: the failed heartbeats read
    // the key, long before the next steady read would.
    drop(second);
    w.elect("127.0.0.1").await;
    let seen = heartbeats(&w.first).await;
    let took = heartbeat_arrives(&w.first, seen, Duration::from_secs(3)).await;
    assert!(took < Duration::from_secs(2), "{took:?}");
    stop(trigger, task).await;
}

#[tokio::test]
async fn a_dead_master_is_left_on_failure_not_on_the_slow_read() {
    let Some(mut w) = World::start(Etcd::mock().await).await else {
        return;
    };
    w.elect("127.0.0.2").await;
    // A read interval far beyond the test: only failed heartbeats can cause a read.
    let (trigger, task) = run(&w, "600").await;
    let second = w.second.take().unwrap();
    heartbeat_arrives(&second, 0, Duration::from_secs(10)).await;
    drop(second);
    w.elect("127.0.0.1").await;
    // Bound here: one failed heartbeat (0.2 s + its timeout) + one read + one post.
    let took = heartbeat_arrives(&w.first, 0, Duration::from_secs(4)).await;
    assert!(took < Duration::from_secs(3), "{took:?}");
    stop(trigger, task).await;
}
