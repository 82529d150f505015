//! Benchmarks only: see `benches/`. This library holds the inputs the benchmarks share.
//!
//! # Layout
//!
//! - `benches/parse.rs`: every parser on the same inputs (our lenient and strict
//!   parser, openmetrics-parser, prom_text_format_parser, prometheus-parse), then the
//!   scrape→heartbeat mapping. Run: `cargo bench -p benches`.
//! - `examples/instructions.rs` + `instructions.sh`: a fixed amount of parsing or
//!   mapping for `valgrind --tool=callgrind` (instructions per byte, deterministic on a
//!   busy machine); run natively it prints MB/s over on-CPU time.
//! - [`inputs`]: the pages, read from the repository's fixtures.

use std::path::Path;

/// One benchmark input.
pub struct Input {
    pub name: &'static str,
    pub text: String,
}

/// The real vLLM page, the ~1 MB synthetic page (8 engines × 6 models, generated with
/// prometheus_client) and the escape-heavy page.
pub fn inputs() -> Vec<Input> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    [
        (
            "real-vllm-46KB",
            root.join("../sidecar/fixtures/vllm-0.10-metrics.txt"),
        ),
        (
            "large-8x6-860KB",
            root.join("../sidecar/fixtures/large.prom"),
        ),
        (
            "escapes-17KB",
            root.join("../sidecar/fixtures/escapes.prom"),
        ),
    ]
    .into_iter()
    .map(|(name, path)| Input {
        name,
        text: std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    })
    .collect()
}
