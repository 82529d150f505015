//! Differential test: the same requests to a real etcd 3.4 and to mock-etcd, answers
//! compared after normalizing what legitimately differs (cluster/member IDs, raft term,
//! auto lease IDs, tokens, and a remaining TTL that may straddle a second boundary).
//!
//! Needs the `etcd` binary (Debian `etcd-server`); without it the test says so and passes.

#[path = "support/real_etcd.rs"]
mod real_etcd;

#[path = "support/diff_admin.rs"]
mod admin;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use base64::Engine;
use mock_etcd::{Config, MockEtcd};
use real_etcd::RealEtcd;
use serde_json::{json, Value};

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

#[derive(Debug, Clone)]
struct Resp {
    status: u16,
    content_type: String,
    location: String,
    allow: String,
    /// The `Trailer` header, and whether the body was sent without a length
    /// (chunked), as grpc-gateway sends its errors.
    trailer: String,
    chunked: bool,
    text: String,
}

struct Side {
    url: String,
    token: Option<String>,
    /// More tokens by alias (`$pub0` in `auth`), for steps as other users.
    tokens: HashMap<String, String>,
    ids: HashMap<String, String>,
}

struct Diff {
    http: reqwest::Client,
    real: Side,
    fake: Side,
    /// side value -> alias, for auto lease IDs and tokens.
    aliases: HashMap<String, String>,
    steps: usize,
}

impl Side {
    fn fill(&self, body: &str) -> String {
        let mut out = body.to_string();
        for (alias, id) in &self.ids {
            out = out.replace(&format!("${alias}"), id);
        }
        out
    }
}

impl Diff {
    fn new(real: &str, fake: &str) -> Diff {
        Diff {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            real: Side {
                url: real.to_string(),
                token: None,
                tokens: HashMap::new(),
                ids: HashMap::new(),
            },
            fake: Side {
                url: fake.to_string(),
                token: None,
                tokens: HashMap::new(),
                ids: HashMap::new(),
            },
            aliases: HashMap::new(),
            steps: 0,
        }
    }

    async fn send(
        &self,
        side: &Side,
        method: &str,
        path: &str,
        body: &str,
        auth: Option<&str>,
    ) -> Resp {
        self.send_bytes(side, method, path, side.fill(body).into_bytes(), auth)
            .await
    }

    async fn send_bytes(
        &self,
        side: &Side,
        method: &str,
        path: &str,
        body: Vec<u8>,
        auth: Option<&str>,
    ) -> Resp {
        let url = format!("{}{}", side.url, path);
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let token = match auth {
            Some("$TOKEN") => side.token.clone(),
            Some(t) if t.starts_with('$') => side.tokens.get(&t[1..]).cloned(),
            Some(t) => Some(t.to_string()),
            None => None,
        };
        // etcd may answer a body of megabytes before it has read it all and close the
        // connection; the client, still sending, then sees a reset that can discard the
        // answer. Such a body is sent again (at most 3 times); small ones never are.
        let tries = if body.len() > 1 << 20 { 3 } else { 1 };
        let mut attempt = 0;
        let r = loop {
            attempt += 1;
            let mut req = self.http.request(method.clone(), &url).body(body.clone());
            if let Some(t) = &token {
                req = req.header("Authorization", t.as_str());
            }
            match req.send().await {
                Ok(r) => break r,
                Err(e) if attempt < tries => {
                    eprintln!("{path} to {}: {e}; sending again", side.url);
                }
                Err(e) => panic!("{path} to {}: {e}", side.url),
            }
        };
        let status = r.status().as_u16();
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string()
        };
        let (content_type, location, allow) =
            (header("content-type"), header("location"), header("allow"));
        let trailer = header("trailer").to_ascii_lowercase();
        let chunked = r.headers().get("content-length").is_none();
        let text = r.text().await.unwrap();
        Resp {
            status,
            content_type,
            location,
            allow,
            trailer,
            chunked,
            text,
        }
    }

    /// Send to both; assert same status, content type and (normalized) body.
    async fn check_with(
        &mut self,
        method: &str,
        path: &str,
        body: &str,
        auth: Option<&str>,
    ) -> (Value, Value) {
        self.steps += 1;
        let (r, f) = tokio::join!(
            self.send(&self.real, method, path, body, auth),
            self.send(&self.fake, method, path, body, auth)
        );
        self.compare(method, path, body, r, f)
    }

    /// Send the same bytes (not necessarily UTF-8) to both and compare.
    async fn check_bytes(&mut self, path: &str, body: &[u8]) -> (Value, Value) {
        self.steps += 1;
        let (r, f) = tokio::join!(
            self.send_bytes(&self.real, "POST", path, body.to_vec(), None),
            self.send_bytes(&self.fake, "POST", path, body.to_vec(), None)
        );
        self.compare("POST", path, &String::from_utf8_lossy(body), r, f)
    }

    fn compare(&self, method: &str, path: &str, body: &str, r: Resp, f: Resp) -> (Value, Value) {
        let body: String = body.chars().take(300).collect();
        let ctx = format!(
            "step {}: {method} {path} {body}\n real: {r:?}\n fake: {f:?}",
            self.steps
        );
        assert_eq!(r.status, f.status, "status differs; {ctx}");
        assert_eq!(
            r.content_type, f.content_type,
            "content-type differs; {ctx}"
        );
        assert_eq!(
            (&r.location, &r.allow, &r.trailer, r.chunked),
            (&f.location, &f.allow, &f.trailer, f.chunked),
            "headers differ; {ctx}"
        );
        let (rv, fv) = match (parse_body(&r.text), parse_body(&f.text)) {
            (Some(a), Some(b)) => (a, b),
            _ => {
                assert_eq!(r.text, f.text, "body differs; {ctx}");
                return (Value::Null, Value::Null);
            }
        };
        let (rn, fn_) = (self.normalize(rv.clone()), self.normalize(fv.clone()));
        assert_eq!(rn, fn_, "body differs; {ctx}");
        if r.status >= 400 && rv.get("code").is_some() {
            // Error bodies carry nothing that differs: same bytes, same key order.
            assert_eq!(
                r.text.trim_end(),
                f.text.trim_end(),
                "error text differs; {ctx}"
            );
        }
        (rv, fv)
    }

    async fn check(&mut self, path: &str, body: &str) -> (Value, Value) {
        self.check_with("POST", path, body, None).await
    }

    async fn check_auth(&mut self, path: &str, body: &str) -> (Value, Value) {
        self.check_with("POST", path, body, Some("$TOKEN")).await
    }

    /// Grant on both and remember the two IDs under one alias (`$L1` in later bodies).
    async fn grant(&mut self, alias: &str, body: &str) -> (i64, i64) {
        self.steps += 1;
        let (r, f) = tokio::join!(
            self.send(&self.real, "POST", "/v3/lease/grant", body, None),
            self.send(&self.fake, "POST", "/v3/lease/grant", body, None)
        );
        assert_eq!(
            (r.status, f.status),
            (200, 200),
            "grant {body}: {r:?} {f:?}"
        );
        let (r, f): (Value, Value) = (
            serde_json::from_str(&r.text).unwrap(),
            serde_json::from_str(&f.text).unwrap(),
        );
        let ids = self.alias_ids(alias, &r["ID"], &f["ID"]);
        assert_eq!(self.normalize(r), self.normalize(f), "grant {body}");
        ids
    }

    fn alias_ids(&mut self, alias: &str, r: &Value, f: &Value) -> (i64, i64) {
        let (r, f) = (
            r.as_str().unwrap().to_string(),
            f.as_str().unwrap().to_string(),
        );
        self.aliases.insert(r.clone(), alias.to_string());
        self.aliases.insert(f.clone(), alias.to_string());
        self.real.ids.insert(alias.to_string(), r.clone());
        self.fake.ids.insert(alias.to_string(), f.clone());
        (r.parse().unwrap(), f.parse().unwrap())
    }

    fn normalize(&self, v: Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.into_iter()
                    .map(|(k, v)| {
                        let v = match k.as_str() {
                            "cluster_id" | "member_id" | "raft_term" => json!("N"),
                            "token" => {
                                let t = v.as_str().unwrap_or("");
                                let (letters, idx) =
                                    t.split_once('.').expect("token is letters.index");
                                assert_eq!(letters.len(), 16, "token {t}");
                                assert!(idx.parse::<u64>().is_ok(), "token {t}");
                                json!("TOKEN")
                            }
                            _ => self.normalize(v),
                        };
                        (k, v)
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.into_iter().map(|v| self.normalize(v)).collect()),
            Value::String(s) => match self.aliases.get(&s) {
                Some(a) => json!(a),
                None => Value::String(s),
            },
            other => other,
        }
    }

    async fn open_stream(&self, side: &Side, path: &str, body: &str) -> Lines {
        let client = reqwest::Client::new();
        let mut req = client
            .post(format!("{}{}", side.url, path))
            .body(side.fill(body));
        if let Some(t) = &side.token {
            req = req.header("Authorization", t.clone());
        }
        let resp = tokio::time::timeout(Duration::from_secs(5), req.send())
            .await
            .unwrap_or_else(|_| panic!("stream {path} {body} on {} did not open in 5 s", side.url))
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        Lines {
            resp,
            buf: Vec::new(),
        }
    }
}

