//! What the master reads from etcd: the instance key and its `InstanceMetaInfo` value
//! (docs/contract.md §1).
//!
//! The master watches `<namespace>XLLM:`; a key it cannot parse is an instance it never
//! routes to, so the layout here is byte-for-byte the master's.

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

/// The value under the instance key (the master's `InstanceMetaInfo`), fields in the
/// reference's order. The incarnation id is `<instance-name>-<12 lowercase hex>`, fresh for
/// every (re)registration (the core draws it).
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
        register_ts_ms: u64,
    ) -> InstanceMeta {
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
    fn meta_json_has_the_masters_fields() {
        let meta = InstanceMeta::new(
            "127.0.0.1:18000",
            InstanceType::Decode,
            "vllm",
            "vllm-0",
            1_764_400_000_000,
        );
        let v: serde_json::Value = serde_json::from_str(&meta.to_json()).unwrap();
        assert_eq!(v["name"], "127.0.0.1:18000");
        assert_eq!(v["rpc_address"], "127.0.0.1:18000");
        assert_eq!(v["type"], 2);
        assert_eq!(v["backend_type"], "vllm");
        assert_eq!(v["incarnation_id"], "vllm-0");
        assert_eq!(v["register_ts_ms"], 1_764_400_000_000u64);
    }
}
