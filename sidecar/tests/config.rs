//! Flags: the reference's defaults, its endpoint and address rules, and exit-2 errors.

use std::time::Duration;

use sidecar::config::{derive_register_addr, parse_etcd_endpoints, Config};
use sidecar::instance::InstanceType;

fn config(flags: &[&str]) -> Result<Config, String> {
    Config::from_flags(flags.iter().copied()).map_err(|e| e.to_string())
}

#[test]
fn defaults_are_the_references() {
    // Only meaningful when the reference's env vars are unset.
    for var in [
        "ETCD_ENDPOINTS",
        "ETCD_NAMESPACE",
        "ETCD_USERNAME",
        "ETCD_PASSWORD",
        "XLLM_INTERNAL_TOKEN",
        "XLLM_FOLLOW_MASTER",
        "XLLM_MASTER_HTTP_PORT",
        "XLLM_MASTER_READ_INTERVAL",
    ] {
        if std::env::var_os(var).is_some() {
            eprintln!("skipping: {var} is set in the environment");
            return;
        }
    }
    let c = config(&[]).unwrap();
    assert_eq!(c.etcd_endpoints.len(), 1);
    assert_eq!(c.etcd_endpoints[0].as_str(), "http://127.0.0.1:2379/");
    assert_eq!(c.etcd_namespace, "");
    assert_eq!(c.etcd_username, "");
    assert_eq!(c.etcd_timeout, Duration::from_secs(3));
    assert_eq!(c.vllm_url.as_str(), "http://127.0.0.1:18000/");
    assert_eq!(c.register_addr, "127.0.0.1:18000");
    assert_eq!(c.backend_type, "vllm");
    assert_eq!(c.instance_type, InstanceType::Default);
    assert_eq!(c.instance_name, "vllm");
    assert_eq!(c.lease_ttl, 6);
    assert_eq!(c.keepalive_interval, Duration::from_secs(2));
    assert_eq!(c.health_timeout, Duration::from_secs(3));
    assert_eq!(c.health_fail_threshold, 3);
    assert_eq!(
        c.heartbeat_url.as_str(),
        "http://127.0.0.1:9998/v1/internal/heartbeat"
    );
    assert!(c.internal_token.is_empty());
    assert_eq!(c.heartbeat_interval, Duration::from_secs(3));
    assert_eq!(c.metrics_url.as_str(), "http://127.0.0.1:18000/metrics");
    assert_eq!(c.log_level, "INFO");
    assert_eq!(c.metrics_max_bytes, 16 * 1024 * 1024);
    assert_eq!(c.scrape_timeout, c.health_timeout);
    assert!(c.admin_listen.is_none());
    assert!(!c.follow_master);
    assert_eq!(c.master_http_port, None);
    assert_eq!(c.master_read_interval, Duration::from_secs(10));
    // keepalive every 2 s = TTL/3.
    assert_eq!(c.keepalive_period(), Duration::from_secs(2));
}

#[test]
fn keepalive_is_at_most_a_third_of_the_ttl() {
    let c = config(&["--lease-ttl", "3", "--keepalive-interval", "2.5"]).unwrap();
    assert_eq!(c.keepalive_period(), Duration::from_secs(1));
}

#[test]
fn etcd_endpoints_keep_schemes_and_add_http() {
    let eps = parse_etcd_endpoints(" a:2379, https://b:2379/ ,http://c:1,,").unwrap();
    let eps: Vec<&str> = eps.iter().map(|u| u.as_str()).collect();
    assert_eq!(eps, ["http://a:2379/", "https://b:2379/", "http://c:1/"]);
    assert!(parse_etcd_endpoints(" , ").is_err());
    assert!(parse_etcd_endpoints("ftp://x:1").is_err());
}

#[test]
fn register_addr_is_derived_like_the_reference() {
    assert_eq!(
        derive_register_addr("http://host:18000/v1/models"),
        "host:18000"
    );
    assert_eq!(
        derive_register_addr("http://127.0.0.1:18000/"),
        "127.0.0.1:18000"
    );
    assert_eq!(derive_register_addr("host:1"), "host:1");
    let c = config(&["--vllm-url", "https://10.0.0.5:8000/"]).unwrap();
    assert_eq!(c.register_addr, "10.0.0.5:8000");
    assert_eq!(c.metrics_url.as_str(), "https://10.0.0.5:8000/metrics");
}

#[test]
fn register_addr_from_an_ipv6_vllm_url_keeps_the_brackets() {
    assert_eq!(derive_register_addr("http://[::1]:18000"), "[::1]:18000");
    assert_eq!(
        derive_register_addr("http://[fd00:10::5]:8000/v1"),
        "[fd00:10::5]:8000"
    );
    let c = config(&["--vllm-url", "http://[fd00::7]:18000/"]).unwrap();
    assert_eq!(c.register_addr, "[fd00::7]:18000");
}

#[test]
fn register_addr_without_a_port_gets_the_schemes() {
    assert_eq!(derive_register_addr("http://vllm.local/"), "vllm.local:80");
    assert_eq!(derive_register_addr("https://vllm.local"), "vllm.local:443");
    assert_eq!(derive_register_addr("http://[::1]/"), "[::1]:80");
    // User info never reaches the etcd key.
    assert_eq!(derive_register_addr("http://u:pw@h:1/x"), "h:1");
    let c = config(&["--vllm-url", "http://vllm.local"]).unwrap();
    assert_eq!(c.register_addr, "vllm.local:80");
}

#[test]
fn register_addr_accepts_names_ipv4_and_bracketed_ipv6() {
    for addr in [
        "10.0.0.5:18000",
        "vllm-0.vllm.svc:18000",
        "[::1]:18000",
        "[fd00:10:244::1f]:18000",
        "[::ffff:10.0.0.1]:1",
    ] {
        let c = config(&["--register-addr", addr]).unwrap();
        assert_eq!(c.register_addr, addr);
    }
}

