//! What `/proc/self` says about this process: the `process_*` families report it, as
//! prometheus_client's process collector does for a real vLLM.

/// What `/proc/self` says about this process (zeros where unreadable).
#[derive(Clone, Debug, Default)]
pub struct ProcessView {
    pub vsize: f64,
    pub rss: f64,
    pub cpu_secs: f64,
    pub open_fds: f64,
    pub max_fds: f64,
}

pub fn process_view() -> ProcessView {
    let mut p = ProcessView::default();
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
        // Fields after the parenthesised command name; utime is field 14, stime 15,
        // vsize 23, rss 24 (1-based over the whole line).
        if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
            let f: Vec<&str> = rest.split_whitespace().collect();
            let num = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
            let ticks = 100.0;
            p.cpu_secs = (num(11) + num(12)) / ticks;
            p.vsize = num(20);
            p.rss = num(21) * 4096.0;
        }
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        p.open_fds = dir.count() as f64;
    }
    if let Ok(limits) = std::fs::read_to_string("/proc/self/limits") {
        if let Some(l) = limits.lines().find(|l| l.starts_with("Max open files")) {
            p.max_fds = l
                .split_whitespace()
                .nth(3)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0.0);
        }
    }
    p
}

/// CPU seconds this process has used so far.
pub fn cpu_seconds() -> f64 {
    process_view().cpu_secs
}
