//! The heartbeat POST to the master (contract §3).
//!
//! Why thin: the body (incarnation, load, latency) and what each status means (409 →
//! register again, 401 → log) are the core's; here is one POST within the timeout, the
//! token in `X-Internal-Token` when there is one, and the answer's status. A POST is
//! never resent (see [`super::http`]).

use std::time::Duration;

use url::Url;

use super::exchange::{Body, Exchange, ReadFailure};
use super::http::{describe, display_url, excerpt, read_body};
use crate::config::Secret;

/// The master's answers are one small JSON object; more is read no further.
pub const ANSWER_BODY_CAP: usize = 64 * 1024;

/// A heartbeat's answer with a short excerpt of its body, for a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterAnswer {
    pub status: u16,
    /// Up to 120 characters of the body (empty when it could not be read).
    pub excerpt: String,
}

/// Posts heartbeats to one master.
#[derive(Clone)]
pub struct MasterClient {
    http: reqwest::Client,
    heartbeat_url: Url,
    token: Secret,
    timeout: Duration,
}

impl std::fmt::Debug for MasterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterClient")
            .field("heartbeat_url", &display_url(&self.heartbeat_url))
            .field("token", &self.token)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl MasterClient {
    pub fn new(
        http: reqwest::Client,
        heartbeat_url: Url,
        token: Secret,
        timeout: Duration,
    ) -> MasterClient {
        MasterClient {
            http,
            heartbeat_url,
            token,
            timeout,
        }
    }

    /// POST one heartbeat body (JSON); answers the status. `Err` when no answer came
    /// within the timeout. The message never holds the token.
    pub async fn post_heartbeat(&self, body: String) -> Result<u16, String> {
        self.post_heartbeat_answer(body).await.map(|a| a.status)
    }

    /// As [`MasterClient::post_heartbeat`], to `url` instead of the configured URL
    /// (the elected master's, when following it).
    pub async fn post_heartbeat_to(&self, url: &Url, body: String) -> Result<u16, String> {
        self.post(url.clone(), body).await.map(|a| a.status)
    }

    /// As [`MasterClient::post_heartbeat`], with an excerpt of the answer's body.
    pub async fn post_heartbeat_answer(&self, body: String) -> Result<MasterAnswer, String> {
        self.post(self.heartbeat_url.clone(), body).await
    }

    async fn post(&self, url: Url, body: String) -> Result<MasterAnswer, String> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut request = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if !self.token.is_empty() {
            let mut value = reqwest::header::HeaderValue::from_str(self.token.expose())
                .map_err(|_| "the internal token is not a valid HTTP header value".to_string())?;
            value.set_sensitive(true);
            request = request.header("x-internal-token", value);
        }
        let mut response = match tokio::time::timeout_at(deadline, request.send()).await {
            Err(_) => return classify_heartbeat(Exchange::TimedOut, self.timeout),
            Ok(Err(e)) => return classify_heartbeat(Exchange::Failed(describe(&e)), self.timeout),
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        // The status is the answer; the body is read (capped, within the same deadline)
        // for the excerpt and so the connection can be reused.
        let body = tokio::time::timeout_at(deadline, read_body(&mut response, ANSWER_BODY_CAP))
            .await
            .unwrap_or_else(|_| {
                Body::Failed(ReadFailure {
                    message: "timed out".into(),
                    decode: false,
                })
            });
        let exchange = Exchange::Answer {
            status,
            format: None,
            body,
        };
        classify_heartbeat(exchange, self.timeout)
    }
}

/// What a heartbeat exchange that ended as `exchange` says: the master's status (with an
/// excerpt of its body when that was read whole), or why no answer came. Only the
/// status is the answer: a body that could not be read costs the excerpt, nothing
/// else. `timeout`: the client's, named in the message when it ran out.
pub fn classify_heartbeat(exchange: Exchange, timeout: Duration) -> Result<MasterAnswer, String> {
    match exchange {
        Exchange::TimedOut => Err(format!("heartbeat: no answer within {timeout:?}")),
        Exchange::Failed(e) => Err(format!("heartbeat POST failed: {e}")),
        Exchange::Answer { status, body, .. } => Ok(MasterAnswer {
            status,
            excerpt: body
                .as_bytes()
                .map_or_else(String::new, |b| excerpt(b, 120)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(3);

    #[test]
    fn the_status_is_the_answer_whatever_became_of_the_body() {
        let answer = |body| Exchange::Answer {
            status: 409,
            format: None,
            body,
        };
        let got = classify_heartbeat(answer(Body::Bytes(br#"{"error":"stale"}"#.to_vec())), T);
        assert_eq!(
            got,
            Ok(MasterAnswer {
                status: 409,
                excerpt: r#"{"error":"stale"}"#.into()
            })
        );
        let unread = Body::Failed(ReadFailure {
            message: "timed out".into(),
            decode: false,
        });
        for body in [Body::OverCap(1), unread, Body::Unread] {
            let got = classify_heartbeat(answer(body), T);
            assert_eq!(got.map(|a| (a.status, a.excerpt)), Ok((409, String::new())));
        }
    }

    #[test]
    fn no_answer_reads_as_the_clients_message() {
        assert_eq!(
            classify_heartbeat(Exchange::TimedOut, T),
            Err("heartbeat: no answer within 3s".into())
        );
        assert_eq!(
            classify_heartbeat(Exchange::Failed("connect failed: refused".into()), T),
            Err("heartbeat POST failed: connect failed: refused".into())
        );
    }
}
