//! scenarios: the mock cluster, the scenario language and runner, and the fault library.
pub mod cli;
pub mod cluster;
pub mod etcd_view;
pub mod library;
pub mod load;
pub mod observe;
pub mod proxy;
pub mod real_etcd;
pub mod report;
pub mod run;
pub mod sidecar;
pub mod spec;
pub mod timeline;
pub mod verdict;
