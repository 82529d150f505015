//! From parsed samples to heartbeat metrics. (Interface stub: the parser issue fills it.)

use serde::Serialize;

use crate::prom::Page;

/// Which latency statistic the heartbeat reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LatencyStat {
    #[default]
    Avg,
    P50,
    P90,
    P99,
    Max,
}

#[derive(Clone, Debug, Default)]
pub struct MapperConfig {
    pub latency_stat: LatencyStat,
    /// Only samples whose `model_name` label equals this.
    pub model: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LoadMetrics {
    pub waiting_requests_num: u64,
    pub gpu_cache_usage_perc: f64,
}

/// Milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LatencyMetrics {
    pub recent_max_ttft: i64,
    pub recent_max_tbt: i64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct HeartbeatMetrics {
    pub load_metrics: LoadMetrics,
    pub latency_metrics: LatencyMetrics,
}

/// Keeps the previous scrape's counters to compute interval statistics.
#[derive(Debug, Default)]
pub struct Mapper {
    config: MapperConfig,
}

impl Mapper {
    pub fn new(config: MapperConfig) -> Self {
        Mapper { config }
    }

    pub fn config(&self) -> &MapperConfig {
        &self.config
    }

    /// Map one scrape. Stub: answers zeros.
    pub fn observe(&mut self, _page: &Page<'_>) -> HeartbeatMetrics {
        HeartbeatMetrics::default()
    }
}
