//! Benchmarks only: see `benches/`. This library holds the inputs the benchmarks share.
