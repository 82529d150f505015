//! `scenarios conform`: the scenario library run in real mode against any sidecar that
//! implements the protocol (a profile, or a command line), and a conformance report
//! that says where it stands: per scenario passed, failed (it violates the contract) or
//! skipped (it lacks a capability, or the machine lacks something), per capability what
//! was skipped for it, and for each failure one sentence and the command that re-runs
//! it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::capability::Capability;
use crate::cli::{said, LibraryArgs};
use crate::profile::{Profile, Program};
use crate::report::{any_failed, tally, Outcome, Status};
use crate::run::{prepare, run_many, RERUN_COMMAND};

/// `scenarios conform`'s arguments: those `run` takes too (without its own).
pub type ConformArgs = LibraryArgs;

/// `scenarios conform`: exit 0 only when every scenario that applies passed; 1 when one
/// failed; 2 on bad input (a profile that does not check, an unknown scenario).
pub async fn conform(args: ConformArgs) -> u8 {
    let Some((list, profile)) = args.load() else {
        return 2;
    };
    let opts = args.options(profile.clone());
    let report = opts.report_dir.clone().unwrap_or_default();
    let Some(opts) = said(prepare(opts, &list)) else {
        return 1;
    };
    let outcomes = run_many(&list, &opts, args.jobs, true).await;
    let profile = profile.unwrap_or_else(|| Profile::ours(None));
    let rerun = rerun_prefix(&args);
    let md = markdown(&profile, &outcomes, &rerun);
    let written = std::fs::create_dir_all(&report)
        .and_then(|_| std::fs::write(report_path(&report), &md))
        .and_then(|_| {
            let page = html(&profile, &outcomes, &rerun);
            std::fs::write(report.join("conformance.html"), page)
        });
    if let Err(e) = written {
        eprintln!("scenarios: cannot write the conformance report: {e}");
    }
    println!("\n{md}");
    println!("report: {}", report_path(&report).display());
    u8::from(any_failed(&outcomes))
}

/// What a failed scenario is in the report: it violated the contract.
const VIOLATED: &str = "failed (contract violated)";

/// The command that re-runs one scenario against the same sidecar.
fn rerun_prefix(args: &ConformArgs) -> String {
    let who = match (&args.profile, &args.sidecar_cmd) {
        (_, Some(line)) => format!(" --sidecar-cmd '{}'", line.replace('\'', "'\\''")),
        (Some(p), None) => format!(" --profile {p}"),
        (None, None) => String::new(),
    };
    format!("{RERUN_COMMAND} conform{who}")
}

/// One scenario's result as the report's first column says it.
fn result(o: &Outcome) -> String {
    match o.status {
        Status::Passed if o.lacking.is_empty() => "pass".into(),
        Status::Passed => format!("pass (checks skipped: needs {})", names(&o.lacking)),
        Status::Failed => "**FAIL**".into(),
        Status::Skipped => format!("skipped: {}", o.skip_reason.clone().unwrap_or_default()),
    }
}

/// The capabilities' names, comma-separated; `none` for none.
fn names<'a>(caps: impl IntoIterator<Item = &'a Capability>) -> String {
    let names: Vec<&str> = caps.into_iter().map(|c| c.as_str()).collect();
    if names.is_empty() {
        return "none".into();
    }
    names.join(", ")
}

/// The first failing verdict, in one sentence (its detail's first line).
fn why_failed(o: &Outcome) -> String {
    let Some(v) = o.failures().next() else {
        return String::new();
    };
    let first = v.detail.lines().next().unwrap_or_default();
    format!("{}: {first}", v.name)
}

/// Each capability: whether the profile declares it (`yes`/`no`), and the scenarios
/// that needed it and lacked it.
fn capability_rows<'a>(
    profile: &Profile,
    outcomes: &'a [Outcome],
) -> Vec<(Capability, &'static str, Vec<&'a str>)> {
    Capability::ALL
        .into_iter()
        .map(|c| {
            let has = profile.capabilities.contains(&c);
            let declared = if has { "yes" } else { "no" };
            let who = outcomes
                .iter()
                .filter(|o| o.lacking.contains(&c))
                .map(|o| o.name.as_str())
                .collect();
            (c, declared, who)
        })
        .collect()
}

