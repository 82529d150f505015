//! The runner's command line: bad input is rejected before anything starts, naming the
//! file and line; `list` shows the library.

use std::process::Command;

fn scenarios() -> Command {
    Command::new(env!("CARGO_BIN_EXE_scenarios"))
}

#[test]
fn a_misspelled_field_is_rejected_with_file_and_line() {
    let dir = std::env::temp_dir().join(format!("scenarios-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"bad\"\ndescription = \"d\"\n\n[[step]]\nawait = { all_active = true }\nwithn = \"3s\"\n",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = scenarios()
        .args([
            "run",
            bad.to_str().unwrap(),
            "--report",
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains("bad.toml:6:"), "no file:line in: {err}");
    assert!(err.contains("withn"), "the field is not named in: {err}");
    // Rejected before any cluster started: no report was written.
    assert!(!dir.join("bad").exists());
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unknown_action_and_an_unknown_scenario_are_errors() {
    let dir = std::env::temp_dir().join(format!("scenarios-cli2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("act.toml");
    std::fs::write(
        &bad,
        "name = \"x\"\ndescription = \"d\"\n[[step]]\naction = { vllm_explode = \"i0\" }\n",
    )
    .unwrap();
    let out = scenarios()
        .args(["run", bad.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("act.toml:4:") && err.contains("vllm_explode"),
        "{err}"
    );

    let out = scenarios()
        .args(["run", "no-such-scenario"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = scenarios()
        .args(["run", "--jobs", "many"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn list_shows_the_library() {
    let out = scenarios().arg("list").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().count() >= 16, "{text}");
    for name in [
        "happy-path",
        "sigkill",
        "partition-long",
        "many-instances",
        "etcd-cluster3-leader-killed",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
}
