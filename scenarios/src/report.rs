//! The report a person reads after a run: a directory per scenario with the resolved
//! scenario and seed, `events.jsonl`, `verdicts.json`, and `timeline.html` — an inline SVG
//! with one lane per instance (master state, etcd key, heartbeats) and the faults shaded,
//! readable at a glance. Plus JUnit XML for CI.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::observe::{ObservedState, Sample};
use crate::spec::Scenario;
use crate::timeline::Timeline;
use crate::verdict::{ActionRecord, Episode, Recovery, Verdict, VerdictKind};

/// How a scenario run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Every verdict passed.
    Passed,
    /// At least one verdict failed (or the cluster could not be set up).
    Failed,
    /// Not run (its reason in [`Outcome::skip_reason`]).
    Skipped,
}

crate::capability::named!(Status {
    Passed => "passed",
    Failed => "failed",
    Skipped => "skipped",
});

/// One instance's start-up: when its key was first seen in etcd, from t = 0 (the
/// cluster ready, its sidecar spawned); `None`: never during the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Startup {
    /// The instance's name.
    pub instance: String,
    /// When its key was first seen in etcd (ms since t = 0).
    pub registered_ms: Option<u64>,
}

impl Startup {
    /// Each instance's start-up, read from the samples.
    pub fn from_samples(names: &[String], samples: &[Sample]) -> Vec<Startup> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| Startup {
                instance: n.clone(),
                registered_ms: samples
                    .iter()
                    .find(|s| s.instances.get(i).is_some_and(|o| o.etcd.is_some()))
                    .map(|s| s.t_ms),
            })
            .collect()
    }
}

/// The result of one scenario run.
#[derive(Debug, Serialize)]
pub struct Outcome {
    /// The scenario's name.
    pub name: String,
    /// Where the scenario came from: a path, or `library/<name>.toml`.
    pub file: String,
    /// The seed the run used (the scenario's, or `--seed`).
    pub seed: u64,
    /// How the run ended.
    pub status: Status,
    /// Why it was not run, when skipped.
    pub skip_reason: Option<String>,
    /// Wall time the run took, in ms.
    pub wall_ms: u64,
    /// How long the cluster took to start before t = 0 (real mode; 0 in virtual time).
    pub setup_ms: u64,
    /// When each instance was first registered in etcd (its sidecar's start-up time).
    pub startups: Vec<Startup>,
    /// Capabilities the run needed and the sidecar's profile lacks: what they guard was
    /// skipped (the whole scenario, or steps and invariants of it).
    pub lacking: crate::capability::Capabilities,
    /// The topology's instance count.
    pub instances: usize,
    /// What etcd ran: `simulated`, `fake`, `real`, `real 3-member cluster` or `external`.
    pub etcd: String,
    /// Every verdict: steps' awaits, failed actions, then the invariants.
    pub verdicts: Vec<Verdict>,
    /// Each fault's time to recover: until the whole cluster was routable again.
    pub recoveries: Vec<Recovery>,
    /// Each instance's recovery from each disturbance, judged against its bound
    /// (`recovers_within_bound`): the per-instance times explore's summary reports.
    pub recovery_checks: Vec<crate::recovery::RecoveryCheck>,
    /// Every action as executed.
    pub actions: Vec<ActionRecord>,
    /// The command that re-runs exactly this scenario with this seed.
    pub rerun: String,
    /// Every sample taken, for the timeline (not in `verdicts.json`).
    #[serde(skip)]
    pub samples: Vec<Sample>,
    /// The fault episodes the run had, for the timeline (not in `verdicts.json`).
    #[serde(skip)]
    pub episodes: Vec<Episode>,
}

impl Outcome {
    /// Whether nothing failed (a skipped run counts as passed).
    pub fn passed(&self) -> bool {
        self.status != Status::Failed
    }

    /// The verdicts that failed.
    pub fn failures(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| !v.passed)
    }
}

