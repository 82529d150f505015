//! The default prometheus_client collectors of a CPython 3.12 process (`python_gc_*`,
//! `python_info`, `process_*`), from the readings in the snapshot.

use super::{Runtime, Snapshot};
use crate::exposition::{Child, Family, Kind};

fn single(name: &'static str, help: &'static str, kind: Kind, value: f64) -> Family {
    let mut f = Family::new(name, help, kind);
    f.children.push(Child::Value {
        labels: vec![],
        value,
        created: None,
    });
    f
}

/// The default prometheus_client collectors of a CPython 3.12 process.
pub(super) fn families(s: &Snapshot, rt: &Runtime, out: &mut Vec<Family>) {
    // Garbage collection grows with the work done since the (pretend) process start.
    let served: f64 = s.engines.iter().map(|e| e.stats.h_e2e.count as f64).sum();
    let (start, cpu_base) = (rt.start, rt.cpu_base);
    let gc = |name: &'static str, help: &'static str, vals: [f64; 3]| {
        let mut f = Family::new(name, help, Kind::Counter);
        for (i, v) in vals.iter().enumerate() {
            f.children.push(Child::Value {
                labels: vec![("generation", i.to_string())],
                value: *v,
                created: None,
            });
        }
        f
    };
    out.push(gc(
        "python_gc_objects_collected",
        "Objects collected during gc",
        [
            12000.0 + served * 9.0,
            3000.0 + served,
            900.0 + (served / 10.0).floor(),
        ],
    ));
    out.push(gc(
        "python_gc_objects_uncollectable",
        "Uncollectable objects found during GC",
        [0.0; 3],
    ));
    out.push(gc(
        "python_gc_collections",
        "Number of times this generation was collected",
        [
            400.0 + (served / 3.0).floor(),
            36.0 + (served / 30.0).floor(),
            3.0 + (served / 300.0).floor(),
        ],
    ));
    let mut info = Family::new("python_info", "Python platform information", Kind::Gauge);
    info.children.push(Child::Value {
        labels: vec![
            ("implementation", "CPython".into()),
            ("major", "3".into()),
            ("minor", "12".into()),
            ("patchlevel", "3".into()),
            ("version", "3.12.3".into()),
        ],
        value: 1.0,
        created: None,
    });
    out.push(info);
    let p = &rt.process;
    out.push(single(
        "process_virtual_memory_bytes",
        "Virtual memory size in bytes.",
        Kind::Gauge,
        p.vsize,
    ));
    out.push(single(
        "process_resident_memory_bytes",
        "Resident memory size in bytes.",
        Kind::Gauge,
        p.rss,
    ));
    out.push(single(
        "process_start_time_seconds",
        "Start time of the process since unix epoch in seconds.",
        Kind::Gauge,
        (start * 100.0).round() / 100.0,
    ));
    out.push(single(
        "process_cpu_seconds_total",
        "Total user and system CPU time spent in seconds.",
        Kind::Counter,
        (p.cpu_secs - cpu_base).max(0.0),
    ));
    // prometheus_client names it without `_total` internally; the writer adds it.
    if let Some(last) = out.last_mut() {
        last.name = "process_cpu_seconds".into();
    }
    out.push(single(
        "process_open_fds",
        "Number of open file descriptors.",
        Kind::Gauge,
        p.open_fds,
    ));
    out.push(single(
        "process_max_fds",
        "Maximum number of open file descriptors.",
        Kind::Gauge,
        p.max_fds,
    ));
}