/// One JSON value, or a stream of JSON lines as an array.
fn parse_body(text: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        return Some(v);
    }
    let lines: Result<Vec<Value>, _> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str::<Value>)
        .collect();
    lines.ok().map(Value::Array)
}

struct Lines {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Lines {
    /// The next line, or None at end of stream or deadline.
    async fn next(&mut self, deadline: Instant) -> Option<Value> {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let s = String::from_utf8_lossy(&line).trim().to_string();
                if s.is_empty() {
                    continue;
                }
                return Some(
                    serde_json::from_str(&s).unwrap_or_else(|e| panic!("bad line {s}: {e}")),
                );
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            match tokio::time::timeout(left, self.resp.chunk()).await {
                Ok(Ok(Some(c))) => self.buf.extend_from_slice(&c),
                Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                    if self.buf.is_empty() {
                        return None;
                    }
                    let rest = std::mem::take(&mut self.buf);
                    let s = String::from_utf8_lossy(&rest).trim().to_string();
                    return serde_json::from_str(&s).ok();
                }
            }
        }
    }

    async fn rest(&mut self, deadline: Instant) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(v) = self.next(deadline).await {
            out.push(v);
        }
        out
    }
}

fn fake_config(users: Vec<(String, String)>) -> Config {
    Config {
        users,
        token_ttl: Duration::from_secs(2),
        ..Config::default()
    }
}

async fn start_pair(auth: bool) -> Option<(RealEtcd, MockEtcd)> {
    start_pair_ttl(auth, 2).await
}

