//! The answer messages of the lease and auth APIs, in etcd's field order and JSON
//! dialect (the KV answers are with their rules in `kv_ops`, the watch answer in
//! `watchers`).
//!
//! Why a module of their own: the core builds them and the keepalive stream frames
//! them; neither should own the other's shapes.

use serde::Serialize;

use crate::codec::{is_zero, ser_b64_list, ser_i64, Header};

/// `LeaseGrantResponse`, also the `result` of a keepalive line.
#[derive(Serialize, Debug)]
pub struct GrantResponse {
    pub header: Header,
    #[serde(
        rename = "ID",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub id: i64,
    #[serde(
        rename = "TTL",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub ttl: i64,
}

/// One line of the keepalive stream: `{"result":…}`.
#[derive(Serialize, Debug)]
pub struct KeepAliveLine {
    pub result: GrantResponse,
}

impl KeepAliveLine {
    /// The line as streamed, newline included: what `serde_json` writes of it (tested),
    /// written directly (every keepalive of every instance is one).
    pub fn line(&self) -> String {
        let r = &self.result;
        // Six fields of up to 19 digits fit without growing.
        let mut s = String::with_capacity(256);
        s.push_str("{\"result\":{\"header\":{");
        let h = &r.header;
        let mut sep = "";
        let mut field = |s: &mut String, name: &str, digits: &str| {
            s.push_str(sep);
            s.push('"');
            s.push_str(name);
            s.push_str("\":\"");
            s.push_str(digits);
            s.push('"');
            sep = ",";
        };
        let mut b = itoa::Buffer::new();
        if h.cluster_id != 0 {
            field(&mut s, "cluster_id", b.format(h.cluster_id));
        }
        if h.member_id != 0 {
            field(&mut s, "member_id", b.format(h.member_id));
        }
        if h.revision != 0 {
            field(&mut s, "revision", b.format(h.revision));
        }
        if h.raft_term != 0 {
            field(&mut s, "raft_term", b.format(h.raft_term));
        }
        s.push('}');
        if r.id != 0 {
            s.push_str(",\"ID\":\"");
            s.push_str(b.format(r.id));
            s.push('"');
        }
        if r.ttl != 0 {
            s.push_str(",\"TTL\":\"");
            s.push_str(b.format(r.ttl));
            s.push('"');
        }
        s.push_str("}}\n");
        s
    }
}

#[derive(Serialize, Debug)]
pub struct TimeToLiveResponse {
    pub header: Header,
    #[serde(
        rename = "ID",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub id: i64,
    #[serde(
        rename = "TTL",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub ttl: i64,
    #[serde(
        rename = "grantedTTL",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub granted: i64,
    #[serde(serialize_with = "ser_b64_list", skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<Vec<u8>>,
}

#[derive(Serialize, Debug)]
pub struct LeasesResponse {
    pub header: Header,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<LeaseStatus>,
}

#[derive(Serialize, Debug)]
pub struct LeaseStatus {
    #[serde(
        rename = "ID",
        serialize_with = "ser_i64",
        skip_serializing_if = "is_zero"
    )]
    pub id: i64,
}

/// Answers that carry nothing but the header (revoke, compaction).
#[derive(Serialize, Debug)]
pub struct HeaderOnly {
    pub header: Header,
}

#[derive(Serialize, Debug)]
pub struct AuthenticateResponse {
    pub header: Header,
    pub token: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line written directly is what `serde_json` writes of the struct.
    #[test]
    fn keepalive_lines_are_serde_jsons() {
        let signed = [0, 1, -1, 42, i64::MIN, i64::MAX];
        let unsigned = [0, 1, 7_587_000_000_123, u64::MAX];
        for (i, &id) in signed.iter().enumerate() {
            for &ttl in &signed {
                for &c in &unsigned {
                    for &m in &unsigned {
                        let k = KeepAliveLine {
                            result: GrantResponse {
                                header: Header {
                                    cluster_id: c,
                                    member_id: m,
                                    revision: signed[(i + 2) % signed.len()],
                                    raft_term: unsigned[i % unsigned.len()],
                                },
                                id,
                                ttl,
                            },
                        };
                        let mut expected = serde_json::to_string(&k).unwrap();
                        expected.push('\n');
                        assert_eq!(k.line(), expected);
                    }
                }
            }
        }
    }
}
