//! The heartbeat cycle: scrape `/metrics`, map the page, POST the body, and read the
//! master's answer. One cycle at a time, on the heartbeat grid, only while registered
//! and healthy; failures back off, a 409 registers a new incarnation at once.
//!
//! Sleep mode: `/health` answers 200 while vLLM sleeps, so only the page tells
//! (`vllm:engine_sleep_state`, awake 0 on every engine). Such a page is not posted: the
//! lease is revoked as a drain does, and the cycle goes on scraping (posting nothing)
//! until a page says an engine is awake, then the instance registers again with a new
//! incarnation. `--no-sleep-deregister` keeps it registered instead.

use std::time::Duration;

use super::heartbeat::{has_vllm_sample, HeartbeatBody};
use super::io::{Answer, Command, CommandId, Note, RevokeReason};
use super::state::{AfterRevoke, Pending, Registration};
use super::{grid, Core};
use crate::prom::{self, Format, Mode};

/// One page in this many (and the first) also gets the full lenient parse, only to
/// count the lines it skips: the mapping's fast path cannot tell.
pub const AUDIT_EVERY: u64 = 64;

/// How a heartbeat cycle ended.
enum Outcome {
    Delivered,
    Failed,
    /// Nothing sent (no longer registered or healthy): just the next slot.
    Skipped,
}

impl Core {
    /// Start a cycle when due, if registered and healthy; else skip to the next slot.
    pub(super) fn beat_if_due(&mut self, now: Duration) {
        if self.beat.in_flight.is_some() || now < self.beat.due {
            return;
        }
        let incarnation = match self.reg.registered() {
            Some(lease) if self.health.healthy => lease.incarnation.clone(),
            // Asleep: scrape only to learn when it wakes (no incarnation to post for).
            None if self.health.healthy && self.reg == Registration::Asleep => String::new(),
            _ => return self.end_cycle(now, Outcome::Skipped),
        };
        let id = self.issue(Pending::Scrape { incarnation });
        self.beat.in_flight = Some(id);
        self.push(Command::Scrape { id });
    }

    /// A new incarnation: give the master time to see the key before its first
    /// heartbeat, more after 409s in a row.
    pub(super) fn first_beat(&mut self, now: Duration) {
        let interval = self.cfg.heartbeat_interval;
        self.beat_backoff.reset();
        self.beat.due = if std::mem::take(&mut self.beat.after_conflict) {
            now + self
                .conflict_backoff
                .next_delay(&mut self.rng)
                .max(interval)
        } else {
            self.conflict_backoff.reset();
            grid::at_or_after(interval, now + interval / 2)
        };
    }

    pub(super) fn on_scrape(
        &mut self,
        now: Duration,
        id: CommandId,
        incarnation: String,
        answer: Answer,
    ) {
        let body = match answer {
            Answer::ScrapePage { text, openmetrics } => self.map_page(&text, openmetrics),
            Answer::ScrapeFailed { reason, detail } => Err((reason, detail)),
            _ => return,
        };
        if self.beat.in_flight == Some(id) {
            self.beat.in_flight = None;
        }
        let metrics = match body {
            Ok(metrics) => metrics,
            Err((reason, detail)) => {
                self.note(Note::ScrapeFailed { reason, detail });
                return self.end_cycle(now, Outcome::Failed);
            }
        };
        if self.follow_sleep(now, &incarnation) {
            return self.end_cycle(now, Outcome::Skipped);
        }
        // Only for the registration the scrape was for, if it still stands and vLLM is
        // still healthy. An answer handled at or after its lease's certain expiry comes
        // before the lease check that ends it, so that expiry is tested here too.
        let current = self
            .reg
            .registered()
            .filter(|l| now < l.certain_expiry())
            .map(|l| l.incarnation.as_str());
        if current != Some(incarnation.as_str()) || !self.health.healthy {
            return self.end_cycle(now, Outcome::Skipped);
        }
        let body = HeartbeatBody::new(&self.cfg.register_addr, &incarnation, metrics).to_json();
        let post = self.issue(Pending::Post { incarnation });
        self.beat.in_flight = Some(post);
        let target = self.target_for_post();
        self.push(Command::PostHeartbeat {
            id: post,
            body,
            target,
        });
    }

