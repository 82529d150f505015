//! The heartbeat table of docs/contract.md §3, decided without I/O: each answer as a value
//! with its status and the real master's body, the body checks (400s), and the 409
//! decision from the instance table's verdict. [`crate::heartbeat`] is the HTTP shell
//! around it (token header, capped body read, faults, events).

use crate::instances::Beat;
use crate::pbjson::HeartbeatRequest;

/// One row of the table (and the mock's own 413).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Ok,
    InvalidToken,
    TooLarge,
    InvalidJson,
    MissingName,
    NotRegistered,
}

impl Answer {
    pub fn status(self) -> u16 {
        match self {
            Answer::Ok => 200,
            Answer::InvalidToken => 401,
            Answer::TooLarge => 413,
            Answer::InvalidJson | Answer::MissingName => 400,
            Answer::NotRegistered => 409,
        }
    }

    /// The body the real master sends (the 413 is this mock's own).
    pub fn body(self) -> &'static str {
        match self {
            Answer::Ok => r#"{"ok":true}"#,
            Answer::InvalidToken => r#"{"error":"invalid internal token"}"#,
            Answer::TooLarge => r#"{"error":"heartbeat body too large"}"#,
            Answer::InvalidJson => r#"{"error":"invalid heartbeat json"}"#,
            Answer::MissingName => r#"{"error":"missing instance name"}"#,
            Answer::NotRegistered => r#"{"error":"instance not registered or stale incarnation"}"#,
        }
    }

    /// The answer of the table's final row, from the instance table's verdict.
    pub fn of(beat: Beat) -> Answer {
        match beat {
            Beat::Accepted => Answer::Ok,
            Beat::Rejected => Answer::NotRegistered,
        }
    }
}

/// The body a real master would send with `status` (so an injected 409 looks real).
pub fn body_for(status: u16) -> &'static str {
    match status {
        200 => Answer::Ok.body(),
        400 => Answer::InvalidJson.body(),
        401 => Answer::InvalidToken.body(),
        409 => Answer::NotRegistered.body(),
        413 => Answer::TooLarge.body(),
        _ => r#"{"error":"injected fault"}"#,
    }
}

/// The body checks, in the master's order: a `HeartbeatRequest` under protobuf's JSON
/// rules (else 400 invalid json), with a name (else 400 missing name).
pub fn read_request(body: &[u8]) -> Result<HeartbeatRequest, Answer> {
    checked(HeartbeatRequest::from_json(body))
}

/// [`read_request`] of a body that is text already: the same answers (serde_json reads
/// a `&str` as it reads its bytes, without checking every string for UTF-8 again).
pub fn read_request_str(body: &str) -> Result<HeartbeatRequest, Answer> {
    checked(HeartbeatRequest::from_json_str(body))
}

fn checked(
    decoded: Result<HeartbeatRequest, serde_json::Error>,
) -> Result<HeartbeatRequest, Answer> {
    let req = decoded.map_err(|_| Answer::InvalidJson)?;
    if req.name.is_empty() {
        return Err(Answer::MissingName);
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_checks_in_order() {
        assert_eq!(read_request(b"[]"), Err(Answer::InvalidJson));
        assert_eq!(read_request(br#"{"name":5}"#), Err(Answer::InvalidJson));
        assert_eq!(
            read_request(br#"{"incarnation_id":"i"}"#),
            Err(Answer::MissingName)
        );
        assert_eq!(
            read_request(br#"{"name":"a"}"#).map(|r| r.name),
            Ok("a".to_string())
        );
    }

    #[test]
    fn text_bodies_read_as_their_bytes() {
        let bodies = [
            "[]",
            r#"{"name":5}"#,
            r#"{"incarnation_id":"i"}"#,
            r#"{"name":"a"}"#,
            r#"{"name":"a\u00e9\n","incarnationId":"x","unknown":"é\"q"}"#,
            r#"{"name":"é","load_metrics":{"waiting_requests_num":3,"gpu_cache_usage_perc":0.5}}"#,
            r#"{"name":"a","name":"b"}"#,
            r#"{"name":"a""#,
            "",
        ];
        for b in bodies {
            assert_eq!(read_request_str(b), read_request(b.as_bytes()), "{b}");
        }
    }

    #[test]
    fn statuses_and_bodies() {
        assert_eq!(Answer::of(Beat::Rejected).status(), 409);
        assert_eq!(Answer::of(Beat::Accepted).body(), r#"{"ok":true}"#);
        assert_eq!(body_for(401), Answer::InvalidToken.body());
        assert_eq!(body_for(503), r#"{"error":"injected fault"}"#);
    }
}
