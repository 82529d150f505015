//! Auth as etcd 3.4 with simple tokens: `/v3/auth/authenticate` and the token check.
//!
//! What real etcd does (and so this does): a token is `<16 letters>.<index>`, sent raw in
//! the `Authorization` header; it expires after `--auth-token-ttl` of *idle* time (each
//! use extends it). With auth on, KV calls without a token fail "user name is empty"
//! (400/3) and any call carrying an unknown or expired token fails "invalid auth token"
//! (401/16) — even with auth off. Lease grant/revoke only check a token if one is sent;
//! keepalive, timetolive and leases never look at it. Every configured user may do
//! everything (as root would); roles are out of scope.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use rand::Rng;
use serde::Serialize;

use crate::body::read_body;
use crate::codec::{self, Header};
use crate::decode::wire::Str;
use crate::error::EtcdError;
use crate::state::{lock, Shared};

pub struct Auth {
    users: HashMap<String, String>,
    tokens: HashMap<String, (String, Instant)>,
    ttl: Duration,
    index: u64,
}

impl Auth {
    pub fn new(users: &[(String, String)], ttl: Duration) -> Self {
        Auth {
            users: users.iter().cloned().collect(),
            tokens: HashMap::new(),
            ttl,
            index: 20,
        }
    }

    pub fn enabled(&self) -> bool {
        !self.users.is_empty()
    }

    pub fn tokens(&self) -> usize {
        self.tokens.len()
    }

    pub fn clear_tokens(&mut self) {
        self.tokens.clear();
    }

    pub fn authenticate(
        &mut self,
        name: &str,
        password: &str,
        now: Instant,
    ) -> Result<String, EtcdError> {
        if !self.enabled() {
            return Err(EtcdError::auth_not_enabled());
        }
        match self.users.get(name) {
            Some(p) if p == password && !name.is_empty() => {}
            _ => return Err(EtcdError::auth_failed()),
        }
        self.index += 1;
        let mut rng = rand::thread_rng();
        let letters: String = (0..16)
            .map(|_| {
                let c = rng.gen_range(0..52u8);
                if c < 26 {
                    (b'a' + c) as char
                } else {
                    (b'A' + c - 26) as char
                }
            })
            .collect();
        let token = format!("{letters}.{}", self.index);
        self.tokens
            .retain(|_, (_, last)| now.duration_since(*last) <= self.ttl);
        self.tokens.insert(token.clone(), (name.to_string(), now));
        Ok(token)
    }

    /// The user a token names (refreshing it); None when no token was sent.
    pub fn check(
        &mut self,
        token: Option<&str>,
        now: Instant,
    ) -> Result<Option<String>, EtcdError> {
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        let ttl = self.ttl;
        match self.tokens.get_mut(token) {
            Some((user, last)) if now.duration_since(*last) <= ttl => {
                *last = now;
                Ok(Some(user.clone()))
            }
            Some(_) => {
                self.tokens.remove(token);
                Err(EtcdError::invalid_token())
            }
            None => Err(EtcdError::invalid_token()),
        }
    }
}

fn token(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("grpc-metadata-token")
        .or_else(|| headers.get("authorization"))
        .and_then(|v| v.to_str().ok())
}

/// Validate the token if one was sent; answers its user.
pub fn check_token(shared: &Shared, headers: &HeaderMap) -> Result<Option<String>, EtcdError> {
    lock(&shared.auth).check(token(headers), Instant::now())
}

/// With auth on, a call that touches keys needs a user.
pub fn need_user(shared: &Shared, user: Option<String>) -> Result<(), EtcdError> {
    if user.is_none() && lock(&shared.auth).enabled() {
        return Err(EtcdError::user_empty());
    }
    Ok(())
}

pub fn require_user(shared: &Shared, headers: &HeaderMap) -> Result<(), EtcdError> {
    let user = check_token(shared, headers)?;
    need_user(shared, user)
}

/// The auth outcome a watch stream's creates report in their cancel reason.
pub fn watch_access(shared: &Shared, headers: &HeaderMap) -> Result<(), EtcdError> {
    require_user(shared, headers)
}

#[derive(Default)]
struct AuthenticateRequest {
    name: String,
    password: String,
}

crate::message!(AuthenticateRequest { b"name" => name: Str, b"password" => password: Str });

#[derive(Serialize)]
struct AuthenticateResponse {
    header: Header,
    token: String,
}

pub async fn authenticate(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, EtcdError> {
    let body = read_body(&shared, body).await?;
    let req: AuthenticateRequest = crate::decode::parse(&body)?;
    check_token(&shared, &headers)?;
    let token = lock(&shared.auth).authenticate(&req.name, &req.password, Instant::now())?;
    let rev = shared.store().rev;
    shared
        .events
        .emit("authenticated", serde_json::json!({ "user": req.name }));
    let resp = AuthenticateResponse {
        header: shared.header(rev),
        token,
    };
    Ok(codec::ok(serde_json::to_string(&resp).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_expire_after_idle_ttl_and_uses_extend_them() {
        let mut a = Auth::new(&[("u".into(), "p".into())], Duration::from_secs(2));
        let t0 = Instant::now();
        assert_eq!(
            a.authenticate("u", "x", t0).unwrap_err(),
            EtcdError::auth_failed()
        );
        let tok = a.authenticate("u", "p", t0).unwrap();
        let (letters, idx) = tok.split_once('.').unwrap();
        assert_eq!(letters.len(), 16);
        assert!(idx.parse::<u64>().is_ok());
        assert_eq!(
            a.check(Some(&tok), t0 + Duration::from_secs(1)).unwrap(),
            Some("u".into())
        );
        assert!(a.check(Some(&tok), t0 + Duration::from_secs(3)).is_ok());
        assert_eq!(
            a.check(Some(&tok), t0 + Duration::from_secs(6))
                .unwrap_err(),
            EtcdError::invalid_token()
        );
        assert_eq!(a.check(None, t0).unwrap(), None);
    }

    #[test]
    fn disabled_auth_rejects_any_token() {
        let mut a = Auth::new(&[], Duration::from_secs(2));
        assert_eq!(
            a.authenticate("u", "p", Instant::now()).unwrap_err(),
            EtcdError::auth_not_enabled()
        );
        assert_eq!(
            a.check(Some("x"), Instant::now()).unwrap_err(),
            EtcdError::invalid_token()
        );
    }
}
