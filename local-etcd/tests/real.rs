//! Against the real binary; skipped (with a message) where etcd is not installed.

use std::time::{Duration, Instant};

use local_etcd::{health, Cluster, Error, Options};

fn installed() -> bool {
    match local_etcd::unavailable() {
        None => true,
        Some(why) => {
            eprintln!("SKIPPED: {why}");
            false
        }
    }
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const PROBE: Duration = Duration::from_secs(1);

#[test]
fn one_member_serves_and_leaves_nothing_behind() {
    if !installed() {
        return;
    }
    let etcd = Cluster::start_one().unwrap();
    let addr = etcd.client_addrs()[0];
    assert!(health::healthy(addr, PROBE));
    assert_eq!(etcd.url(), format!("http://{addr}"));
    let log = etcd.log(0).unwrap().to_path_buf();
    let root = log.parent().unwrap().parent().unwrap().to_path_buf();
    assert!(root.exists());
    drop(etcd);
    assert!(!root.exists(), "{} left behind", root.display());
    assert!(
        !health::healthy(addr, PROBE),
        "etcd still answers after drop"
    );
}

#[test]
fn a_member_that_exits_fails_the_start_at_once_with_its_log() {
    if !installed() {
        return;
    }
    // A port that is taken, as a raced one would be: etcd cannot listen and exits.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let opts = Options {
        args: vec![
            "--listen-metrics-urls".into(),
            format!("http://{}", taken.local_addr().unwrap()),
        ],
        tries: 2,
        ..Options::default()
    };
    let err = Cluster::start(opts).unwrap_err();
    let Error::Start(msg) = &err else {
        panic!("expected a start error, got {err:?}");
    };
    // Exited (not timed out) on both tries, and the log says why.
    assert_eq!(msg.matches("exited").count(), 2, "{msg}");
    assert!(msg.contains("address already in use"), "{msg}");
}

#[test]
fn a_three_member_cluster_survives_a_member_and_takes_it_back() {
    if !installed() {
        return;
    }
    let mut etcd = Cluster::start(Options {
        members: 3,
        fast_elections: true,
        ..Options::default()
    })
    .unwrap();
    let addrs = etcd.client_addrs();
    assert_eq!(addrs.len(), 3);
    etcd.kill(0).unwrap();
    assert!(!etcd.is_running(0));
    wait_for("the other two healthy", || {
        addrs[1..].iter().all(|a| health::healthy(*a, PROBE))
    });
    etcd.restart(0).unwrap();
    assert!(etcd.is_running(0));
    assert_eq!(etcd.client_addrs(), addrs, "a restart keeps the ports");
    assert!(health::healthy(addrs[0], PROBE));
}

/// Run by `an_etcd_whose_owner_is_killed_goes_too` in a child process: start etcd, say
/// where, then wait to be killed.
#[test]
fn owner_process() {
    if std::env::var_os("LOCAL_ETCD_OWNER").is_none() || !installed() {
        return;
    }
    let etcd = Cluster::start_one().unwrap();
    let root = etcd.log(0).unwrap().parent().unwrap().parent().unwrap();
    println!("OWNER {} {}", etcd.client_addrs()[0], root.display());
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[test]
fn an_etcd_whose_owner_is_killed_goes_too() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    if !installed() {
        return;
    }
    let mut owner = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "owner_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("LOCAL_ETCD_OWNER", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(owner.stdout.take().unwrap());
    let said = out
        .lines()
        .map_while(Result::ok)
        .find_map(|l| Some(l.split_once("OWNER ")?.1.to_string()))
        .expect("the owner says where its etcd is");
    let mut words = said.split_whitespace();
    let addr: std::net::SocketAddr = words.next().unwrap().parse().unwrap();
    let root = std::path::PathBuf::from(words.next().unwrap());
    assert!(health::healthy(addr, PROBE));
    assert!(root.exists());
    // SIGKILL: no destructor runs in the owner.
    owner.kill().unwrap();
    owner.wait().unwrap();
    wait_for("etcd gone with its owner", || !health::healthy(addr, PROBE));
    wait_for("its temp dir removed", || !root.exists());
}
