//! scenarios: the mock cluster, the scenario language and runner, and the fault library.
pub mod etcd_view;
pub mod proxy;
pub mod real_etcd;
pub mod sidecar;
pub mod spec;
pub mod timeline;
