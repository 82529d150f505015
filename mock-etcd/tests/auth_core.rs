//! Auth in the core alone, as the sidecar's and mock-master's tests and a simulator
//! use it: configured users are root-role users with auth enabled from the start
//! (whatever their names), and a fake without configured users is set up through the
//! API as a real etcd is.

use std::time::Duration;

use mock_etcd::{Config, EtcdCore};
use serde_json::Value;

fn core(users: &[(&str, &str)]) -> EtcdCore {
    let config = Config {
        users: users
            .iter()
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .collect(),
        ..Config::default()
    };
    EtcdCore::new(config, 1_764_590_000_000, 7)
}

fn call(core: &mut EtcdCore, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let a = core.handle_json(path, token, body.as_bytes(), Duration::ZERO);
    let v = serde_json::from_slice(&a.body).unwrap_or(Value::Null);
    (a.status, v)
}

fn login(core: &mut EtcdCore, name: &str, password: &str) -> String {
    let body = format!(r#"{{"name":"{name}","password":"{password}"}}"#);
    let (status, v) = call(core, "/v3/auth/authenticate", None, &body);
    assert_eq!(status, 200, "{v}");
    v["token"].as_str().unwrap().to_string()
}

#[test]
fn configured_users_are_root_and_auth_starts_enabled() {
    let mut c = core(&[("xllm", "pw"), ("ops", "pw2")]);
    assert!(c.auth().enabled());
    let put = r#"{"key":"YQ==","value":"eA=="}"#;
    assert_eq!(call(&mut c, "/v3/kv/put", None, put).0, 400);
    let t = login(&mut c, "ops", "pw2");
    assert_eq!(call(&mut c, "/v3/kv/put", Some(&t), put).0, 200);
    let (status, v) = call(&mut c, "/v3/auth/user/get", Some(&t), r#"{"name":"xllm"}"#);
    assert_eq!((status, &v["roles"]), (200, &serde_json::json!(["root"])));
    let (_, v) = call(&mut c, "/v3/auth/user/list", Some(&t), "{}");
    assert_eq!(v["users"], serde_json::json!(["ops", "xllm"]));
    // A configured user may manage auth, e.g. add a reader.
    let add = r#"{"name":"reader","password":"r"}"#;
    assert_eq!(call(&mut c, "/v3/auth/user/add", Some(&t), add).0, 200);
    let r = login(&mut c, "reader", "r");
    let (status, v) = call(&mut c, "/v3/kv/range", Some(&r), r#"{"key":"YQ=="}"#);
    assert_eq!((status, v["code"].as_u64()), (403, Some(7)), "{v}");
}

#[test]
fn without_configured_users_auth_is_set_up_through_the_api() {
    let mut c = core(&[]);
    assert!(!c.auth().enabled());
    let enable = |c: &mut EtcdCore| call(c, "/v3/auth/enable", None, "{}");
    assert_eq!(
        enable(&mut c).1["error"],
        "etcdserver: root user does not exist"
    );
    let add = r#"{"name":"root","password":"pw"}"#;
    assert_eq!(call(&mut c, "/v3/auth/user/add", None, add).0, 200);
    assert_eq!(
        enable(&mut c).1["error"],
        "etcdserver: root user does not have root role"
    );
    let grant = r#"{"user":"root","role":"root"}"#;
    assert_eq!(call(&mut c, "/v3/auth/user/grant", None, grant).0, 200);
    assert_eq!(enable(&mut c).0, 200);
    assert!(c.auth().enabled());
    let t = login(&mut c, "root", "pw");
    assert_eq!(call(&mut c, "/v3/auth/disable", Some(&t), "{}").0, 200);
    assert!(!c.auth().enabled());
    // Disabling ends every token.
    let (status, _) = call(&mut c, "/v3/kv/range", Some(&t), r#"{"key":"YQ=="}"#);
    assert_eq!(status, 401);
    // Losing the data forgets the users made through the API.
    c.lose_data(true, 1_764_590_000_000);
    let (_, v) = call(&mut c, "/v3/auth/user/list", None, "{}");
    assert_eq!(v.get("users"), None, "{v}");
}
