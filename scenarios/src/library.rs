//! The built-in scenario library (`scenarios/library/*.toml`, embedded in the binary) and
//! loading scenario files from disk.

use crate::spec::{Scenario, SpecError};

/// Every built-in scenario: (file name, text).
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "happy-path.toml",
        include_str!("../library/happy-path.toml"),
    ),
    (
        "drain-undrain.toml",
        include_str!("../library/drain-undrain.toml"),
    ),
    (
        "etcd-auth-expiry.toml",
        include_str!("../library/etcd-auth-expiry.toml"),
    ),
    (
        "etcd-cluster3-leader-killed.toml",
        include_str!("../library/etcd-cluster3-leader-killed.toml"),
    ),
    (
        "etcd-data-loss.toml",
        include_str!("../library/etcd-data-loss.toml"),
    ),
    (
        "etcd-data-loss-revision-reused.toml",
        include_str!("../library/etcd-data-loss-revision-reused.toml"),
    ),
    (
        "etcd-data-loss-token-change.toml",
        include_str!("../library/etcd-data-loss-token-change.toml"),
    ),
    (
        "etcd-failover.toml",
        include_str!("../library/etcd-failover.toml"),
    ),
    (
        "etcd-failover-dead-first-member.toml",
        include_str!("../library/etcd-failover-dead-first-member.toml"),
    ),
    (
        "etcd-lease-lost.toml",
        include_str!("../library/etcd-lease-lost.toml"),
    ),
    (
        "etcd-partition-registration-backoff.toml",
        include_str!("../library/etcd-partition-registration-backoff.toml"),
    ),
    (
        "etcd-watch-hang-data-loss.toml",
        include_str!("../library/etcd-watch-hang-data-loss.toml"),
    ),
    (
        "load-routing.toml",
        include_str!("../library/load-routing.toml"),
    ),
    (
        "many-instances.toml",
        include_str!("../library/many-instances.toml"),
    ),
    (
        "master-etcd-partition.toml",
        include_str!("../library/master-etcd-partition.toml"),
    ),
    (
        "master-etcd-refused.toml",
        include_str!("../library/master-etcd-refused.toml"),
    ),
    (
        "master-etcd-lost-watch-lines.toml",
        include_str!("../library/master-etcd-lost-watch-lines.toml"),
    ),
    (
        "master-restart.toml",
        include_str!("../library/master-restart.toml"),
    ),
    (
        "master-unreachable.toml",
        include_str!("../library/master-unreachable.toml"),
    ),
    (
        "metrics-counter-reset.toml",
        include_str!("../library/metrics-counter-reset.toml"),
    ),
    (
        "vllm-sleep-wake.toml",
        include_str!("../library/vllm-sleep-wake.toml"),
    ),
    (
        "metrics-garbage.toml",
        include_str!("../library/metrics-garbage.toml"),
    ),
    (
        "metrics-truncated-slow.toml",
        include_str!("../library/metrics-truncated-slow.toml"),
    ),
    (
        "partition-long.toml",
        include_str!("../library/partition-long.toml"),
    ),
    (
        "partition-short.toml",
        include_str!("../library/partition-short.toml"),
    ),
    ("sigkill.toml", include_str!("../library/sigkill.toml")),
    ("sigterm.toml", include_str!("../library/sigterm.toml")),
    (
        "slow-vllm-start.toml",
        include_str!("../library/slow-vllm-start.toml"),
    ),
    (
        "startup-gate-backoff-after-vllm-restart.toml",
        include_str!("../library/startup-gate-backoff-after-vllm-restart.toml"),
    ),
    (
        "lease-given-up-is-revoked.toml",
        include_str!("../library/lease-given-up-is-revoked.toml"),
    ),
    (
        "startup-gate-vllm-link-cut.toml",
        include_str!("../library/startup-gate-vllm-link-cut.toml"),
    ),
    (
        "token-mismatch.toml",
        include_str!("../library/token-mismatch.toml"),
    ),
    (
        "token-rotation.toml",
        include_str!("../library/token-rotation.toml"),
    ),
    ("vllm-dies.toml", include_str!("../library/vllm-dies.toml")),
    (
        "vllm-health-hang.toml",
        include_str!("../library/vllm-health-hang.toml"),
    ),
    (
        "vllm-recovers.toml",
        include_str!("../library/vllm-recovers.toml"),
    ),
    (
        "master-failover.toml",
        include_str!("../library/master-failover.toml"),
    ),
    (
        "master-paused.toml",
        include_str!("../library/master-paused.toml"),
    ),
    (
        "sidecar-paused-within-lease.toml",
        include_str!("../library/sidecar-paused-within-lease.toml"),
    ),
    (
        "sidecar-paused-past-lease.toml",
        include_str!("../library/sidecar-paused-past-lease.toml"),
    ),
    (
        "sidecar-throttled.toml",
        include_str!("../library/sidecar-throttled.toml"),
    ),
    (
        "vllm-paused.toml",
        include_str!("../library/vllm-paused.toml"),
    ),
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
    let mut out = Vec::new();
    for a in args {
        let path = std::path::Path::new(a);
        if path.is_file() {
            let text = std::fs::read_to_string(path).map_err(|e| SpecError {
                file: a.clone(),
                line: None,
                message: format!("cannot read: {e}"),
            })?;
            let scenario = Scenario::parse(a, &text)?;
            out.push(Loaded {
                file: a.clone(),
                scenario,
            });
            continue;
        }
        let name = a.trim_start_matches("library/").trim_end_matches(".toml");
        match all.iter().find(|l| l.scenario.name == name) {
            Some(l) => out.push(l.clone()),
            None => {
                return Err(SpecError {
                    file: a.clone(),
                    line: None,
                    message:
                        "no such file, and no built-in scenario of that name (see `scenarios list`)"
                            .to_string(),
                })
            }
        }
    }
    Ok(out)
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
