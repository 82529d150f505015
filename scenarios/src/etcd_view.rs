//! Reading etcd's registrations through the v3 JSON gateway, for the observer.
//!
//! The observer reads directly (never through a proxy link), so link faults do not blind
//! it. Works against the fake and the real etcd alike.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;

/// One key as the observer sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Kv {
    /// The key, decoded from the gateway's base64.
    pub key: String,
    /// The value, decoded from the gateway's base64 (lossy UTF-8).
    pub value: String,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
    /// The revision of the key's last write (0: the gateway did not say).
    pub mod_revision: i64,
}

/// A gateway client over a list of endpoints (first answering wins).
#[derive(Clone, Debug)]
pub struct Gateway {
    endpoints: Vec<String>,
    http: reqwest::Client,
}

impl Gateway {
    /// A client of these gateway URLs, each request timing out after 2 s.
    pub fn new(endpoints: Vec<String>) -> Gateway {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap_or_default();
        Gateway { endpoints, http }
    }

    /// Every key under `prefix`.
    pub async fn range_prefix(&self, prefix: &str) -> Result<Vec<Kv>, String> {
        // The master's request: the same range end for a prefix.
        let body = mock_master::etcd::range_prefix_request(prefix.as_bytes());
        let mut last = String::from("no endpoints");
        for ep in &self.endpoints {
            let r = self
                .http
                .post(format!("{ep}/v3/kv/range"))
                .json(&body)
                .send()
                .await;
            let r = match r {
                Ok(r) if r.status().is_success() => r,
                Ok(r) => {
                    last = format!("{ep}: HTTP {}", r.status());
                    continue;
                }
                Err(e) => {
                    last = format!("{ep}: {e}");
                    continue;
                }
            };
            let bytes = match r.bytes().await {
                Ok(b) if b.len() < 64 << 20 => b,
                _ => continue,
            };
            let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
            let kvs = v["kvs"].as_array().into_iter().flatten();
            let kv = |kv: &serde_json::Value| {
                let dec = |f: &str| {
                    let bytes = B64.decode(kv[f].as_str().unwrap_or_default());
                    bytes.map_or_else(|_| String::new(), |b| String::from_utf8_lossy(&b).into())
                };
                // The gateway writes int64 fields as JSON strings; accept numbers too.
                let int = |f: &str| {
                    let l = &kv[f];
                    l.as_i64().or_else(|| l.as_str()?.parse().ok()).unwrap_or(0)
                };
                Kv {
                    key: dec("key"),
                    value: dec("value"),
                    lease: int("lease"),
                    mod_revision: int("mod_revision"),
                }
            };
            return Ok(kvs.map(kv).collect());
        }
        Err(last)
    }
}

#[cfg(test)]
mod tests {
    use mock_master::etcd::prefix_range_end as prefix_end;

    #[test]
    fn prefix_end_increments_last_byte() {
        assert_eq!(prefix_end(b"a/"), b"a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b""), vec![0]);
    }
}