/// Where a run's reports go unless told: `target/scenario-reports/run-<ms>`.
pub fn default_report_dir() -> PathBuf {
    crate::new_run_dir("target/scenario-reports")
}

/// Write one scenario's report directory.
pub fn write_dir(
    dir: &Path,
    sc: &Scenario,
    outcome: &Outcome,
    timeline: Option<&Timeline>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut resolved = sc.clone();
    resolved.seed = outcome.seed;
    let toml =
        toml::to_string_pretty(&resolved).unwrap_or_else(|e| format!("# cannot render: {e}\n"));
    let (seed, rerun) = (outcome.seed, &outcome.rerun);
    let header = format!("# resolved scenario, seed {seed}\n# re-run: {rerun}\n");
    std::fs::write(dir.join("scenario.toml"), header + &toml)?;
    let json = serde_json::to_string_pretty(outcome).unwrap_or_default();
    std::fs::write(dir.join("verdicts.json"), json)?;
    if let Some(tl) = timeline {
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("events.jsonl"))?);
        tl.write_jsonl(&mut f)?;
    }
    std::fs::write(dir.join("timeline.html"), html(sc, outcome))?;
    Ok(())
}

/// Text escaped for HTML and XML.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The HTML page with the SVG timeline.
pub fn html(sc: &Scenario, o: &Outcome) -> String {
    let names = sc.instance_names();
    let end = o.samples.last().map(|s| s.t_ms).unwrap_or(1).max(1);
    let (left, width, lane, top) = (70.0, 1000.0, 18.0, 30.0);
    let x = |t: u64| left + width * (t as f64 / end as f64);
    let shown = names.len().min(200);
    let faults: Vec<&Episode> = o.episodes.iter().filter(|e| e.is_fault).collect();
    let height = top + lane * shown as f64 + 30.0 + 14.0 * faults.len() as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{height}" font-family="monospace" font-size="11">"#,
        left + width + 20.0
    );
    // Time axis.
    for t in (0..=end).step_by(nice_step(end) as usize) {
        let _ = write!(
            svg,
            r##"<line x1="{0}" y1="{top}" x2="{0}" y2="{1}" stroke="#eee"/><text x="{0}" y="{2}" text-anchor="middle">{3}s</text>"##,
            x(t),
            top + lane * shown as f64,
            top - 8.0,
            t as f64 / 1000.0
        );
    }
    // Faults, shaded over the lanes they touch.
    for (k, e) in faults.iter().enumerate() {
        let (y0, h) = match e.scope {
            crate::verdict::Scope::All => (top, lane * shown as f64),
            crate::verdict::Scope::Instance(i) if i < shown => (top + lane * i as f64, lane),
            _ => continue,
        };
        let x0 = x(e.start_ms);
        let x1 = x(e.end_ms.unwrap_or(end)).max(x0 + 2.0);
        let _ = write!(
            svg,
            r##"<rect x="{x0}" y="{y0}" width="{}" height="{h}" fill="#f6a" fill-opacity="0.25"><title>{}</title></rect>"##,
            x1 - x0,
            esc(&e.label)
        );
        let ly = top + lane * shown as f64 + 24.0 + 14.0 * k as f64;
        let _ = write!(
            svg,
            r##"<rect x="{x0}" y="{}" width="{}" height="8" fill="#f6a"/><text x="{}" y="{ly}">{}</text>"##,
            ly - 8.0,
            x1 - x0,
            x1 + 4.0,
            esc(&e.label)
        );
    }
    // One lane per instance: master state (upper), etcd key (lower), heartbeat ticks.
    for (i, name) in names.iter().take(shown).enumerate() {
        let y = top + lane * i as f64;
        let _ = write!(svg, r#"<text x="4" y="{}">{}</text>"#, y + 12.0, esc(name));
        // The bar being drawn: since when, which (state, registered); heartbeats so far.
        let mut prev: Option<(u64, (Option<ObservedState>, bool), u64)> = None;
        for s in &o.samples {
            let Some(obs) = s.instances.get(i) else {
                continue;
            };
            let cur = (obs.state, obs.etcd.is_some());
            let Some((t0, was, hb)) = prev.as_mut() else {
                prev = Some((s.t_ms, cur, obs.accepted()));
                continue;
            };
            if *was != cur || s.t_ms == end {
                bar(&mut svg, x(*t0), x(s.t_ms), y, lane, *was);
                (*t0, *was) = (s.t_ms, cur);
            }
            if obs.accepted() > *hb {
                let _ = write!(
                    svg,
                    r##"<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#124" stroke-width="1"/>"##,
                    x(s.t_ms),
                    y + 1.0,
                    y + 4.0
                );
            }
            *hb = obs.accepted();
        }
    }
    // Awaits: a mark on the axis.
    for v in o.verdicts.iter().filter(|v| v.kind == VerdictKind::Await) {
        if let Some(t) = v.t_ms {
            let color = if v.passed { "#2a2" } else { "#d00" };
            let _ = write!(
                svg,
                r#"<circle cx="{}" cy="{}" r="4" fill="{color}"><title>{}</title></circle>"#,
                x(t),
                top - 20.0,
                esc(&v.name)
            );
        }
    }
    svg.push_str("</svg>");

    let secs = |t: u64| format!("{:.2}s", t as f64 / 1000.0);
    let row = |v: &Verdict| {
        format!(
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if v.passed { "ok" } else { "bad" },
            if v.passed { "PASS" } else { "FAIL" },
            v.kind,
            esc(&v.name),
            v.t_ms.map(secs).unwrap_or_default(),
            esc(&v.detail)
        )
    };
    let rows: String = o.verdicts.iter().map(row).collect();
    let recovery = |r: &Recovery| {
        format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.fault),
            secs(r.start_ms),
            r.end_ms.map(secs).unwrap_or_else(|| "never".into()),
            r.time_to_recover_ms
                .map(|t| format!("{t} ms"))
                .unwrap_or_else(|| "not recovered".into())
        )
    };
    let rec: String = o.recoveries.iter().map(recovery).collect();
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>{name}</title><style>
body{{font-family:sans-serif;margin:20px}} table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:2px 6px;font-size:13px}}
tr.bad{{background:#fdd}} tr.ok td:first-child{{color:#080}} .legend span{{display:inline-block;width:14px;height:10px;margin:0 4px 0 12px}}
</style></head><body>
<h1>{name}: {status}</h1><p>{desc}</p><p>seed {seed} · etcd {etcd} · {n} instance(s) · wall {wall:.1}s · re-run: <code>{rerun}</code></p>
<p>cluster set-up {setup:.2}s before t = 0 · {startup}</p>
<p class="legend">master state:<span style="background:#3b3"></span>ACTIVE<span style="background:#f90"></span>LEASE_LOST<span style="background:#d22"></span>SUSPECT<span style="background:#ccc"></span>absent
 · lower stripe: etcd key<span style="background:#36c"></span>present · ticks: accepted heartbeats · pink: faults</p>
{svg}
<h2>Verdicts</h2><table><tr><th></th><th>kind</th><th>what</th><th>time</th><th>detail</th></tr>{rows}</table>
<h2>Faults and time to recover</h2><table><tr><th>fault</th><th>start</th><th>end</th><th>time to recover</th></tr>{rec}</table>
</body></html>"#,
        name = esc(&o.name),
        status = o.status,
        desc = esc(&sc.description),
        seed = o.seed,
        etcd = esc(&o.etcd),
        n = o.instances,
        wall = o.wall_ms as f64 / 1000.0,
        setup = o.setup_ms as f64 / 1000.0,
        startup = startup_line(&o.startups),
        rerun = esc(&o.rerun),
    )
}