#[test]
fn register_addr_ipv6_without_brackets_is_refused_with_a_hint() {
    for addr in ["fd00::1:18000", "::1", "fd00:10:244::1f", "2001:db8::1:80"] {
        let err = config(&["--register-addr", addr]).unwrap_err();
        assert!(err.contains("--register-addr"), "{addr}: {err}");
        assert!(err.contains("needs brackets"), "{addr}: {err}");
        assert!(!err.contains('\n'), "one line: {err:?}");
    }
}

#[test]
fn register_addr_must_be_host_and_port() {
    for (addr, why) in [
        ("host", "port is missing"),
        ("host:", "port is missing"),
        ("[::1]", "port is missing"),
        ("host:0", "1 to 65535"),
        ("host:65536", "1 to 65535"),
        ("host:http", "port is missing"),
        (":18000", "host is missing"),
        ("[::1]:", "port is missing"),
        ("[nope]:1", "inside the brackets"),
        ("[::1:1", "port is missing"),
        ("h]:1", "malformed"),
        ("user@h:1", "scheme, path or user"),
        ("h:1/x", "scheme, path or user"),
        ("h :1", "no spaces"),
    ] {
        let err = config(&["--register-addr", addr]).unwrap_err();
        assert!(err.contains("--register-addr"), "{addr}: {err}");
        assert!(err.contains(why), "{addr}: expected {why:?} in {err}");
    }
}

#[test]
fn instance_types_case_insensitive_and_unknown_rejected() {
    assert_eq!(
        config(&["--instance-type", "PREFILL"])
            .unwrap()
            .instance_type,
        InstanceType::Prefill
    );
    assert_eq!(
        config(&["--instance-type", "mix"]).unwrap().instance_type,
        InstanceType::Mix
    );
    let err = config(&["--instance-type", "BOTH"]).unwrap_err();
    assert!(err.contains("--instance-type"), "{err}");
}

#[test]
fn bad_values_name_their_flag() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--lease-ttl", "2", "--keepalive-interval", "2"],
            "--lease-ttl",
        ),
        (&["--lease-ttl", "0"], "--lease-ttl"),
        (&["--keepalive-interval", "0"], "--keepalive-interval"),
        (&["--keepalive-interval", "nan"], "--keepalive-interval"),
        (&["--vllm-url", "not a url"], "--vllm-url"),
        (&["--vllm-url", "ftp://h:1"], "--vllm-url"),
        (&["--xllm-service-url", "http://"], "--xllm-service-url"),
        (&["--metrics-url", "::"], "--metrics-url"),
        (&["--etcd-endpoints", "http://h:1/path"], "--etcd-endpoints"),
        (&["--register-addr", "http://h:1"], "--register-addr"),
        (&["--health-fail-threshold", "0"], "--health-fail-threshold"),
        (&["--admin-listen", "nope"], "--admin-listen"),
        (&["--latency-stat", "p42"], "--latency-stat"),
        (&["--heartbeat-interval", "-1"], "--heartbeat-interval"),
    ];
    for (flags, flag) in cases {
        let err = config(flags).unwrap_err();
        assert!(err.contains(flag), "{flags:?}: {err}");
        assert!(!err.contains('\n'), "one line: {err:?}");
    }
}

#[test]
fn debug_output_hides_secrets() {
    let c = config(&[
        "--internal-token",
        "tok-SECRET",
        "--etcd-username",
        "u",
        "--etcd-password",
        "pw-SECRET",
    ])
    .unwrap();
    let shown = format!("{c:?}");
    assert!(!shown.contains("tok-SECRET"), "{shown}");
    assert!(!shown.contains("pw-SECRET"), "{shown}");
    assert!(shown.contains("<redacted>"));
    assert_eq!(c.internal_token.expose(), "tok-SECRET");
}

#[test]
fn a_repeated_flag_takes_the_last_value() {
    assert_eq!(
        config(&["--lease-ttl", "9", "--lease-ttl", "12"])
            .unwrap()
            .lease_ttl,
        12
    );
}

#[test]
fn following_the_master_is_off_unless_asked_and_its_flags_are_checked() {
    use sidecar::core::CoreConfig;
    if std::env::var_os("XLLM_FOLLOW_MASTER").is_some() {
        eprintln!("skipping: XLLM_FOLLOW_MASTER is set in the environment");
        return;
    }
    let off = config(&["--master-http-port", "8080"]).unwrap();
    assert!(CoreConfig::from_config(&off, 0).follow.is_none());
    let on = config(&[
        "--follow-master",
        "--master-http-port",
        "8080",
        "--master-read-interval",
        "2.5",
        "--etcd-namespace",
        "ns",
        "--xllm-service-url",
        "http://svc:9998/",
    ])
    .unwrap();
    let follow = CoreConfig::from_config(&on, 0).follow.unwrap();
    assert_eq!(follow.master_key, "/ns/XLLM:SERVICE:MASTER");
    assert_eq!(follow.http_port, Some(8080));
    assert_eq!(follow.read_interval, Duration::from_millis(2500));
    assert_eq!(
        follow.configured_url.as_str(),
        "http://svc:9998/v1/internal/heartbeat"
    );
    for (flags, flag) in [
        (&["--master-http-port", "0"][..], "--master-http-port"),
        (&["--master-http-port", "65536"][..], "--master-http-port"),
        (
            &["--master-read-interval", "0"][..],
            "--master-read-interval",
        ),
        (
            &["--master-read-interval", "nan"][..],
            "--master-read-interval",
        ),
    ] {
        let e = config(flags).unwrap_err();
        assert!(e.contains(flag), "{flags:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}
