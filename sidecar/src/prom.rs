//! Prometheus text 0.0.4 / OpenMetrics 1.0 parser (to be written).