fn bar(
    svg: &mut String,
    x0: f64,
    x1: f64,
    y: f64,
    lane: f64,
    (st, reg): (Option<ObservedState>, bool),
) {
    let color = match st {
        Some(ObservedState::Active) => "#3b3",
        Some(ObservedState::LeaseLost) => "#f90",
        Some(ObservedState::Suspect) => "#d22",
        None => "#ccc",
    };
    let w = (x1 - x0).max(0.5);
    let _ = write!(
        svg,
        r#"<rect x="{x0}" y="{}" width="{w}" height="{}" fill="{color}"/>"#,
        y + 4.0,
        lane * 0.45
    );
    if reg {
        let _ = write!(
            svg,
            r##"<rect x="{x0}" y="{}" width="{w}" height="{}" fill="#36c"/>"##,
            y + 4.0 + lane * 0.5,
            lane * 0.25
        );
    }
}

/// The instances' start-up times in one line: median and slowest, and how many never
/// registered.
fn startup_line(startups: &[Startup]) -> String {
    let mut t: Vec<u64> = startups.iter().filter_map(|s| s.registered_ms).collect();
    t.sort_unstable();
    let never = startups.len() - t.len();
    let secs = |ms: u64| ms as f64 / 1000.0;
    let mut line = match (t.get(t.len() / 2), t.last()) {
        (Some(m), Some(x)) => format!(
            "first registered after {:.2}s (median), {:.2}s (slowest)",
            secs(*m),
            secs(*x)
        ),
        _ => "no instance registered".to_string(),
    };
    if never > 0 && !t.is_empty() {
        line.push_str(&format!(", {never} never"));
    }
    line
}

