//! What the master reads from etcd: the instance key and its `InstanceMetaInfo` value
//! (contract §1).
//!
//! The master watches `<namespace>XLLM:`; a key it cannot parse is an instance it never
//! routes to, so the layout here is byte-for-byte the master's.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The master's instance types; the number is what goes into the value's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
#[value(rename_all = "UPPER")]
pub enum InstanceType {
    #[default]
    Default,
    Prefill,
    Decode,
    Mix,
}

impl InstanceType {
    pub fn number(self) -> u8 {
        match self {
            InstanceType::Default => 0,
            InstanceType::Prefill => 1,
            InstanceType::Decode => 2,
            InstanceType::Mix => 3,
        }
    }

    pub fn key_prefix(self) -> &'static str {
        match self {
            InstanceType::Default => "XLLM:DEFAULT:",
            InstanceType::Prefill => "XLLM:PREFILL:",
            InstanceType::Decode => "XLLM:DECODE:",
            InstanceType::Mix => "XLLM:MIX:",
        }
    }
}

impl std::fmt::Display for InstanceType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = self
            .key_prefix()
            .trim_start_matches("XLLM:")
            .trim_end_matches(':');
        f.write_str(name)
    }
}

/// `""` stays `""`; otherwise strip every leading and trailing `/` and wrap what is
/// left as `/<rest>/` (nothing left gives `""`).
pub fn normalize_namespace(namespace: &str) -> String {
    let trimmed = namespace.trim_matches('/');
    if trimmed.is_empty() {
        String::new()
    } else {
        format!("/{trimmed}/")
    }
}

/// `<namespace><PREFIX><host:port>`.
pub fn instance_key(namespace: &str, instance_type: InstanceType, addr: &str) -> String {
    format!(
        "{}{}{}",
        normalize_namespace(namespace),
        instance_type.key_prefix(),
        addr
    )
}

/// `<instance-name>-<12 lowercase hex>`, or just the hex when the name is empty; fresh for
/// every (re)registration so the master can tell a restart from a refresh.
pub fn new_incarnation(instance_name: &str) -> String {
    let hex = format!("{:012x}", rand::random::<u64>() & 0xffff_ffff_ffff);
    if instance_name.is_empty() {
        hex
    } else {
        format!("{instance_name}-{hex}")
    }
}

/// The value under the instance key (the master's `InstanceMetaInfo`), fields in the
/// reference's order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InstanceMeta {
    pub name: String,
    pub rpc_address: String,
    #[serde(rename = "type")]
    pub instance_type: u8,
    pub backend_type: String,
    pub incarnation_id: String,
    pub register_ts_ms: u64,
}

impl InstanceMeta {
    pub fn new(
        addr: &str,
        instance_type: InstanceType,
        backend_type: &str,
        incarnation_id: &str,
    ) -> InstanceMeta {
        let register_ts_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        InstanceMeta {
            name: addr.to_string(),
            rpc_address: addr.to_string(),
            instance_type: instance_type.number(),
            backend_type: backend_type.to_string(),
            incarnation_id: incarnation_id.to_string(),
            register_ts_ms,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_normalization_matches_the_master() {
        assert_eq!(normalize_namespace(""), "");
        assert_eq!(normalize_namespace("foo"), "/foo/");
        assert_eq!(normalize_namespace("/a/b/"), "/a/b/");
        assert_eq!(normalize_namespace("///"), "");
        assert_eq!(
            instance_key("ns", InstanceType::Default, "127.0.0.1:18000"),
            "/ns/XLLM:DEFAULT:127.0.0.1:18000"
        );
        assert_eq!(instance_key("", InstanceType::Mix, "h:1"), "XLLM:MIX:h:1");
    }

    #[test]
    fn incarnation_is_name_dash_twelve_hex() {
        let id = new_incarnation("vllm");
        let hex = id.strip_prefix("vllm-").unwrap();
        assert_eq!(hex.len(), 12);
        assert!(hex
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(new_incarnation("").len(), 12);
        assert_ne!(new_incarnation("x"), new_incarnation("x"));
    }

    #[test]
    fn meta_json_has_the_masters_fields() {
        let meta = InstanceMeta::new("127.0.0.1:18000", InstanceType::Decode, "vllm", "vllm-0");
        let v: serde_json::Value = serde_json::from_str(&meta.to_json()).unwrap();
        assert_eq!(v["name"], "127.0.0.1:18000");
        assert_eq!(v["rpc_address"], "127.0.0.1:18000");
        assert_eq!(v["type"], 2);
        assert_eq!(v["backend_type"], "vllm");
        assert_eq!(v["incarnation_id"], "vllm-0");
        assert!(v["register_ts_ms"].as_u64().unwrap() > 1_600_000_000_000);
    }
}