/// The conformance report as Markdown.
pub fn markdown(profile: &Profile, outcomes: &[Outcome], rerun: &str) -> String {
    let mut s = String::new();
    let program = match &profile.program {
        Program::OurBinary(_) => "our vllm-sidecar".to_string(),
        Program::Command(w) => format!("`{}`", w.join(" ")),
    };
    let declared = names(&profile.capabilities);
    let _ = writeln!(s, "# Conformance: {}\n", profile.name);
    let _ = writeln!(
        s,
        "Sidecar: {program}. Declared capabilities: {declared}.\n"
    );
    let _ = writeln!(s, "{}.\n", tally(outcomes, VIOLATED));
    let _ = writeln!(s, "| scenario | result | note |\n|---|---|---|");
    for o in outcomes {
        let note = match o.status {
            Status::Failed => why_failed(o).replace('|', "\\|"),
            _ => String::new(),
        };
        let _ = writeln!(s, "| {} | {} | {note} |", o.name, result(o));
    }
    let _ = writeln!(
        s,
        "\n## Capabilities\n\n| capability | declared | scenarios that needed it |\n|---|---|---|"
    );
    for (c, declared, who) in capability_rows(profile, outcomes) {
        let _ = writeln!(s, "| {c} | {declared} | {} |", who.join(", "));
    }
    if any_failed(outcomes) {
        let _ = writeln!(s, "\n## Failures\n");
        for o in outcomes.iter().filter(|o| o.status == Status::Failed) {
            let _ = writeln!(s, "- **{}**: {}", o.name, why_failed(o));
            let _ = writeln!(s, "  re-run: `{rerun} {} --jobs 1`", o.file);
        }
    }
    s
}

/// The report as an HTML page: the same tables, one row per scenario and capability.
pub fn html(profile: &Profile, outcomes: &[Outcome], rerun: &str) -> String {
    let esc = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut rows = String::new();
    for o in outcomes {
        let (class, note) = match o.status {
            Status::Failed => (
                "bad",
                format!(
                    "{}<br><code>{} {} --jobs 1</code>",
                    esc(&why_failed(o)),
                    esc(rerun),
                    esc(&o.file)
                ),
            ),
            Status::Skipped => ("skip", String::new()),
            Status::Passed => ("ok", String::new()),
        };
        let _ = write!(
            rows,
            "<tr class=\"{class}\"><td>{}</td><td>{}</td><td>{note}</td></tr>",
            esc(&o.name),
            esc(&result(o).replace("**", ""))
        );
    }
    let mut caps = String::new();
    for (c, declared, who) in capability_rows(profile, outcomes) {
        let _ = write!(
            caps,
            "<tr><td>{c}</td><td>{declared}</td><td>{}</td></tr>",
            esc(&who.join(", "))
        );
    }
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>conformance: {name}</title><style>
body{{font-family:sans-serif;margin:20px}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px;vertical-align:top}}
tr.bad{{background:#fdd}} tr.skip{{color:#777}} tr.ok td:nth-child(2){{color:#080}}
</style></head><body><h1>Conformance: {name}</h1>
<p>{tally}.</p>
<table><tr><th>scenario</th><th>result</th><th>why it failed, and its re-run</th></tr>{rows}</table>
<h2>Capabilities</h2><table><tr><th>capability</th><th>declared</th><th>scenarios that needed it</th></tr>{caps}</table>
</body></html>
"#,
        name = esc(&profile.name),
        tally = tally(outcomes, VIOLATED),
    )
}

/// Where `conform` writes its report, for tests: `dir/conformance.md`.
pub fn report_path(dir: &Path) -> PathBuf {
    dir.join("conformance.md")
}
