//! The conformance suite against sidecars other than the default: our binary behind a
//! wrapper that takes other flag names and declares fewer capabilities, a profile whose
//! sidecar rejects a flag, and (when its directory is named) the upstream reference.

use std::path::{Path, PathBuf};

use scenarios::cli::EtcdArgs;
use scenarios::conform::{conform, report_path, ConformArgs};
use scenarios::real_cluster::EtcdChoice;

fn args(files: &[&str], profile: &Path, report: &Path) -> ConformArgs {
    ConformArgs {
        files: files.iter().map(|f| f.to_string()).collect(),
        profile: Some(profile.display().to_string()),
        sidecar_cmd: None,
        etcd: EtcdArgs {
            etcd: EtcdChoice::Fake,
            etcd_cluster: "1".into(),
        },
        report: Some(report.to_path_buf()),
        jobs: 8,
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("conform-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A row of the report's scenario table: `| name | result | note |`.
fn row<'a>(md: &'a str, scenario: &str) -> &'a str {
    let start = format!("| {scenario} |");
    md.lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("no row for {scenario} in:\n{md}"))
}

/// Our binary as another implementation would be: a wrapper script that takes
/// `--ttl` and `--service` and its keepalive interval from the environment, and a
/// profile that declares neither drain nor our log wording. The drain scenarios are
/// skipped with that reason, the log steps too, and everything else passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_implementation_passes_what_it_declares() {
    let dir = temp_dir("wrapper");
    let bin = scenarios::sidecar::locate_binary().expect("vllm-sidecar binary");
    let wrapper = dir.join("wrapper.sh");
    std::fs::write(
        &wrapper,
        r#"#!/bin/sh
# Our sidecar behind other flag names: --ttl, --service, and $KEEPALIVE.
n=$#
while [ "$n" -gt 0 ]; do
  a=$1; shift; n=$((n - 1))
  case $a in
    --ttl) a=--lease-ttl ;;
    --service) a=--xllm-service-url ;;
  esac
  set -- "$@" "$a"
done
exec "$SIDECAR_BIN" --keepalive-interval "$KEEPALIVE" "$@"
"#,
    )
    .expect("wrapper");
    let profile = dir.join("wrapper.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"wrapped\"\ncommand = [\"sh\", \"{}\"]\nenv = {{ SIDECAR_BIN = \"{}\" }}\ncapabilities = [\"one_incarnation_through_short_blackout\", \"revokes_given_up_lease\", \"openmetrics\"]\n[settings]\nlease_ttl = \"--ttl\"\nmaster_url = \"--service\"\nkeepalive_interval = {{ env = \"KEEPALIVE\" }}\n",
            wrapper.display(),
            bin.display()
        ),
    )
    .expect("profile");
    let report = dir.join("report");
    let code = conform(args(&[], &profile, &report)).await;
    let md = std::fs::read_to_string(report_path(&report)).expect("conformance.md");
    assert_eq!(code, 0, "{md}");
    assert!(
        row(&md, "drain-undrain").contains("skipped: needs drain"),
        "{md}"
    );
    assert!(
        row(&md, "lease-given-up-is-revoked").contains("skipped: needs drain"),
        "{md}"
    );
    assert!(
        row(&md, "etcd-auth-expiry").contains("pass (checks skipped: needs log_wording)"),
        "{md}"
    );
    assert!(row(&md, "partition-short").contains("| pass |"), "{md}");
    assert!(row(&md, "sigkill").contains("| pass |"), "{md}");
    assert!(
        md.contains("| drain | no | drain-undrain, lease-given-up-is-revoked |"),
        "{md}"
    );
    assert!(report.join("conformance.html").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A profile whose sidecar rejects a flag: the report says it exited with code 2 and
/// shows what it said, and conform exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_that_rejects_its_flags_says_so_in_the_report() {
    let dir = temp_dir("broken");
    let bin = scenarios::sidecar::locate_binary().expect("vllm-sidecar binary");
    let profile = dir.join("broken.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"broken\"\ncommand = [\"{}\"]\n[settings]\nlease_ttl = \"--lease-time\"\n",
            bin.display()
        ),
    )
    .expect("profile");
    let report = dir.join("report");
    let code = conform(args(&["happy-path"], &profile, &report)).await;
    let md = std::fs::read_to_string(report_path(&report)).expect("conformance.md");
    assert_eq!(code, 1, "{md}");
    let r = row(&md, "happy-path");
    assert!(
        r.contains("**FAIL**") && r.contains("exited with code 2"),
        "{md}"
    );
    let failures = md.split("## Failures").nth(1).unwrap_or_default();
    assert!(
        failures.contains("re-run: `cargo run -p scenarios -- conform --profile"),
        "{md}"
    );
    let events =
        std::fs::read_to_string(report.join("happy-path/verdicts.json")).expect("verdicts");
    assert!(
        events.contains("unexpected argument '--lease-time'"),
        "{events}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The upstream reference sidecar, when `XLLM_REFERENCE_SIDECAR_DIR` names a directory
/// holding its `vllm_sidecar` package: the whole library through its built-in profile.
/// Its verdicts are its own (it is known to fail some contract scenarios); this checks
/// that every scenario ran and was judged, and prints the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_sidecar_when_it_is_there() {
    let Some(dir) = std::env::var_os("XLLM_REFERENCE_SIDECAR_DIR") else {
        eprintln!("skipped: XLLM_REFERENCE_SIDECAR_DIR is not set (a directory holding the vllm_sidecar package)");
        return;
    };
    let tmp = temp_dir("reference");
    let profile = tmp.join("reference.toml");
    let python_path = Path::new(&dir).display().to_string();
    std::fs::write(
        &profile,
        format!("name = \"reference-python\"\ncommand = [\"python3\", \"-m\", \"vllm_sidecar.sidecar\"]\nenv = {{ PYTHONPATH = \"{python_path}\", PYTHONUNBUFFERED = \"1\" }}\n[settings]\nlog_format = false\nmodel = false\n"),
    )
    .expect("profile");
    let report = tmp.join("report");
    let code = conform(args(&[], &profile, &report)).await;
    let md = std::fs::read_to_string(report_path(&report)).expect("conformance.md");
    eprintln!("{md}");
    assert!(matches!(code, 0 | 1), "{md}");
    assert!(md.contains("| happy-path |"), "{md}");
}
