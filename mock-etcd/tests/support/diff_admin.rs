//! The differential steps of auth management, v3lock and alarms: a fresh etcd and a
//! fresh fake (no configured users) are set up through the API step by step, every
//! precondition and permission error along the way compared.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{b64, Diff};

impl Diff {
    /// Authenticate on both and keep the two tokens under `alias` (`$alias` later).
    async fn login(&mut self, alias: &str, name: &str, password: &str) {
        let body = format!(r#"{{"name":"{name}","password":"{password}"}}"#);
        let (r, f) = self.check("/v3/auth/authenticate", &body).await;
        for (side, v) in [(&mut self.real, r), (&mut self.fake, f)] {
            let t = v["token"].as_str().expect("a token").to_string();
            side.tokens.insert(alias.to_string(), t);
        }
    }

    async fn as_user(&mut self, alias: &str, path: &str, body: &str) -> (Value, Value) {
        self.check_with("POST", path, body, Some(&format!("${alias}")))
            .await
    }

    /// Open a watch as `alias` on both sides and compare what comes within a moment.
    async fn watch_as(&mut self, alias: &str, body: &str) {
        self.steps += 1;
        let (rt, ft) = (
            self.real.tokens.get(alias).cloned(),
            self.fake.tokens.get(alias).cloned(),
        );
        let (old_r, old_f) = (
            std::mem::replace(&mut self.real.token, rt),
            std::mem::replace(&mut self.fake.token, ft),
        );
        let (mut r, mut f) = tokio::join!(
            self.open_stream(&self.real, "/v3/watch", body),
            self.open_stream(&self.fake, "/v3/watch", body)
        );
        self.real.token = old_r;
        self.fake.token = old_f;
        let quick = || Instant::now() + Duration::from_millis(800);
        let (a, b) = tokio::join!(r.rest(quick()), f.rest(quick()));
        let norm = |v: Vec<Value>| v.into_iter().map(|v| self.normalize(v)).collect::<Vec<_>>();
        assert_eq!(norm(a), norm(b), "watch as {alias}: {body}");
    }
}

/// Setting auth up as an operator does, each precondition error on the way.
pub async fn auth_setup_sequence(d: &mut Diff) {
    d.check("/v3/auth/enable", "{}").await;
    d.check("/v3/auth/user/list", "{}").await;
    d.check("/v3/auth/role/list", "{}").await;
    for body in [
        r#"{"name":"root","password":"rootpw"}"#,
        r#"{"name":"root","password":"rootpw"}"#,
        r#"{"name":"","password":"x"}"#,
        r#"{"password":"x"}"#,
        r#"{"name":5}"#,
    ] {
        d.check("/v3/auth/user/add", body).await;
    }
    d.check("/v3/auth/enable", "{}").await;
    d.check("/v3/auth/role/get", r#"{"role":"root"}"#).await;
    d.check("/v3/auth/user/get", r#"{"name":"root"}"#).await;
    d.check("/v3/auth/user/get", r#"{"name":"nobody"}"#).await;
    d.check("/v3/auth/user/grant", r#"{"user":"root","role":"root"}"#)
        .await;
    d.check("/v3/auth/user/get", r#"{"name":"root"}"#).await;
    d.check("/v3/auth/user/list", "{}").await;
    d.check(
        "/v3/auth/authenticate",
        r#"{"name":"root","password":"rootpw"}"#,
    )
    .await;
    d.check("/v3/auth/enable", "bad").await;
    d.check("/v3/auth/enable", "{}").await;
    d.check("/v3/auth/enable", "{}").await;
    d.check("/v3/auth/user/list", "{}").await;
    d.check_with("POST", "/v3/auth/user/list", "{}", Some("bogus"))
        .await;
    d.login("root", "root", "rootpw").await;
    d.as_user("root", "/v3/auth/enable", "{}").await;
}

/// Roles and permissions: a user `pub0` who may read `pub/` and write `w/`.
pub async fn roles_sequence(d: &mut Diff) {
    let (pubs, pub0, w, w0) = (b64("pub/"), b64("pub0"), b64("w/"), b64("w0"));
    for body in [r#"{"name":"pubr"}"#, r#"{"name":"pubr"}"#, r#"{"name":""}"#] {
        d.as_user("root", "/v3/auth/role/add", body).await;
    }
    let single = b64("single");
    for perm in [
        format!(r#"{{"permType":"READ","key":"{pubs}","range_end":"{pub0}"}}"#),
        format!(r#"{{"permType":"WRITE","key":"{w}","range_end":"{w0}"}}"#),
        format!(r#"{{"permType":"READWRITE","key":"{single}"}}"#),
        format!(r#"{{"permType":1,"key":"{single}"}}"#),
        format!(r#"{{"permType":"READWRITE","key":"{single}"}}"#),
        format!(r#"{{"perm_type":1,"key":"{pubs}","range_end":"{pub0}"}}"#),
        r#"{"permType":"NOPE","key":"eA=="}"#.to_string(),
    ] {
        let body = format!(r#"{{"name":"pubr","perm":{perm}}}"#);
        d.as_user("root", "/v3/auth/role/grant", &body).await;
    }
    d.as_user(
        "root",
        "/v3/auth/role/grant",
        r#"{"name":"nope","perm":{"key":"eA=="}}"#,
    )
    .await;
    d.as_user("root", "/v3/auth/role/get", r#"{"role":"pubr"}"#)
        .await;
    d.as_user("root", "/v3/auth/role/get", r#"{"role":"nope"}"#)
        .await;
    d.as_user("root", "/v3/auth/role/list", "{}").await;
    d.as_user(
        "root",
        "/v3/auth/user/add",
        r#"{"name":"pub0","password":"p"}"#,
    )
    .await;
    for body in [
        r#"{"user":"pub0","role":"pubr"}"#,
        r#"{"user":"pub0","role":"pubr"}"#,
        r#"{"user":"pub0","role":"nope"}"#,
        r#"{"user":"nope","role":"pubr"}"#,
    ] {
        d.as_user("root", "/v3/auth/user/grant", body).await;
    }
    d.as_user("root", "/v3/auth/user/get", r#"{"name":"pub0"}"#)
        .await;
    d.as_user("root", "/v3/auth/user/list", "{}").await;
    d.login("pub0", "pub0", "p").await;
}

/// What `pub0` may and may not do with keys, and with auth management.
pub async fn permissions_sequence(d: &mut Diff) {
    let (pa, pubs, pub0, pub1) = (b64("pub/a"), b64("pub/"), b64("pub0"), b64("pub1"));
    let (wx, other) = (b64("w/x"), b64("other"));
    let put_pa = format!(r#"{{"key":"{pa}","value":"eA=="}}"#);
    d.as_user("pub0", "/v3/kv/put", &put_pa).await;
    d.as_user("root", "/v3/kv/put", &put_pa).await;
    for body in [
        format!(r#"{{"key":"{pa}"}}"#),
        format!(r#"{{"key":"{pubs}","range_end":"{pub0}"}}"#),
        format!(r#"{{"key":"{pubs}","range_end":"{pub1}"}}"#),
        format!(r#"{{"key":"{other}"}}"#),
        format!(r#"{{"key":"{wx}"}}"#),
        format!(r#"{{"key":"{pubs}","range_end":"AA=="}}"#),
    ] {
        d.as_user("pub0", "/v3/kv/range", &body).await;
    }
    d.check("/v3/kv/range", &format!(r#"{{"key":"{pa}"}}"#))
        .await;
    for (path, body) in [
        ("/v3/kv/put", format!(r#"{{"key":"{wx}","value":"eA=="}}"#)),
        (
            "/v3/kv/put",
            format!(r#"{{"key":"{wx}","value":"eA==","prev_kv":true}}"#),
        ),
        ("/v3/kv/deleterange", format!(r#"{{"key":"{wx}"}}"#)),
        (
            "/v3/kv/deleterange",
            format!(r#"{{"key":"{wx}","prev_kv":true}}"#),
        ),
        (
            "/v3/kv/txn",
            format!(
                r#"{{"compare":[{{"key":"{pa}"}}],"success":[{{"request_put":{{"key":"{wx}"}}}}]}}"#
            ),
        ),
        ("/v3/kv/txn", format!(r#"{{"compare":[{{"key":"{wx}"}}]}}"#)),
        (
            "/v3/kv/txn",
            format!(r#"{{"failure":[{{"request_put":{{"key":"{other}"}}}}]}}"#),
        ),
        // etcd 3.4.23 does not check the ops of a nested txn.
        (
            "/v3/kv/txn",
            format!(
                r#"{{"success":[{{"request_txn":{{"success":[{{"request_put":{{"key":"{other}"}}}}]}}}}]}}"#
            ),
        ),
        ("/v3/kv/compaction", r#"{"revision":1}"#.to_string()),
    ] {
        d.as_user("pub0", path, &body).await;
    }
    d.as_user("root", "/v3/kv/range", &format!(r#"{{"key":"{other}"}}"#))
        .await;
    // A lease holding a key pub0 may not write: revoking it, or putting on it, is denied.
    d.grant("LP", r#"{"TTL":60}"#).await;
    let on_lease = format!(r#"{{"key":"{pa}","value":"eA==","lease":"$LP"}}"#);
    d.as_user("root", "/v3/kv/put", &on_lease).await;
    let wy = format!(r#"{{"key":"{}","value":"eA==","lease":"$LP"}}"#, b64("w/y"));
    d.as_user("pub0", "/v3/kv/put", &wy).await;
    d.as_user("pub0", "/v3/lease/revoke", r#"{"ID":"$LP"}"#)
        .await;
    d.as_user("root", "/v3/lease/revoke", r#"{"ID":"$LP"}"#)
        .await;
    d.watch_as(
        "pub0",
        &format!(r#"{{"create_request":{{"key":"{other}"}}}}"#),
    )
    .await;
    d.watch_as("pub0", &format!(r#"{{"create_request":{{"key":"{pa}"}}}}"#))
        .await;
    admin_refusals_sequence(d).await;
}

async fn admin_refusals_sequence(d: &mut Diff) {
    for (path, body) in [
        ("/v3/auth/user/list", "{}"),
        ("/v3/auth/user/get", r#"{"name":"pub0"}"#),
        ("/v3/auth/user/get", r#"{"name":"root"}"#),
        ("/v3/auth/role/get", r#"{"role":"pubr"}"#),
        ("/v3/auth/role/get", r#"{"role":"root"}"#),
        ("/v3/auth/role/list", "{}"),
        ("/v3/auth/user/add", r#"{"name":"z"}"#),
        (
            "/v3/auth/user/changepw",
            r#"{"name":"pub0","password":"q"}"#,
        ),
        ("/v3/auth/disable", "{}"),
    ] {
        d.as_user("pub0", path, body).await;
    }
    d.check("/v3/auth/user/get", r#"{"name":"pub0"}"#).await;
    d.check("/v3/auth/user/get", r#"{"name":""}"#).await;
    for (path, body) in [
        ("/v3/auth/user/delete", r#"{"name":"root"}"#),
        ("/v3/auth/user/revoke", r#"{"name":"root","role":"root"}"#),
        ("/v3/auth/role/delete", r#"{"role":"root"}"#),
        ("/v3/auth/user/revoke", r#"{"name":"pub0","role":"nope"}"#),
        ("/v3/auth/user/revoke", r#"{"name":"nope","role":"pubr"}"#),
        (
            "/v3/auth/role/revoke",
            r#"{"role":"pubr","key":"c2luZ2xl"}"#,
        ),
        (
            "/v3/auth/role/revoke",
            r#"{"role":"pubr","key":"c2luZ2xl"}"#,
        ),
        ("/v3/auth/role/revoke", r#"{"role":"pubr","key":"dy8="}"#),
        ("/v3/auth/role/revoke", r#"{"role":"nope","key":"dy8="}"#),
        ("/v3/auth/role/get", r#"{"role":"pubr"}"#),
        (
            "/v3/auth/user/add",
            r#"{"name":"np","options":{"no_password":true}}"#,
        ),
        ("/v3/auth/user/add", r#"{"name":"ep","password":""}"#),
    ] {
        d.as_user("root", path, body).await;
    }
    d.check("/v3/auth/authenticate", r#"{"name":"np","password":""}"#)
        .await;
    d.login("ep", "ep", "").await;
    d.as_user(
        "root",
        "/v3/auth/user/changepw",
        r#"{"name":"pub0","password":"q"}"#,
    )
    .await;
    d.as_user(
        "pub0",
        "/v3/kv/range",
        &format!(r#"{{"key":"{}"}}"#, b64("pub/a")),
    )
    .await;
    d.check("/v3/auth/authenticate", r#"{"name":"pub0","password":"p"}"#)
        .await;
    d.login("pub0", "pub0", "q").await;
    lock_with_auth_sequence(d).await;
}

async fn lock_with_auth_sequence(d: &mut Diff) {
    let name = b64("mutex");
    d.check("/v3/lock/lock", &format!(r#"{{"name":"{name}"}}"#))
        .await;
    d.as_user("pub0", "/v3/lock/lock", &format!(r#"{{"name":"{name}"}}"#))
        .await;
    d.check_with("POST", "/v3/lock/lock", r#"{"name":"eA=="}"#, Some("bogus"))
        .await;
    d.as_user("pub0", "/v3/lock/unlock", r#"{"key":"cHViL2E="}"#)
        .await;
    d.check("/v3/maintenance/alarm", "{}").await;
    d.check_with("POST", "/v3/maintenance/alarm", "{}", Some("bogus"))
        .await;
    d.as_user("pub0", "/v3/maintenance/alarm", "{}").await;
    teardown_sequence(d).await;
}

/// Roles and users removed, then auth disabled and its preconditions seen again.
async fn teardown_sequence(d: &mut Diff) {
    d.as_user("root", "/v3/auth/role/add", r#"{"name":"r2"}"#)
        .await;
    d.as_user(
        "root",
        "/v3/auth/user/grant",
        r#"{"user":"pub0","role":"r2"}"#,
    )
    .await;
    for body in [r#"{"role":"r2"}"#, r#"{"role":"r2"}"#] {
        d.as_user("root", "/v3/auth/role/delete", body).await;
    }
    d.as_user("root", "/v3/auth/user/get", r#"{"name":"pub0"}"#)
        .await;
    d.as_user("root", "/v3/auth/user/delete", r#"{"name":"ep"}"#)
        .await;
    d.as_user("root", "/v3/auth/user/delete", r#"{"name":"ep"}"#)
        .await;
    d.as_user("ep", "/v3/kv/range", r#"{"key":"eA=="}"#).await;
    d.as_user(
        "root",
        "/v3/auth/user/revoke",
        r#"{"name":"pub0","role":"pubr"}"#,
    )
    .await;
    d.as_user(
        "pub0",
        "/v3/kv/range",
        &format!(r#"{{"key":"{}"}}"#, b64("pub/a")),
    )
    .await;
    d.as_user("root", "/v3/auth/disable", "{}").await;
    d.as_user("root", "/v3/auth/disable", "{}").await;
    d.check("/v3/auth/disable", "{}").await;
    d.check("/v3/kv/range", &format!(r#"{{"key":"{}"}}"#, b64("pub/a")))
        .await;
    d.check("/v3/auth/role/list", "{}").await;
    d.check("/v3/auth/user/delete", r#"{"name":"root"}"#).await;
    d.check("/v3/auth/enable", "{}").await;
    d.check("/v3/auth/user/add", r#"{"name":"root"}"#).await;
    d.check("/v3/auth/enable", "{}").await;
    d.check("/v3/auth/authenticate", r#"{"name":"root","password":""}"#)
        .await;
}

/// v3lock without auth: explicit leases (so both sides name the same keys), a
/// second holder waiting until the first unlocks, errors through the lock server.
pub async fn lock_sequence(d: &mut Diff) {
    for id in [7001, 7002] {
        d.check("/v3/lease/grant", &format!(r#"{{"TTL":60,"ID":{id}}}"#))
            .await;
    }
    let name = b64("mutex");
    let first = format!(r#"{{"name":"{name}","lease":7001}}"#);
    d.check("/v3/lock/lock", &first).await;
    d.check("/v3/lock/lock", &first).await;
    d.steps += 1;
    let second = format!(r#"{{"name":"{name}","lease":7002}}"#);
    let (real_wait, fake_wait) = (
        d.send(&d.real, "POST", "/v3/lock/lock", &second, None),
        d.send(&d.fake, "POST", "/v3/lock/lock", &second, None),
    );
    let unlock = async {
        // The waiter's key exists on both sides before the holder lets go.
        let waiter = format!(r#"{{"key":"{}","count_only":true}}"#, b64("mutex/1b5a"));
        for side in [&d.real, &d.fake] {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let r = d.send(side, "POST", "/v3/kv/range", &waiter, None).await;
                if r.text.contains(r#""count":"1""#) {
                    break;
                }
                assert!(Instant::now() < deadline, "waiter never queued: {r:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let body = format!(r#"{{"key":"{}"}}"#, b64("mutex/1b59"));
        let (r, f) = tokio::join!(
            d.send(&d.real, "POST", "/v3/lock/unlock", &body, None),
            d.send(&d.fake, "POST", "/v3/lock/unlock", &body, None)
        );
        (r, f)
    };
    let (r, f, (ur, uf)) = tokio::join!(real_wait, fake_wait, unlock);
    d.compare("POST", "/v3/lock/unlock", "first holder", ur, uf);
    d.compare("POST", "/v3/lock/lock", &second, r, f);
    let all = format!(
        r#"{{"key":"{}","range_end":"{}"}}"#,
        b64("mutex/"),
        b64("mutex0")
    );
    d.check("/v3/kv/range", &all).await;
    for body in [
        format!(r#"{{"key":"{}"}}"#, b64("mutex/1b5a")),
        format!(r#"{{"key":"{}"}}"#, b64("mutex/1b5a")),
        "{}".to_string(),
        "bad".to_string(),
    ] {
        d.check("/v3/lock/unlock", &body).await;
    }
    for body in [
        r#"{"name":"bA==","lease":999}"#,
        r#"{"name":5}"#,
        "garbage",
        r#"{"name":"bA==","lease":"7001"}"#,
    ] {
        d.check("/v3/lock/lock", body).await;
    }
    d.check_with("GET", "/v3/lock/lock", "", None).await;
    d.check("/v3beta/lock/lock", r#"{"name":"bTI=","lease":7002}"#)
        .await;
    d.check("/v3/kv/range", &all).await;
    lock_without_lease(d).await;
}

/// Without a lease the lock server grants one of 60 s: the key ends in its ID, which
/// differs by side, so the key is compared as `name/` and checked to be that lease.
async fn lock_without_lease(d: &mut Diff) {
    d.steps += 1;
    let body = format!(r#"{{"name":"{}"}}"#, b64("auto"));
    let (r, f) = tokio::join!(
        d.send(&d.real, "POST", "/v3/lock/lock", &body, None),
        d.send(&d.fake, "POST", "/v3/lock/lock", &body, None)
    );
    let mut answers = Vec::new();
    for (side, resp) in [(&d.real, r), (&d.fake, f)] {
        assert_eq!(resp.status, 200, "{resp:?}");
        let mut v: Value = serde_json::from_str(&resp.text).unwrap();
        let key = base64::Engine::decode(
            &base64::engine::general_purpose::STANDARD,
            v["key"].as_str().unwrap(),
        )
        .unwrap();
        let key = String::from_utf8(key).unwrap();
        let hex = key.strip_prefix("auto/").expect("name/lease");
        let lease = i64::from_str_radix(hex, 16).expect("lease in hex");
        let ttl = d
            .send(
                side,
                "POST",
                "/v3/lease/timetolive",
                &format!(r#"{{"ID":{lease}}}"#),
                None,
            )
            .await;
        assert!(ttl.text.contains(r#""grantedTTL":"60""#), "{ttl:?}");
        v["key"] = Value::String("auto/LEASE".into());
        answers.push(d.normalize(v));
    }
    assert_eq!(answers[0], answers[1], "lock without a lease");
}

/// Alarms: none, NOSPACE raised (writes refused, reads and deletes go on, health
/// false), CORRUPT raised and cleared, the answers' shapes.
pub async fn alarm_sequence(d: &mut Diff) {
    for body in [
        "{}",
        r#"{"action":"GET","alarm":"NOSPACE"}"#,
        "bad",
        r#"{"action":"NOPE"}"#,
    ] {
        d.check("/v3/maintenance/alarm", body).await;
    }
    d.check(
        "/v3/maintenance/alarm",
        r#"{"action":"ACTIVATE","alarm":"NOSPACE"}"#,
    )
    .await;
    d.check(
        "/v3/maintenance/alarm",
        r#"{"action":"ACTIVATE","alarm":"NOSPACE"}"#,
    )
    .await;
    let k = b64("al");
    for (path, body) in [
        ("/v3/kv/put", format!(r#"{{"key":"{k}","value":"eA=="}}"#)),
        (
            "/v3/kv/txn",
            format!(r#"{{"success":[{{"request_put":{{"key":"{k}"}}}}]}}"#),
        ),
        (
            "/v3/kv/txn",
            format!(r#"{{"success":[{{"request_range":{{"key":"{k}"}}}}]}}"#),
        ),
        (
            "/v3/kv/txn",
            format!(
                r#"{{"success":[{{"request_txn":{{"success":[{{"request_put":{{"key":"{k}"}}}}]}}}}]}}"#
            ),
        ),
        ("/v3/kv/range", format!(r#"{{"key":"{k}"}}"#)),
        ("/v3/kv/deleterange", format!(r#"{{"key":"{k}"}}"#)),
        ("/v3/lease/grant", r#"{"TTL":5}"#.to_string()),
        ("/v3/lock/lock", format!(r#"{{"name":"{k}"}}"#)),
        ("/v3/maintenance/alarm", r#"{"action":"GET"}"#.to_string()),
        (
            "/v3/maintenance/alarm",
            r#"{"action":"DEACTIVATE","alarm":"NOSPACE","memberID":"5"}"#.to_string(),
        ),
    ] {
        d.check(path, &body).await;
    }
    d.check_with("GET", "/health", "", None).await;
    status_errors(d).await;
    d.check(
        "/v3/maintenance/alarm",
        r#"{"action":"DEACTIVATE","alarm":"NOSPACE"}"#,
    )
    .await;
    d.check("/v3/kv/put", &format!(r#"{{"key":"{k}","value":"eA=="}}"#))
        .await;
    d.check_with("GET", "/health", "", None).await;
    d.check(
        "/v3/maintenance/alarm",
        r#"{"action":"ACTIVATE","alarm":"CORRUPT","memberID":"3"}"#,
    )
    .await;
    for (path, body) in [
        ("/v3/kv/put", format!(r#"{{"key":"{k}","value":"eA=="}}"#)),
        ("/v3/kv/range", format!(r#"{{"key":"{k}"}}"#)),
        ("/v3/kv/deleterange", format!(r#"{{"key":"{k}"}}"#)),
        ("/v3/lease/grant", r#"{"TTL":5}"#.to_string()),
        (
            "/v3/maintenance/alarm",
            r#"{"action":"GET","alarm":"CORRUPT"}"#.to_string(),
        ),
        (
            "/v3/maintenance/alarm",
            r#"{"action":"DEACTIVATE","alarm":"CORRUPT","memberID":3}"#.to_string(),
        ),
        ("/v3/kv/deleterange", format!(r#"{{"key":"{k}"}}"#)),
        ("/v3/maintenance/alarm", "{}".to_string()),
    ] {
        d.check(path, &body).await;
    }
    d.check_with("GET", "/health", "", None).await;
}

/// `status` lists the raised alarms in `errors`.
async fn status_errors(d: &mut Diff) {
    d.steps += 1;
    let (r, f) = tokio::join!(
        d.send(&d.real, "POST", "/v3/maintenance/status", "{}", None),
        d.send(&d.fake, "POST", "/v3/maintenance/status", "{}", None)
    );
    let (r, f): (Value, Value) = (
        serde_json::from_str(&r.text).unwrap(),
        serde_json::from_str(&f.text).unwrap(),
    );
    assert_eq!(r["errors"], f["errors"], "status errors: {r} {f}");
    assert_eq!(r["errors"], serde_json::json!(["alarm:NOSPACE "]), "{r}");
}

/// An error of a call, asked for by a client that accepts trailers: both send the
/// body chunked and then the `Grpc-Trailer-Content-Type` trailer.
pub async fn trailer_sequence(d: &mut Diff) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    d.steps += 1;
    let body = r#"{"key":"eA==","revision":999999}"#;
    let mut tails = Vec::new();
    for side in [&d.real, &d.fake] {
        let addr = side.url.trim_start_matches("http://").to_string();
        let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let req = format!(
            "POST /v3/kv/range HTTP/1.1\r\nHost: {addr}\r\nTE: trailers\r\n\
             Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        sock.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let read = sock.read_to_end(&mut raw);
        tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("answer within 5 s")
            .unwrap();
        let text = String::from_utf8_lossy(&raw).to_ascii_lowercase();
        assert!(text.contains("transfer-encoding: chunked"), "{text}");
        // The last chunk (`0`), then the trailer field, then the blank line.
        let tail = text.rsplit_once("\r\n0\r\n").map(|(_, t)| t.to_string());
        tails.push(tail.unwrap_or_default());
    }
    assert_eq!(tails[0], tails[1], "trailers differ");
    assert_eq!(
        tails[0], "grpc-trailer-content-type: application/grpc\r\n\r\n",
        "the gateway's trailer"
    );
}
