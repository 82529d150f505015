//! prometheus_client's multiprocess layout, which 0.33 and 0.34 serve when
//! `--data-parallel-size` above 1 starts one API server per engine: every process writes
//! its metrics to files and `/metrics` merges them (`MultiProcessCollector`). What a
//! scraper sees differs from the one-process page: families come grouped by type
//! (the counter files, then the gauges, then the histograms, then the summaries, each in
//! the order the metrics were first written), no `_created` samples, no process or
//! Python families, a family nobody wrote to is absent, and a histogram's series is
//! written `_sum`, its buckets, then `_count`.

use super::Snapshot;
use crate::exposition::{render_text_without_created, Family, Kind};

/// Whether `s` is served in the multiprocess layout.
pub(super) fn applies(s: &Snapshot) -> bool {
    s.dialect.is_v0_33_or_newer() && s.engines.len() > 1
}

/// Write `families` in the multiprocess layout.
pub(super) fn render(families: &[Family], out: &mut String) {
    for kind in [Kind::Counter, Kind::Gauge, Kind::Histogram, Kind::Summary] {
        let group: Vec<&Family> = families
            .iter()
            .filter(|f| f.kind == kind && !f.children.is_empty())
            .collect();
        render_text_without_created(&group, out);
    }
}
