//! How actions read in reports, and the one check shared by the flag-like actions.
//!
//! A label is the action's own TOML, compacted (`vllm_crash i0`,
//! `etcd_lose_data {reset_revision:true}`); the families whose faults read better in
//! words (`link sidecar_etcd i0: blackhole for 4s`) build theirs from these pieces.

use serde::Serialize;

use crate::dur::Dur;

/// A value as compact text: a string as itself, anything else as JSON without quotes.
pub fn compact(x: &impl Serialize) -> String {
    match serde_json::to_value(x).unwrap_or_default() {
        serde_json::Value::String(s) => s,
        other => other.to_string().replace('"', ""),
    }
}

/// A fault's label: `etcd: {hang:{path:*}} for 4s` (no ` for` without a duration).
pub fn fault(who: &str, fault: &impl Serialize, duration: &Option<Dur>) -> String {
    let lasting = duration.map(|d| format!(" for {d}")).unwrap_or_default();
    format!("{who}: {}{lasting}", compact(fault))
}

/// An action's label from its TOML: `{a:{b:1}}` reads `a {b:1}` (only the outer braces
/// go), at most 90 characters.
pub fn plain(action: &impl Serialize) -> String {
    let s = compact(action);
    let s = s
        .strip_prefix('{')
        .and_then(|s| s.strip_suffix('}'))
        .unwrap_or(&s)
        .replacen(':', " ", 1);
    s.chars().take(90).collect()
}

/// An action's key, as its TOML writes it: `etcd_fault` (none for a unit variant).
pub fn key(action: &impl Serialize) -> String {
    let v = serde_json::to_value(action).unwrap_or_default();
    v.as_object()
        .and_then(|o| o.keys().next().cloned())
        .unwrap_or_default()
}

/// An action written `what = true` (the value carries nothing; `false` would mislead).
pub fn flag(b: bool, what: &str) -> Result<(), String> {
    b.then_some(())
        .ok_or_else(|| format!("`{what} = false` means nothing; write `{what} = true`"))
}
