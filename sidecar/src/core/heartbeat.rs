//! The heartbeat body (docs/contract.md §3) and the test that a page is a vLLM page at
//! all.
//!
//! A page with no `vllm:` sample (a proxy's HTML error page, an empty 200, the wrong
//! server) is a scrape error, not a page of zeros: a heartbeat of `waiting=0, cache=0`
//! would make the master route *more* traffic to an instance it knows nothing about.

use std::sync::OnceLock;

use memchr::memmem;
use serde::Serialize;

use crate::mapping::{HeartbeatMetrics, LatencyMetrics, LoadMetrics};

/// The body, as the master's protobuf JSON parser reads it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeartbeatBody<'a> {
    /// The instance name: the register address, as in the key.
    pub name: &'a str,
    /// The incarnation the key in etcd carries.
    pub incarnation_id: &'a str,
    /// Waiting requests and KV-cache usage.
    pub load_metrics: LoadMetrics,
    /// The interval's time to first token and between tokens, in ms.
    pub latency_metrics: LatencyMetrics,
}

impl<'a> HeartbeatBody<'a> {
    /// The body for `name`'s incarnation with one scrape's metrics.
    pub fn new(name: &'a str, incarnation_id: &'a str, metrics: HeartbeatMetrics) -> Self {
        HeartbeatBody {
            name,
            incarnation_id,
            load_metrics: metrics.load_metrics,
            latency_metrics: metrics.latency_metrics,
        }
    }

    /// The JSON text posted to the master.
    pub fn to_json(&self) -> String {
        // Plain numbers and strings: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Whether `text` has at least one sample line of a `vllm:` metric: a line that starts
/// with the name (comment lines start with `#`). One substring search, so the page is
/// not lexed twice (the mapping lexes it next). A page whose names prometheus_client
/// escaped for an OpenMetrics scraper (see `mapping`) counts when it has a line of
/// `vllm:num_requests_waiting` in one of the escaped spellings (every vLLM release
/// writes that family): a bare `vllm_` prefix would also take, say, the sidecar's own
/// `vllm_sidecar_*` page for vLLM's. Those searches run only when the first found
/// nothing.
pub fn has_vllm_sample(text: &str) -> bool {
    // Built once: building a searcher cost more than the search, which stops at the
    // page's first sample line.
    static NAMED: OnceLock<memmem::Finder<'static>> = OnceLock::new();
    static ESCAPED: OnceLock<[memmem::Finder<'static>; 3]> = OnceLock::new();
    let named = NAMED.get_or_init(|| memmem::Finder::new(b"\nvllm:"));
    if text.starts_with("vllm:") || named.find(text.as_bytes()).is_some() {
        return true;
    }
    let escaped = ESCAPED.get_or_init(|| {
        ESCAPED_WAITING.map(|name| memmem::Finder::new(name.as_bytes()).into_owned())
    });
    ESCAPED_WAITING
        .iter()
        .zip(escaped)
        .any(|(name, f)| text.starts_with(&name[1..]) || f.find(text.as_bytes()).is_some())
}

/// `\n` and `vllm:num_requests_waiting` as the `underscores`, `dots` and `values`
/// escapings write it.
const ESCAPED_WAITING: [&str; 3] = [
    "\nvllm_num_requests_waiting",
    "\nvllm__num__requests__waiting",
    "\nU__vllm_3a_num__requests__waiting",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vllm_page_has_samples_and_an_html_page_has_none() {
        let page = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0.0\n";
        assert!(has_vllm_sample(page));
        assert!(has_vllm_sample("vllm:num_requests_waiting 0\n"));
        assert!(!has_vllm_sample(
            "<html><body>502 Bad Gateway</body></html>\n"
        ));
        assert!(!has_vllm_sample("# TYPE vllm:x gauge\nother 1\n"));
        assert!(!has_vllm_sample("other{a=\"vllm:x\"} 1\n"));
        assert!(!has_vllm_sample(""));
        // Escaped by prometheus_client for an OpenMetrics scraper.
        assert!(has_vllm_sample(
            "# TYPE vllm:num_requests_waiting gauge\nvllm_num_requests_waiting 0.0\n"
        ));
        assert!(has_vllm_sample(
            "# x\nU__vllm_3a_num__requests__waiting 0.0\n"
        ));
        assert!(!has_vllm_sample("# TYPE vllm_x gauge\nother 1\n"));
        assert!(has_vllm_sample("vllm__num__requests__waiting 0.0\n"));
        // The sidecar's own page is not vLLM's.
        assert!(!has_vllm_sample(
            "# TYPE vllm_sidecar_registered gauge\nvllm_sidecar_registered 1.0\n"
        ));
    }

    #[test]
    fn body_json_has_the_masters_field_names() {
        let body = HeartbeatBody::new("h:1", "vllm-0", HeartbeatMetrics::default());
        let v: serde_json::Value = serde_json::from_str(&body.to_json()).unwrap();
        assert_eq!(v["name"], "h:1");
        assert_eq!(v["incarnation_id"], "vllm-0");
        assert_eq!(v["load_metrics"]["waiting_requests_num"], 0);
        assert_eq!(v["latency_metrics"]["recent_max_ttft"], 0);
    }
}
