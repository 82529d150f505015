//! The built-in scenario library (`scenarios/library/*.toml`, embedded in the binary) and
//! loading scenario files from disk.

use crate::spec::{Scenario, SpecError};

/// The built-in scenarios' files as (file name, text), each `library/<name>.toml`
/// named once.
macro_rules! builtin_files {
    ($($name:literal),* $(,)?) => {
        &[$((
            concat!($name, ".toml"),
            include_str!(concat!("../library/", $name, ".toml")),
        )),*]
    };
}

/// Every built-in scenario: (file name, text).
pub const BUILTIN: &[(&str, &str)] = builtin_files![
    "happy-path",
    "drain-undrain",
    "etcd-auth-expiry",
    "etcd-cluster3-leader-killed",
    "etcd-data-loss",
    "etcd-data-loss-revision-reused",
    "etcd-data-loss-token-change",
    "etcd-failover",
    "etcd-failover-dead-first-member",
    "etcd-lease-lost",
    "etcd-partition-registration-backoff",
    "etcd-watch-hang-data-loss",
    "load-routing",
    "many-instances",
    "master-etcd-partition",
    "master-etcd-refused",
    "master-etcd-lost-watch-lines",
    "master-restart",
    "master-unreachable",
    "metrics-counter-reset",
    "vllm-sleep-wake",
    "metrics-garbage",
    "metrics-truncated-slow",
    "partition-long",
    "partition-short",
    "sigkill",
    "sigterm",
    "slow-vllm-start",
    "startup-gate-backoff-after-vllm-restart",
    "lease-given-up-is-revoked",
    "startup-gate-vllm-link-cut",
    "token-mismatch",
    "token-rotation",
    "vllm-dies",
    "vllm-health-hang",
    "vllm-recovers",
    "master-failover",
    "master-paused",
    "sidecar-paused-within-lease",
    "sidecar-paused-past-lease",
    "sidecar-throttled",
    "vllm-paused",
];

/// A parsed scenario and where it came from.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// `library/<file>` for built-ins, else the path given.
    pub file: String,
    /// The scenario, checked.
    pub scenario: Scenario,
}

/// Parse every built-in scenario.
pub fn builtin() -> Result<Vec<Loaded>, SpecError> {
    BUILTIN
        .iter()
        .map(|(f, text)| {
            let file = format!("library/{f}");
            Scenario::parse(&file, text).map(|scenario| Loaded { file, scenario })
        })
        .collect()
}

/// Parse scenario files from disk, or built-ins by name (`happy-path`). All are parsed
/// before any runs; the first error stops everything.
pub fn load(args: &[String]) -> Result<Vec<Loaded>, SpecError> {
    if args.is_empty() {
        return builtin();
    }
    let all = builtin()?;
    let load_one = |a: &String| {
        let error = |message: String| SpecError {
            file: a.clone(),
            line: None,
            message,
        };
        if std::path::Path::new(a).is_file() {
            let text =
                std::fs::read_to_string(a).map_err(|e| error(format!("cannot read: {e}")))?;
            let file = a.clone();
            return Scenario::parse(a, &text).map(|scenario| Loaded { file, scenario });
        }
        let name = a.trim_start_matches("library/").trim_end_matches(".toml");
        let found = all.iter().find(|l| l.scenario.name == name);
        let unknown = "no such file, and no built-in scenario of that name (see `scenarios list`)";
        found.cloned().ok_or_else(|| error(unknown.into()))
    };
    args.iter().map(load_one).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file added to `library/` and not to [`BUILTIN`] would run in neither mode.
    #[test]
    fn every_library_file_is_built_in() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("library");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".toml"))
            .collect();
        on_disk.sort();
        let mut built_in: Vec<String> = BUILTIN.iter().map(|(f, _)| f.to_string()).collect();
        built_in.sort();
        assert_eq!(on_disk, built_in);
    }
}
