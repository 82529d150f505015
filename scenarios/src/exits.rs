//! Sidecars that exit when nobody asked them to: each is the first failing verdict of
//! its run, naming the exit code (or signal) and the process's last output lines, so a
//! sidecar that rejects its flags or crashes says so instead of surfacing as an await
//! that timed out.
//!
//! An exit is asked for when a stop or kill of that instance (its `SidecarDown`
//! episode) began after it was last seen running and before it was seen exited.

use crate::episode::{Episode, EpisodeKey};
use crate::observe::Sample;
use crate::spec::Scenario;
use crate::verdict::{Verdict, VerdictKind};

/// One failing `exit` verdict per sidecar that exited unasked (the first exit of each
/// life), in instance order.
pub fn unexpected(
    sc: &Scenario,
    samples: &[Sample],
    eps: &[Episode],
    last_words: &[(usize, Vec<String>)],
) -> Vec<Verdict> {
    let names = sc.instance_names();
    let unasked = |(i, words): &(usize, Vec<String>)| {
        let name = names.get(*i)?;
        let (t_ms, code) = first_unasked_exit(*i, samples, eps)?;
        Some(Verdict::failed(
            VerdictKind::Exit,
            format!("{name} sidecar exited"),
            Some(t_ms),
            describe(name, t_ms, code, words),
        ))
    };
    last_words.iter().filter_map(unasked).collect()
}

/// When instance `i`'s sidecar was first seen exited without a stop or kill asked for
/// since it was last seen running, and its exit code.
fn first_unasked_exit(i: usize, samples: &[Sample], eps: &[Episode]) -> Option<(u64, i32)> {
    let mut last_running: Option<u64> = None;
    let mut judged = false;
    for s in samples {
        let o = s.instances.get(i)?;
        if o.sidecar_running {
            last_running = Some(s.t_ms);
            judged = false;
            continue;
        }
        let Some(code) = o.sidecar_exit else { continue };
        if judged {
            continue;
        }
        judged = true;
        let asked = eps.iter().any(|e| {
            matches!(e.key(), EpisodeKey::SidecarDown(_))
                && e.scope.covers(i)
                && e.start_ms <= s.t_ms
                && last_running.is_none_or(|r| e.start_ms >= r)
        });
        if !asked {
            return Some((s.t_ms, code));
        }
    }
    None
}

fn describe(name: &str, t_ms: u64, code: i32, words: &[String]) -> String {
    let how = match code {
        c if c > 128 => format!("was killed by signal {} (exit {c})", c - 128),
        c => format!("exited with code {c}"),
    };
    let mut d = format!(
        "the sidecar of {name} {how} at t={:.2}s, and no stop or kill was asked for",
        t_ms as f64 / 1000.0
    );
    if words.is_empty() {
        d.push_str("; it wrote nothing");
    } else {
        d.push_str(&format!("; its last output:\n{}", words.join("\n")));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::InstanceObs;
    use crate::verdict::{episodes, ActionRecord};
    use std::sync::Arc;

    fn scenario() -> Scenario {
        Scenario::parse("t.toml", "name = \"t\"\ndescription = \"d\"\n").unwrap()
    }

    /// One instance sampled every 100 ms for 3 s: running until 1 s, then exited with
    /// `code`.
    fn samples(code: i32) -> Vec<Sample> {
        (0..30)
            .map(|k| {
                let t_ms = k * 100;
                let running = t_ms < 1000;
                let o = InstanceObs {
                    sidecar_running: running,
                    sidecar_exit: (!running).then_some(code),
                    ..Default::default()
                };
                Sample::new(t_ms, vec![Arc::new(o)].into(), 0, Default::default())
            })
            .collect()
    }

    fn kill_at(t_ms: u64) -> ActionRecord {
        let text =
            "name = \"t\"\ndescription = \"d\"\n[[step]]\naction = { sidecar_kill = \"i0\" }\n";
        let sc = Scenario::parse("t.toml", text).unwrap();
        ActionRecord {
            sidecar_states: Default::default(),
            step: 1,
            t_ms,
            label: "kill".into(),
            action: sc.steps[0].action.clone().unwrap(),
            error: None,
            detail: None,
        }
    }

    #[test]
    fn an_exit_nobody_asked_for_is_named_with_its_code_and_last_words() {
        let sc = scenario();
        let words = vec![(0, vec!["stderr: boom".to_string()])];
        let eps = episodes(&sc, &[], 3000);
        let v = unexpected(&sc, &samples(101), &eps, &words);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].kind, VerdictKind::Exit);
        assert_eq!(v[0].t_ms, Some(1000));
        assert!(
            v[0].detail.contains("exited with code 101"),
            "{}",
            v[0].detail
        );
        assert!(v[0].detail.ends_with("stderr: boom"), "{}", v[0].detail);
        let v = unexpected(&sc, &samples(137), &eps, &words);
        assert!(
            v[0].detail.contains("killed by signal 9"),
            "{}",
            v[0].detail
        );
    }

    #[test]
    fn an_exit_after_a_stop_or_kill_is_not() {
        let sc = scenario();
        let words = vec![(0, Vec::new())];
        let eps = episodes(&sc, &[kill_at(950)], 3000);
        assert!(unexpected(&sc, &samples(137), &eps, &words).is_empty());
        // A kill long before the sidecar last ran does not excuse this exit.
        let eps = episodes(&sc, &[kill_at(100)], 3000);
        assert_eq!(unexpected(&sc, &samples(137), &eps, &words).len(), 1);
    }
}
