//! scenarios: the mock cluster, the scenario language and runner, and the fault library.
pub mod proxy;
pub mod spec;