    /// Act on what the page just mapped says of sleep mode; `true` when the page is not
    /// to be posted (asleep, or just woken and registering again).
    fn follow_sleep(&mut self, now: Duration, incarnation: &str) -> bool {
        let asleep = self.mapper.engines_asleep() == Some(true);
        if self.reg == Registration::Asleep {
            if !asleep {
                self.note(Note::EngineAwake);
                self.reg_backoff.reset();
                self.reg = Registration::Unregistered { retry_at: now };
            }
            return true;
        }
        let current = self.reg.registered().map(|l| l.incarnation.as_str());
        if asleep && self.cfg.sleep_deregister && current == Some(incarnation) {
            self.note(Note::EngineAsleep);
            self.deregister(now, RevokeReason::Asleep, AfterRevoke::Asleep);
            return true;
        }
        false
    }

    /// A page's heartbeat metrics, or why the page is unusable.
    fn map_page(
        &mut self,
        text: &str,
        openmetrics: bool,
    ) -> Result<crate::mapping::HeartbeatMetrics, (String, String)> {
        let format = if openmetrics {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        };
        if !has_vllm_sample(text) {
            let detail = "the /metrics page has no vllm: sample (not a vLLM page?)";
            return Err(("no_vllm_sample".into(), detail.into()));
        }
        let audit = self.pages.is_multiple_of(AUDIT_EVERY);
        self.pages += 1;
        if audit {
            match prom::parse(text, format, Mode::Lenient) {
                Ok(page) if page.skipped_lines > 0 => self.note(Note::LinesSkipped {
                    lines: page.skipped_lines,
                }),
                Ok(_) => {}
                Err(e) => return Err(("parse".into(), e.to_string())),
            }
        }
        Ok(self.mapper.observe_text(text, format))
    }

    pub(super) fn on_post(
        &mut self,
        now: Duration,
        id: CommandId,
        incarnation: String,
        answer: Answer,
    ) {
        let (status, error) = match answer {
            Answer::HeartbeatStatus(status) => (Some(status), None),
            Answer::HeartbeatFailed(error) => (None, Some(error)),
            _ => return,
        };
        self.follow_heartbeat(status);
        let (answer, outcome) = match status {
            Some(200) => ("ok", Outcome::Delivered),
            Some(409) => {
                self.replace_after_conflict(&incarnation);
                ("conflict", Outcome::Skipped)
            }
            Some(401) => ("unauthorized", Outcome::Failed),
            Some(_) => ("other", Outcome::Failed),
            None => ("error", Outcome::Failed),
        };
        self.note(Note::Heartbeat {
            answer,
            status,
            error,
        });
        if self.beat.in_flight == Some(id) {
            self.beat.in_flight = None;
            let failed = matches!(outcome, Outcome::Failed);
            self.end_cycle(now, outcome);
            self.follow_post_ended(now, failed);
        }
    }

    /// Schedule the next cycle after one ended.
    fn end_cycle(&mut self, now: Duration, outcome: Outcome) {
        let interval = self.cfg.heartbeat_interval;
        let on_grid = grid::at_or_after(interval, now + interval / 2);
        self.beat.due = match outcome {
            Outcome::Delivered => {
                self.beat_backoff.reset();
                self.conflict_backoff.reset();
                on_grid
            }
            Outcome::Skipped => on_grid,
            Outcome::Failed => {
                now + self
                    .beat_backoff
                    .next_delay(&mut self.rng)
                    .max(interval / 2)
            }
        };
        // A new incarnation registered meanwhile sets its own first slot when it lands.
    }
}
