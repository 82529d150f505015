//! Parsers side by side on the same pages, then the scrape→heartbeat mapping.
//!
//! Each parser is used the way its API asks (prometheus-parse wants owned lines, the
//! others a &str) and its whole result is consumed. Before measuring, the number of
//! samples each returns is printed: the grouping parsers return one sample per
//! histogram/summary series, and prometheus-parse drops every `vllm:` metric.

use std::hint::black_box;
use std::time::Duration;

use benches::{inputs, Input};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sidecar::mapping::{LatencyStat, Mapper, MapperConfig};
use sidecar::prom::{self, Format, Mode};

fn ours(text: &str, mode: Mode) -> (usize, usize) {
    match prom::parse(text, Format::Prometheus, mode) {
        Ok(p) => (
            p.samples.len(),
            p.samples
                .iter()
                .filter(|s| s.name.starts_with("vllm:"))
                .count(),
        ),
        Err(_) => (0, 0),
    }
}

fn openmetrics_parser(text: &str) -> Result<(usize, usize), String> {
    let e = openmetrics_parser::prometheus::parse_prometheus(text).map_err(|e| format!("{e:?}"))?;
    let mut all = 0;
    let mut vllm = 0;
    for (name, fam) in &e.families {
        let n = fam.iter_samples().count();
        all += n;
        if name.starts_with("vllm:") {
            vllm += n;
        }
    }
    Ok((all, vllm))
}

fn prom_text_format_parser(text: &str) -> Result<(usize, usize), String> {
    let s = prom_text_format_parser::Scrape::parse(text).map_err(|e| format!("{e:?}"))?;
    let all = s.metrics.iter().map(|m| m.samples.len()).sum();
    let vllm = s
        .metrics
        .iter()
        .filter(|m| m.name.starts_with("vllm:"))
        .map(|m| m.samples.len())
        .sum();
    Ok((all, vllm))
}

fn prometheus_parse(text: &str) -> Result<(usize, usize), String> {
    let s = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .map_err(|e| e.to_string())?;
    let vllm = s
        .samples
        .iter()
        .filter(|x| x.metric.starts_with("vllm:"))
        .count();
    Ok((s.samples.len(), vllm))
}

fn report_counts(inputs: &[Input]) {
    eprintln!("\nsamples returned (all / vllm:*), per input:");
    for i in inputs {
        let show = |r: Result<(usize, usize), String>| match r {
            Ok((a, v)) => format!("{a} / {v}"),
            Err(e) => format!("error: {}", e.chars().take(60).collect::<String>()),
        };
        eprintln!(
            "  {} ({} bytes, {} lines)",
            i.name,
            i.text.len(),
            i.text.lines().count()
        );
        let (a, v) = ours(&i.text, Mode::Lenient);
        eprintln!("    sidecar lenient           {a} / {v}");
        let strict =
            prom::parse(&i.text, Format::Prometheus, Mode::Strict).map(|p| p.samples.len());
        eprintln!("    sidecar strict            {strict:?}");
        eprintln!(
            "    openmetrics-parser        {}",
            show(openmetrics_parser(&i.text))
        );
        eprintln!(
            "    prom_text_format_parser   {}",
            show(prom_text_format_parser(&i.text))
        );
        eprintln!(
            "    prometheus-parse          {}",
            show(prometheus_parse(&i.text))
        );
    }
    eprintln!();
}

fn parsers(c: &mut Criterion) {
    let inputs = inputs();
    report_counts(&inputs);
    for input in &inputs {
        let text = input.text.as_str();
        let mut g = c.benchmark_group(format!("parse/{}", input.name));
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function("sidecar-lenient", |b| {
            b.iter(|| {
                prom::parse(black_box(text), Format::Prometheus, Mode::Lenient)
                    .map(|p| p.samples.len())
            })
        });
        g.bench_function("sidecar-strict", |b| {
            b.iter(|| {
                prom::parse(black_box(text), Format::Prometheus, Mode::Strict)
                    .map(|p| p.samples.len())
            })
        });
        g.bench_function("openmetrics-parser-0.5.1", |b| {
            b.iter(|| openmetrics_parser(black_box(text)))
        });
        g.bench_function("prom_text_format_parser-0.1.0", |b| {
            b.iter(|| prom_text_format_parser(black_box(text)))
        });
        g.bench_function("prometheus-parse-0.2.5", |b| {
            b.iter(|| prometheus_parse(black_box(text)))
        });
        g.finish();
    }
}

/// Scrape text → heartbeat metrics, state carried between iterations as in the sidecar.
fn mapping(c: &mut Criterion) {
    for input in inputs() {
        let text = input.text.as_str();
        let mut g = c.benchmark_group(format!("mapping/{}", input.name));
        g.throughput(Throughput::Bytes(text.len() as u64));
        for stat in [LatencyStat::Avg, LatencyStat::P99] {
            let name = format!("{stat:?}").to_lowercase();
            let mut m = Mapper::new(MapperConfig {
                latency_stat: stat,
                model: None,
            });
            g.bench_function(BenchmarkId::new("observe_text", &name), |b| {
                b.iter(|| m.observe_text(black_box(text), Format::Prometheus))
            });
            let mut m = Mapper::new(MapperConfig {
                latency_stat: stat,
                model: None,
            });
            g.bench_function(BenchmarkId::new("parse+observe", &name), |b| {
                b.iter(|| {
                    let page = prom::parse(black_box(text), Format::Prometheus, Mode::Lenient)
                        .unwrap_or_default();
                    m.observe(&page)
                })
            });
        }
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30)
}

criterion_group! {
    name = benches;
    config = config();
    targets = parsers, mapping
}
criterion_main!(benches);