/// A real etcd and a fake, tokens idle-expiring after `ttl` seconds; with `auth`, a
/// user `root` configured on the fake and set up on etcd.
async fn start_pair_ttl(auth: bool, ttl: u64) -> Option<(RealEtcd, MockEtcd)> {
    let real = RealEtcd::start(&["--auth-token-ttl", &ttl.to_string()]).await?;
    let users = if auth {
        vec![("root".to_string(), "rootpw".to_string())]
    } else {
        Vec::new()
    };
    let config = Config {
        token_ttl: Duration::from_secs(ttl),
        ..fake_config(users)
    };
    let fake = mock_etcd::start(config, mock_kit::Events::none("etcd"))
        .await
        .unwrap();
    Some((real, fake))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_etcd_and_fake_answer_alike() {
    if real_etcd::etcd_binary().is_none() {
        println!("skipped: etcd not found (apt-get install etcd-server)");
        return;
    }
    let ((real, fake), (real_auth, fake_auth), (real_adm, fake_adm)) = tokio::join!(
        async { start_pair(false).await.expect("etcd starts") },
        async { start_pair(true).await.expect("etcd starts") },
        async { start_pair_ttl(false, 300).await.expect("etcd starts") }
    );
    // The two pairs are independent: run them side by side.
    let plain = async {
        let mut d = Diff::new(&real.url, &fake.url());
        kv_sequence(&mut d).await;
        lease_sequence(&mut d).await;
        txn_sequence(&mut d).await;
        error_sequence(&mut d).await;
        hostile_sequence(&mut d).await;
        cluster_sequence(&mut d).await;
        watch_sequence(&mut d).await;
        no_auth_sequence(&mut d).await;
        admin::lock_sequence(&mut d).await;
        admin::alarm_sequence(&mut d).await;
        admin::trailer_sequence(&mut d).await;
        d.steps
    };
    let with_auth = async {
        let mut a = Diff::new(&real_auth.url, &fake_auth.url());
        enable_real_auth(&a).await;
        auth_sequence(&mut a).await;
        cluster_sequence(&mut a).await;
        a.steps
    };
    // Auth set up through the API, tokens that outlive the whole sequence.
    let admin = async {
        let mut m = Diff::new(&real_adm.url, &fake_adm.url());
        admin::auth_setup_sequence(&mut m).await;
        admin::roles_sequence(&mut m).await;
        admin::permissions_sequence(&mut m).await;
        m.steps
    };
    let (p, a, m) = tokio::join!(plain, with_auth, admin);
    // Every step asserted identical answers (normalized as above): the count is the
    // number of identical steps.
    println!("differential: {} steps identical to real etcd", p + a + m);
    fake.stop().await;
    fake_auth.stop().await;
    fake_adm.stop().await;
}

async fn kv_sequence(d: &mut Diff) {
    let (k_foo, v_bar, v_baz) = (b64("foo"), b64("bar"), b64("baz"));
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{k_foo}","value":"{v_bar}"}}"#),
    )
    .await;
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{k_foo}","value":"{v_baz}","prev_kv":true}}"#),
    )
    .await;
    d.check("/v3/kv/range", &format!(r#"{{"key":"{k_foo}"}}"#))
        .await;
    d.check("/v3beta/kv/range", &format!(r#"{{"key":"{k_foo}"}}"#))
        .await;
    d.check("/v3/kv/range", &format!(r#"{{"key":"{}"}}"#, b64("nope")))
        .await;
    d.check("/v3/kv/range", r#"{"key":"AA==","range_end":"AA=="}"#)
        .await;
    d.check(
        "/v3/kv/range",
        &format!(r#"{{"key":"{k_foo}","count_only":true}}"#),
    )
    .await;
    d.check(
        "/v3/kv/range",
        &format!(r#"{{"key":"{k_foo}","keys_only":true}}"#),
    )
    .await;
    for i in 1..=3 {
        d.check(
            "/v3/kv/put",
            &format!(
                r#"{{"key":"{}","value":"{}"}}"#,
                b64(&format!("p/{i}")),
                b64(&format!("v{i}"))
            ),
        )
        .await;
    }
    let (p, p0) = (b64("p/"), b64("p0"));
    for extra in [
        r#""limit":2"#,
        r#""limit":"2","count_only":true"#,
        r#""limit":3"#,
        r#""limit":2,"keys_only":true"#,
        r#""revision":3"#,
        r#""revision":"4""#,
        r#""revision":1000"#,
        r#""limit":-1"#,
        r#""sort_order":"DESCEND","sort_target":"KEY""#,
        r#""sort_target":"MOD""#,
        r#""sort_order":2,"sort_target":"CREATE","limit":1"#,
        r#""min_mod_revision":5,"keys_only":true"#,
        r#""max_create_revision":4"#,
        r#""serializable":true,"count_only":true"#,
    ] {
        d.check(
            "/v3/kv/range",
            &format!(r#"{{"key":"{p}","range_end":"{p0}",{extra}}}"#),
        )
        .await;
    }
    d.check(
        "/v3/kv/range",
        &format!(r#"{{"key":"{}","range_end":"{}"}}"#, b64("p/2"), b64("p/1")),
    )
    .await;
    d.check(
        "/v3/kv/range",
        &format!(
            r#"{{"key":"{}","range_end":"AA==","keys_only":true}}"#,
            b64("p/2")
        ),
    )
    .await;
    d.check(
        "/v3/kv/deleterange",
        &format!(r#"{{"key":"{}","prev_kv":true}}"#, b64("p/3")),
    )
    .await;
    d.check(
        "/v3/kv/deleterange",
        &format!(r#"{{"key":"{}","prev_kv":true}}"#, b64("p/3")),
    )
    .await;
    d.check(
        "/v3/kv/deleterange",
        &format!(r#"{{"key":"{p}","range_end":"{p0}"}}"#),
    )
    .await;
    d.check(
        "/v3/kv/range",
        &format!(r#"{{"key":"{p}","range_end":"{p0}","revision":6}}"#),
    )
    .await;
    // Empty value, ignore_value / ignore_lease, and their errors.
    let e = b64("empty");
    d.check("/v3/kv/put", &format!(r#"{{"key":"{e}"}}"#)).await;
    d.check("/v3/kv/range", &format!(r#"{{"key":"{e}"}}"#))
        .await;
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{e}","ignore_value":true,"prev_kv":true}}"#),
    )
    .await;
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{}","ignore_value":true}}"#, b64("nokey")),
    )
    .await;
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{}","ignore_lease":true}}"#, b64("nokey")),
    )
    .await;
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{e}","value":"{v_bar}","ignore_value":true}}"#),
    )
    .await;
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{e}","ignore_lease":true,"lease":5}}"#),
    )
    .await;
    d.check("/v3/kv/put", &format!(r#"{{"value":"{v_bar}"}}"#))
        .await;
    d.check("/v3/kv/deleterange", "{}").await;
    d.check("/v3/kv/compaction", r#"{"revision":3}"#).await;
    d.check("/v3/kv/compaction", r#"{"revision":2}"#).await;
    d.check("/v3/kv/compaction", r#"{"revision":100000}"#).await;
    d.check(
        "/v3/kv/range",
        &format!(r#"{{"key":"{k_foo}","revision":2}}"#),
    )
    .await;
    d.check(
        "/v3/kv/range",
        &format!(r#"{{"key":"{k_foo}","revision":3}}"#),
    )
    .await;
}

async fn lease_sequence(d: &mut Diff) {
    d.grant("L1", r#"{"TTL":1}"#).await;
    d.grant("L0", r#"{"TTL":0}"#).await;
    d.grant("L2", r#"{"TTL":-5}"#).await;
    d.check("/v3/lease/grant", r#"{"TTL":30,"ID":1000}"#).await;
    d.check("/v3/lease/grant", r#"{"TTL":30,"ID":"1000"}"#)
        .await;
    d.check("/v3/lease/grant", r#"{"TTL":9000000001}"#).await;
    d.check("/v3/lease/grant", r#"{"TTL":9000000000,"ID":1001}"#)
        .await;
    let (k1, k2, v) = (b64("lk/1"), b64("lk/2"), b64("v"));
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{k1}","value":"{v}","lease":1000}}"#),
    )
    .await;
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{k2}","value":"{v}","lease":"1000"}}"#),
    )
    .await;
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{k1}","value":"{v}","lease":"999"}}"#),
    )
    .await;
    d.check(
        "/v3/kv/range",
        &format!(r#"{{"key":"{}","range_end":"{}"}}"#, b64("lk/"), b64("lk0")),
    )
    .await;
    // Remaining TTL may straddle a second between the two calls: compare it loosely.
    for body in [r#"{"ID":1000,"keys":true}"#, r#"{"ID":1000}"#] {
        let (r, f) = tokio::join!(
            d.send(&d.real, "POST", "/v3/lease/timetolive", body, None),
            d.send(&d.fake, "POST", "/v3/lease/timetolive", body, None)
        );
        let (mut r, mut f): (Value, Value) = (
            serde_json::from_str(&r.text).unwrap(),
            serde_json::from_str(&f.text).unwrap(),
        );
        let ttl = |v: &Value| v["TTL"].as_str().unwrap().parse::<i64>().unwrap();
        assert!(
            (28..=30).contains(&ttl(&r)) && (28..=30).contains(&ttl(&f)),
            "{r} {f}"
        );
        r["TTL"] = json!("T");
        f["TTL"] = json!("T");
        // etcd lists a lease's keys in Go map order (random): compare them as a set.
        for v in [&mut r, &mut f] {
            if let Some(keys) = v.get_mut("keys").and_then(Value::as_array_mut) {
                keys.sort_by_key(|k| k.to_string());
            }
        }
        assert_eq!(d.normalize(r), d.normalize(f));
    }
    d.check("/v3/lease/timetolive", r#"{"ID":4242,"keys":true}"#)
        .await;
    d.check("/v3/kv/lease/timetolive", r#"{"ID":"4242"}"#).await;
    // Detach one key from its lease by a put without lease.
    d.check("/v3/kv/put", &format!(r#"{{"key":"{k2}","value":"{v}"}}"#))
        .await;
    d.check("/v3/kv/range", &format!(r#"{{"key":"{k2}"}}"#))
        .await;
    d.check("/v3/lease/leases", "{}").await;
    d.check("/v3/kv/lease/leases", "").await;
    d.check("/v3/lease/keepalive", r#"{"ID":1000}"#).await;
    d.check(
        "/v3/lease/keepalive",
        r#"{"ID":1000}{"ID":4242} {"ID":"$L1"}"#,
    )
    .await;
    d.check("/v3/lease/keepalive", "").await;
    d.check("/v3/lease/keepalive", "{}").await;
    d.check("/v3/lease/keepalive", "{bad}").await;
    d.check("/v3/lease/keepalive", r#"{"ID":"x"}"#).await;
    d.check("/v3/lease/revoke", r#"{"ID":1000}"#).await;
    d.check("/v3/lease/revoke", r#"{"ID":1000}"#).await;
    d.check(
        "/v3/kv/range",
        &format!(r#"{{"key":"{}","range_end":"{}"}}"#, b64("lk/"), b64("lk0")),
    )
    .await;
    d.check("/v3/lease/revoke", r#"{"ID":1001}"#).await;
}

async fn txn_sequence(d: &mut Diff) {
    let (k, v, n) = (b64("t/1"), b64("one"), b64("t/new"));
    d.check("/v3/kv/put", &format!(r#"{{"key":"{k}","value":"{v}"}}"#))
        .await;
    let cases = [
        format!(
            r#"{{"compare":[{{"key":"{k}","target":"VALUE","result":"EQUAL","value":"{v}"}}],
            "success":[{{"request_put":{{"key":"{n}","value":"{v}","prev_kv":true}}}},{{"request_range":{{"key":"{k}"}}}},
                       {{"request_delete_range":{{"key":"{}","prev_kv":true}}}}],
            "failure":[{{"request_range":{{"key":"{k}"}}}}]}}"#,
            b64("t/zz")
        ),
        format!(
            r#"{{"compare":[{{"key":"{k}","target":"VALUE","result":"EQUAL","value":"{n}"}}],
            "success":[{{"request_put":{{"key":"{n}","value":"{v}"}}}}],"failure":[{{"request_range":{{"key":"{k}"}}}}]}}"#
        ),
        format!(
            r#"{{"compare":[{{"key":"{}","target":"CREATE","result":"EQUAL","create_revision":0}}],
            "success":[{{"request_put":{{"key":"{}","value":"{v}"}}}}]}}"#,
            b64("t/missing"),
            b64("t/missing")
        ),
        format!(
            r#"{{"compare":[{{"key":"{}","target":"CREATE","result":"EQUAL","create_revision":0}}],
            "success":[{{"request_put":{{"key":"{}","value":"{v}"}}}}]}}"#,
            b64("t/missing"),
            b64("t/missing")
        ),
        "{}".to_string(),
        format!(
            r#"{{"compare":[{{"key":"{k}","target":"VERSION","result":"GREATER","version":0}},
            {{"key":"{k}","target":"MOD","result":"LESS","mod_revision":"100000"}},
            {{"key":"{k}","target":"LEASE","result":"EQUAL","lease":0}},
            {{"key":"{k}","target":"VALUE","result":"NOT_EQUAL","value":"{n}"}}],
            "success":[{{"request_put":{{"key":"{k}","value":"{v}"}}}},{{"request_put":{{"key":"{n}","value":"{v}"}}}}]}}"#
        ),
        format!(
            r#"{{"success":[{{"request_put":{{"key":"{k}","value":"{v}"}}}},{{"request_put":{{"key":"{k}","value":"{v}"}}}}]}}"#
        ),
        format!(
            r#"{{"success":[{{"request_delete_range":{{"key":"{}","range_end":"{}"}}}},{{"request_put":{{"key":"{k}","value":"{v}"}}}}]}}"#,
            b64("t/"),
            b64("t0")
        ),
        format!(
            r#"{{"success":[{{"request_put":{{"key":"{k}","value":"{v}","lease":999999}}}}]}}"#
        ),
        format!(
            r#"{{"compare":[{{"key":"{k}","target":1,"result":0,"create_revision":1}}],"success":[{{"request_range":{{"key":"{k}","count_only":true}}}}],"failure":[{{"request_range":{{"key":"{k}","keys_only":true}}}}]}}"#
        ),
        format!(
            r#"{{"compare":[{{"key":"{}","range_end":"{}","target":"VERSION","result":"GREATER","version":0}}],"success":[{{"request_range":{{"key":"{k}","count_only":true}}}}]}}"#,
            b64("t/"),
            b64("t0")
        ),
        format!(
            r#"{{"compare":[{{"key":"{k}","target":"VALUE","result":"EQUAL"}}],"success":[]}}"#
        ),
        format!(r#"{{"compare":[{{"key":"{k}"}}]}}"#),
        r#"{"compare":[{"target":"VALUE"}]}"#.to_string(),
        format!(
            r#"{{"success":[{{"request_txn":{{"success":[{{"request_range":{{"key":"{k}","count_only":true}}}}]}}}}]}}"#
        ),
        format!(
            r#"{{"success":[{{"request_txn":{{"success":[{{"request_put":{{"key":"{}","value":"{v}"}}}}]}}}},{{"request_range":{{"key":"{k}"}}}}]}}"#,
            b64("t/nested")
        ),
        r#"{"success":[{}]}"#.to_string(),
        format!(r#"{{"success":[{{"request_range":{{"key":"{k}","revision":100000}}}}]}}"#),
        format!(
            r#"{{"success":[{{"request_put":{{"key":"{k}","value":"{v}","ignore_value":true}}}}]}}"#
        ),
        // Nested revisions: a read before the first write reports the revision before
        // the txn, everything from the first write on the txn's own revision.
        format!(
            r#"{{"success":[{{"request_range":{{"key":"{k}"}}}},{{"request_put":{{"key":"{n}","value":"{v}"}}}}]}}"#
        ),
        format!(
            r#"{{"success":[{{"request_range":{{"key":"{k}"}}}},{{"request_put":{{"key":"{n}","value":"{v}"}}}},
            {{"request_range":{{"key":"{n}"}}}},{{"request_delete_range":{{"key":"{n}"}}}}]}}"#
        ),
        format!(
            r#"{{"compare":[{{"key":"{k}","target":"VALUE","value":"{n}"}}],"success":[],
            "failure":[{{"request_range":{{"key":"{k}"}}}},{{"request_delete_range":{{"key":"{}"}}}},
            {{"request_put":{{"key":"{n}","value":"{v}"}}}},{{"request_range":{{"key":"{n}"}}}},
            {{"request_delete_range":{{"key":"{}"}}}}]}}"#,
            b64("t/none"),
            b64("t/none2")
        ),
        format!(
            r#"{{"success":[{{"request_range":{{"key":"{k}"}}}},{{"request_txn":{{"success":[{{"request_range":{{"key":"{k}"}}}},
            {{"request_put":{{"key":"{n}","value":"{v}"}}}},{{"request_range":{{"key":"{k}"}}}}]}}}},{{"request_range":{{"key":"{k}"}}}}]}}"#
        ),
    ];
    for c in &cases {
        d.check("/v3/kv/txn", c).await;
    }
}

async fn error_sequence(d: &mut Diff) {
    for body in [
        "{bad",
        "[]",
        "5",
        "\"x\"",
        "{\"key\":\"!!!\"}",
        "{\"key\":5}",
        "{\"key\":\"Zm9v\",\"limit\":\"abc\"}",
        "{\"key\":\"Zm9v\",\"unknown\":1}",
        "{\"key\":\"Zm9v\",\"keys_only\":\"yes\"}",
        "{\"key\":\"Zm9v\"} x",
        "null",
        "{\"key\":null}",
    ] {
        d.check("/v3/kv/range", body).await;
    }
    d.check_with("GET", "/v3/kv/range", "", None).await;
    d.check_with("GET", "/v3/watch", "", None).await;
    d.check("/v3/kv/rangex", "{}").await;
    d.check("/v3alpha/kv/range", "{}").await;
    d.check("/v4/foo", "{}").await;
    for (method, path) in [
        ("OPTIONS", "/v3/kv/range"),
        ("OPTIONS", "/health"),
        ("PUT", "/v3/kv/put"),
        ("DELETE", "/v3/kv/range"),
        ("POST", "//v3/kv/range"),
        ("POST", "/v3"),
        ("POST", "/v3beta/../v3/kv/range?a=b"),
        ("POST", "/v3/"),
    ] {
        d.check_with(method, path, "{}", None).await;
    }
    d.check_with("GET", "/health", "", None).await;
    d.check("/health", "").await;
    d.check_with("GET", "/version", "", None).await;
    // Size limits: raft's 1.5 MiB request limit, then gRPC's receive limit.
    let big = |n: usize| {
        format!(
            r#"{{"key":"{}","value":"{}"}}"#,
            b64("big"),
            base64::engine::general_purpose::STANDARD.encode(vec![b'x'; n])
        )
    };
    d.check("/v3/kv/put", &big(1_500_000)).await;
    d.check("/v3/kv/put", &big(1_580_000)).await;
    d.check("/v3/kv/put", &big(2_200_000)).await;
    d.check(
        "/v3/kv/deleterange",
        &format!(r#"{{"key":"{}"}}"#, b64("big")),
    )
    .await;
}

/// What clients get wrong, or attackers try: numbers as floats, repeated keys, deep
/// nesting, bytes that are not UTF-8.
async fn hostile_sequence(d: &mut Diff) {
    let k = b64("h/1");
    for body in [
        r#"{"TTL":5.0}"#,
        r#"{"TTL":5e0}"#,
        r#"{"TTL":-5.50}"#,
        r#"{"TTL":"5.0"}"#,
        r#"{"TTL":1.5E3,"ID":1}"#,
    ] {
        d.check("/v3/lease/grant", body).await;
    }
    for extra in [
        r#""limit":1e2"#,
        r#""limit":1E+02"#,
        r#""limit":100000000000000000000"#,
        r#""limit":-0"#,
        r#""limit":0.0"#,
        r#""limit":"1 2""#,
        r#""limit":"""#,
        r#""limit":"[1]""#,
        r#""limit":true"#,
        r#""sort_order":1.0"#,
        r#""sort_order":[1]"#,
        r#""limit":1,"limit":"x""#,
        r#""keys_only":true,"keys_only":false"#,
    ] {
        d.check("/v3/kv/range", &format!(r#"{{"key":"{k}",{extra}}}"#))
            .await;
    }
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{k}","value":"eA==","lease":1000.0}}"#),
    )
    .await;
    // Repeated keys: the last one wins.
    d.check(
        "/v3/kv/put",
        &format!(
            r#"{{"key":"{}","value":"YQ==","key":"{k}","value":"Yg=="}}"#,
            b64("h/0")
        ),
    )
    .await;
    d.check("/v3/kv/range", &format!(r#"{{"key":"{}"}}"#, b64("h/0")))
        .await;
    d.check(
        "/v3/kv/range",
        &format!(
            r#"{{"key":"{}","key":"{k}","count_only":true}}"#,
            b64("h/0")
        ),
    )
    .await;
    // Nesting inside an unknown field: Go refuses past 10,000 levels.
    let deep = |n: usize, open: &str, close: &str| {
        format!(
            r#"{{"key":"{k}","x":{}1{}}}"#,
            open.repeat(n),
            close.repeat(n)
        )
    };
    for n in [9_999, 10_000, 20_000] {
        d.check("/v3/kv/range", &deep(n, "[", "]")).await;
        d.check("/v3/kv/range", &deep(n, r#"{"a":"#, "}")).await;
    }
    // Bytes that are not UTF-8 in a keepalive body.
    for body in [
        &b"{\"ID\":1000}\xff\xfe"[..],
        b"{\"ID\":1000,\"x\":\"\xff\xfe\"}",
        b"\xff\xfe",
        b"{\"ID\":1000}\x01",
    ] {
        d.check_bytes("/v3/lease/keepalive", body).await;
    }
    d.check_bytes("/v3/kv/range", b"{\"key\":\"Zm9v\",\"x\":\"\xc3\x28\"}")
        .await;
    // Many txn ops: under gRPC's size limit only the count is refused; above it, the size.
    let ops = |n: usize, op: &str| {
        let list: Vec<&str> = std::iter::repeat_n(op, n).collect();
        format!(r#"{{"success":[{}]}}"#, list.join(","))
    };
    d.check("/v3/kv/txn", &ops(999_000, "{}")).await;
    d.check("/v3/kv/txn", &ops(1_100_000, "{}")).await;
    let range = format!(r#"{{"request_range":{{"key":"{k}"}}}}"#);
    d.check("/v3/kv/txn", &ops(129, &range)).await;
    d.check("/v3/kv/txn", &ops(150_000, &range)).await;
    let long = format!(
        r#"{{"request_range":{{"key":"{}"}}}}"#,
        b64(&"k".repeat(96))
    );
    d.check("/v3/kv/txn", &ops(20_000, &long)).await;
}

async fn watch_sequence(d: &mut Diff) {
    let (w, w0) = (b64("w/"), b64("w0"));
    let body = format!(r#"{{"create_request":{{"key":"{w}","range_end":"{w0}","prev_kv":true}}}}"#);
    let (mut rw, mut fw) = tokio::join!(
        d.open_stream(&d.real, "/v3/watch", &body),
        d.open_stream(&d.fake, "/v3/watch", &body)
    );
    let single = format!(r#"{{"create_request":{{"key":"{}"}}}}"#, b64("w/a"));
    let (mut rs, mut fs) = tokio::join!(
        d.open_stream(&d.real, "/v3/watch", &single),
        d.open_stream(&d.fake, "/v3/watch", &single)
    );
    let soon = || Instant::now() + Duration::from_secs(5);
    for (r, f) in [(&mut rw, &mut fw), (&mut rs, &mut fs)] {
        let (a, b) = (r.next(soon()).await, f.next(soon()).await);
        assert_eq!(
            d.normalize(a.unwrap()),
            d.normalize(b.unwrap()),
            "created line"
        );
    }
    let (start_real, _) = d.check("/v3/kv/range", r#"{"key":"AA=="}"#).await;
    let start_rev: i64 = start_real["header"]["revision"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    d.grant("LW", r#"{"TTL":2}"#).await;
    let v = b64("x");
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{}","value":"{v}","lease":"$LW"}}"#, b64("w/a")),
    )
    .await;
    d.check(
        "/v3/kv/put",
        &format!(
            r#"{{"key":"{}","value":"{}","lease":"$LW"}}"#,
            b64("w/a"),
            b64("y")
        ),
    )
    .await;
    d.check(
        "/v3/kv/put",
        &format!(r#"{{"key":"{}","value":"{v}","lease":"$LW"}}"#, b64("w/b")),
    )
    .await;
    d.check(
        "/v3/kv/txn",
        &format!(
            r#"{{"success":[{{"request_put":{{"key":"{}","value":"{v}"}}}},{{"request_put":{{"key":"{}","value":"{v}"}}}}]}}"#,
            b64("w/c"),
            b64("w/d")
        ),
    )
    .await;
    // Four write revisions, then the lease expiry deletes w/a and w/b in one revision.
    let deadline = Instant::now() + Duration::from_secs(8);
    for (r, f, n) in [(&mut rw, &mut fw, 5), (&mut rs, &mut fs, 3)] {
        for i in 0..n {
            let (a, b) = tokio::join!(r.next(deadline), f.next(deadline));
            let (a, b) = (
                a.unwrap_or_else(|| panic!("real line {i}")),
                b.unwrap_or_else(|| panic!("fake line {i}")),
            );
            assert_eq!(d.normalize(a), d.normalize(b), "watch line {i}");
        }
    }
    // The expired lease: keepalive answers without TTL, timetolive -1.
    d.check("/v3/lease/keepalive", r#"{"ID":"$LW"}"#).await;
    d.check("/v3/lease/timetolive", r#"{"ID":"$LW","keys":true}"#)
        .await;
    d.check("/v3/lease/revoke", r#"{"ID":"$LW"}"#).await;
    // Replay from history, a future start, multi-watch with cancel/progress, compaction.
    let quick = || Instant::now() + Duration::from_millis(1500);
    let bodies = [
        format!(
            r#"{{"create_request":{{"key":"{w}","range_end":"{w0}","start_revision":{start_rev},"prev_kv":true}}}}"#
        ),
        format!(
            r#"{{"create_request":{{"key":"{w}","range_end":"{w0}","start_revision":100000}}}}"#
        ),
        format!(
            r#"{{"create_request":{{"key":"{}"}}}}{{"create_request":{{"key":"{}"}}}}{{"cancel_request":{{"watch_id":0}}}}{{"cancel_request":{{"watch_id":7}}}}{{"progress_request":{{}}}}"#,
            b64("w/a"),
            b64("w/b")
        ),
        format!(
            r#"{{"create_request":{{"key":"{}","watch_id":5}}}}{{"create_request":{{"key":"{}","watch_id":5}}}}{{"create_request":{{}}}}"#,
            b64("w/a"),
            b64("w/a")
        ),
        format!(
            r#"{{"create_request":{{"key":"{w}","range_end":"{w0}","start_revision":{start_rev},"filters":["NOPUT"]}}}}"#
        ),
        format!(r#"{{"create_request":{{"key":"{}"}}}}{{bad}}"#, b64("w/a")),
    ];
    let dd = &*d;
    let outcomes = futures_util::future::join_all(bodies.iter().map(|body| async move {
        let (mut r, mut f) = tokio::join!(
            dd.open_stream(&dd.real, "/v3/watch", body),
            dd.open_stream(&dd.fake, "/v3/watch", body)
        );
        let (a, b) = tokio::join!(r.rest(quick()), f.rest(quick()));
        (body, a, b)
    }))
    .await;
    for (body, a, b) in outcomes {
        assert_eq!(
            a.into_iter().map(|v| d.normalize(v)).collect::<Vec<_>>(),
            b.into_iter().map(|v| d.normalize(v)).collect::<Vec<_>>(),
            "watch {body}"
        );
    }
    d.check("/v3/watch", "{bad}").await;
    watch_oneof(d).await;
    d.check(
        "/v3/kv/compaction",
        &format!(r#"{{"revision":{}}}"#, start_rev + 2),
    )
    .await;
    let body = format!(
        r#"{{"create_request":{{"key":"{w}","range_end":"{w0}","start_revision":{start_rev}}}}}"#
    );
    let (mut r, mut f) = tokio::join!(
        d.open_stream(&d.real, "/v3/watch", &body),
        d.open_stream(&d.fake, "/v3/watch", &body)
    );
    let (a, b) = tokio::join!(r.rest(quick()), f.rest(quick()));
    assert_eq!(a.len(), 2, "created + compacted: {a:?}");
    assert_eq!(
        a.into_iter().map(|v| d.normalize(v)).collect::<Vec<_>>(),
        b.into_iter().map(|v| d.normalize(v)).collect::<Vec<_>>(),
        "compacted watch"
    );
}

async fn no_auth_sequence(d: &mut Diff) {
    for body in [
        r#"{"name":"root","password":"x"}"#,
        r#"{"name":"root","password":null}"#,
        r#"{"name":null,"password":null}"#,
        r#"{"name":"root","password":5}"#,
    ] {
        d.check("/v3/auth/authenticate", body).await;
    }
    d.check_with("POST", "/v3/kv/range", r#"{"key":"Zm9v"}"#, Some("bogus"))
        .await;
}

async fn enable_real_auth(d: &Diff) {
    for (path, body) in [
        (
            "/v3/auth/user/add",
            r#"{"name":"root","password":"rootpw"}"#,
        ),
        ("/v3/auth/role/add", r#"{"name":"root"}"#),
        ("/v3/auth/user/grant", r#"{"user":"root","role":"root"}"#),
        ("/v3/auth/enable", "{}"),
    ] {
        let r = d.send(&d.real, "POST", path, body, None).await;
        assert_eq!(r.status, 200, "{path}: {r:?}");
    }
}

async fn auth_sequence(d: &mut Diff) {
    let k = b64("a/1");
    for body in [
        r#"{"name":"root","password":"bad"}"#,
        r#"{"name":"nobody","password":"x"}"#,
        "{}",
        r#"{"name":"root","password":null}"#,
        r#"{"name":"root","password":"rootpw","password":"bad"}"#,
    ] {
        d.check("/v3/auth/authenticate", body).await;
    }
    let (r, f) = d
        .check(
            "/v3/auth/authenticate",
            r#"{"name":"root","password":"rootpw"}"#,
        )
        .await;
    d.real.token = r["token"].as_str().map(String::from);
    d.fake.token = f["token"].as_str().map(String::from);
    d.check("/v3/kv/range", &format!(r#"{{"key":"{k}"}}"#))
        .await;
    d.check("/v3/kv/put", &format!(r#"{{"key":"{k}","value":"eA=="}}"#))
        .await;
    d.check_with(
        "POST",
        "/v3/kv/range",
        &format!(r#"{{"key":"{k}"}}"#),
        Some("bogus"),
    )
    .await;
    d.check_auth("/v3/kv/put", &format!(r#"{{"key":"{k}","value":"eA=="}}"#))
        .await;
    d.check_auth("/v3/kv/range", &format!(r#"{{"key":"{k}"}}"#))
        .await;
    d.check("/v3/kv/txn", "{}").await;
    d.check("/v3/kv/txn", &format!(r#"{{"compare":[{{"key":"{k}"}}]}}"#))
        .await;
    d.check_with("POST", "/v3/kv/txn", "{}", Some("bogus"))
        .await;
    d.check("/v3/kv/deleterange", &format!(r#"{{"key":"{k}"}}"#))
        .await;
    d.grant("LA", r#"{"TTL":60}"#).await;
    d.check_with("POST", "/v3/lease/grant", r#"{"TTL":60}"#, Some("bogus"))
        .await;
    d.check_auth(
        "/v3/kv/put",
        &format!(r#"{{"key":"{k}","value":"eA==","lease":"$LA"}}"#),
    )
    .await;
    d.check_with(
        "POST",
        "/v3/lease/keepalive",
        r#"{"ID":"$LA"}"#,
        Some("bogus"),
    )
    .await;
    d.check_with(
        "POST",
        "/v3/lease/timetolive",
        r#"{"ID":4242}"#,
        Some("bogus"),
    )
    .await;
    d.check("/v3/lease/revoke", r#"{"ID":"$LA"}"#).await;
    d.check_with("POST", "/v3/lease/revoke", r#"{"ID":"$LA"}"#, Some("bogus"))
        .await;
    d.check_with(
        "POST",
        "/v3/auth/authenticate",
        r#"{"name":"root","password":"rootpw"}"#,
        Some("bogus"),
    )
    .await;
    d.check_auth("/v3/lease/revoke", r#"{"ID":"$LA"}"#).await;
    d.check("/v3/auth/authenticate", r#"{"name":"root","password":"x"}"#)
        .await;
    // A watch without a token, and one with an invalid token.
    let body = format!(r#"{{"create_request":{{"key":"{k}"}}}}"#);
    let quick = || Instant::now() + Duration::from_millis(800);
    for token in [None, Some("bogus".to_string())] {
        let (rt, ft) = (d.real.token.take(), d.fake.token.take());
        d.real.token = token.clone();
        d.fake.token = token.clone();
        let (mut r, mut f) = tokio::join!(
            d.open_stream(&d.real, "/v3/watch", &body),
            d.open_stream(&d.fake, "/v3/watch", &body)
        );
        d.real.token = rt;
        d.fake.token = ft;
        let (a, b) = tokio::join!(r.rest(quick()), f.rest(quick()));
        assert_eq!(
            a.into_iter().map(|v| d.normalize(v)).collect::<Vec<_>>(),
            b.into_iter().map(|v| d.normalize(v)).collect::<Vec<_>>(),
            "watch with token {token:?}"
        );
    }
    // Simple tokens expire after the idle TTL (2 s here; etcd checks once a second).
    // Using a token refreshes it, so this waits once, without polling.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    d.check_auth("/v3/kv/range", &format!(r#"{{"key":"{k}"}}"#))
        .await;
    let (r, _) = d
        .check_auth("/v3/kv/range", &format!(r#"{{"key":"{k}"}}"#))
        .await;
    assert_eq!(r["code"], json!(16), "token expired on both: {r}");
}

/// A watch message with both a create and a cancel: etcd applies one of the two at
/// random (jsonpb walks the oneof in Go map order); the fake applies the create. Each
/// body ends with a progress request so that a stream always answers something.
async fn watch_oneof(d: &mut Diff) {
    let quick = || Instant::now() + Duration::from_millis(1500);
    let create = format!(r#"{{"create_request":{{"key":"{}"}}}}"#, b64("w/a"));
    let progress = r#"{"progress_request":{}}"#;
    let alone = format!("{create}{progress}");
    let both = format!(
        r#"{{"create_request":{{"key":"{}"}},"cancel_request":{{"watch_id":0}}}}{progress}"#,
        b64("w/a")
    );
    let (mut ra, mut rb, mut fb) = tokio::join!(
        d.open_stream(&d.real, "/v3/watch", &alone),
        d.open_stream(&d.real, "/v3/watch", &both),
        d.open_stream(&d.fake, "/v3/watch", &both)
    );
    let (ra, rb, fb) = tokio::join!(ra.rest(quick()), rb.rest(quick()), fb.rest(quick()));
    let norm = |v: Vec<Value>| v.into_iter().map(|v| d.normalize(v)).collect::<Vec<_>>();
    let (ra, rb, fb) = (norm(ra), norm(rb), norm(fb));
    assert_eq!(ra.len(), 2, "created + progress: {ra:?}");
    let cancel_won = ra[1..].to_vec();
    assert!(
        rb == ra || rb == cancel_won,
        "etcd applied neither the create nor the cancel: {rb:?}"
    );
    assert_eq!(fb, ra, "the fake applies the create");
}

/// Keys of an object, sorted.
fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    k.sort();
    k
}

/// Status and member list: the same fields as etcd (values that name this server,
/// its sizes and raft indexes differ by nature), no token needed, even a bad one.
async fn cluster_sequence(d: &mut Diff) {
    for path in ["/v3/maintenance/status", "/v3beta/cluster/member/list"] {
        d.check(path, "{bad").await;
        d.check_with("GET", path, "", None).await;
    }
    for token in [None, Some("bogus")] {
        for body in ["{}", "", r#"{"linearizable":true,"x":[1]}"#] {
            let (r, f) = tokio::join!(
                d.send(&d.real, "POST", "/v3/maintenance/status", body, token),
                d.send(&d.fake, "POST", "/v3/maintenance/status", body, token)
            );
            assert_eq!(
                (r.status, f.status),
                (200, 200),
                "status {body}: {r:?} {f:?}"
            );
            let (r, f): (Value, Value) = (
                serde_json::from_str(&r.text).unwrap(),
                serde_json::from_str(&f.text).unwrap(),
            );
            assert_eq!(keys(&r), keys(&f), "status fields: {r} {f}");
            assert_eq!(
                keys(&r["header"]),
                keys(&f["header"]),
                "status header: {r} {f}"
            );
            assert_eq!(r["version"], f["version"]);
            assert_eq!(r["raftTerm"], f["raftTerm"]);
            for v in [&r, &f] {
                assert_eq!(
                    v["leader"], v["header"]["member_id"],
                    "single member leads: {v}"
                );
                assert_eq!(v["raftIndex"], v["raftAppliedIndex"], "{v}");
            }
            let (r, f) = tokio::join!(
                d.send(&d.real, "POST", "/v3/cluster/member/list", body, token),
                d.send(&d.fake, "POST", "/v3/cluster/member/list", body, token)
            );
            assert_eq!(
                (r.status, f.status),
                (200, 200),
                "members {body}: {r:?} {f:?}"
            );
            let (r, f): (Value, Value) = (
                serde_json::from_str(&r.text).unwrap(),
                serde_json::from_str(&f.text).unwrap(),
            );
            assert_eq!(keys(&r), keys(&f), "member list fields: {r} {f}");
            assert_eq!(
                keys(&r["header"]),
                keys(&f["header"]),
                "member list header: {r} {f}"
            );
            for (v, url) in [(&r, &d.real.url), (&f, &d.fake.url)] {
                let members = v["members"].as_array().expect("members");
                assert_eq!(members.len(), 1, "{v}");
                assert_eq!(members[0]["ID"], v["header"]["member_id"], "{v}");
                assert!(
                    members[0]["name"].as_str().is_some_and(|n| !n.is_empty()),
                    "{v}"
                );
                assert_eq!(members[0]["clientURLs"], json!([url]), "{v}");
                assert_eq!(
                    members[0]["peerURLs"].as_array().map(Vec::len),
                    Some(1),
                    "{v}"
                );
            }
            assert_eq!(keys(&r["members"][0]), keys(&f["members"][0]));
            assert_eq!(
                f["members"][0]["name"],
                json!("default"),
                "etcd's default name"
            );
        }
    }
}