fn nice_step(end_ms: u64) -> u64 {
    [500, 1000, 2000, 5000, 10_000, 30_000, 60_000]
        .into_iter()
        .find(|s| end_ms / s <= 20)
        .unwrap_or(120_000)
}

/// JUnit XML for a set of outcomes.
pub fn junit(outcomes: &[Outcome]) -> String {
    let count = |status| outcomes.iter().filter(|o| o.status == status).count();
    let (failures, skipped) = (count(Status::Failed), count(Status::Skipped));
    let total: f64 = outcomes.iter().map(|o| o.wall_ms as f64 / 1000.0).sum();
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"scenarios\" tests=\"{}\" failures=\"{failures}\" skipped=\"{skipped}\" time=\"{total:.3}\">\n",
        outcomes.len()
    );
    for o in outcomes {
        let _ = write!(
            s,
            "  <testcase classname=\"scenarios\" name=\"{}\" time=\"{:.3}\">",
            esc(&o.name),
            o.wall_ms as f64 / 1000.0
        );
        match o.status {
            Status::Skipped => {
                let reason = esc(o.skip_reason.as_deref().unwrap_or(""));
                let _ = write!(s, "<skipped message=\"{reason}\"/>");
            }
            Status::Failed => {
                let msg: Vec<String> = o
                    .failures()
                    .map(|v| format!("{} {}: {}", v.kind, v.name, v.detail))
                    .collect();
                let _ = write!(
                    s,
                    "<failure message=\"{}\">{}\nre-run: {}</failure>",
                    esc(msg.first().map(String::as_str).unwrap_or("failed")),
                    esc(&msg.join("\n")),
                    esc(&o.rerun)
                );
            }
            _ => {}
        }
        s.push_str("</testcase>\n");
    }
    s.push_str("</testsuite>\n");
    s
}

/// `N scenarios: P passed, F <failed>, K skipped`: how the outcomes ended.
pub fn tally(outcomes: &[Outcome], failed: &str) -> String {
    let count = |st: Status| outcomes.iter().filter(|o| o.status == st).count();
    format!(
        "{} scenarios: {} passed, {} {failed}, {} skipped",
        outcomes.len(),
        count(Status::Passed),
        count(Status::Failed),
        count(Status::Skipped)
    )
}

/// Whether any outcome failed.
pub fn any_failed(outcomes: &[Outcome]) -> bool {
    outcomes.iter().any(|o| o.status == Status::Failed)
}
