//! `/metrics` of a [`VllmCore`]: the faults decide ([`ScrapePlan::decide`]), the page
//! is written from the core's own snapshot into one reused buffer
//! ([`crate::metrics::page_into`]), frozen or rewritten as the faults say
//! ([`crate::scrape_faults::PageFaults::apply`]).

use std::time::Duration;

use bytes::Bytes;

use super::{Answer, Delivery, MetricsReply, VllmCore};
use crate::scrape_faults::ScrapePlan;

impl VllmCore {
    /// `GET /metrics` at `now`: (status, content type, body, how it goes out). The
    /// body borrows the core's buffer until the next call.
    pub fn metrics(&mut self, now: Duration) -> Answer<MetricsReply<'_>> {
        self.run_until(now);
        if !self.listening {
            return Answer::Refused;
        }
        let faults = &self.faults;
        let plan = ScrapePlan::decide(|want| faults.fire(|f| want(f).then(|| f.clone())));
        let faults = match plan {
            ScrapePlan::Status(status) => {
                self.page.clear();
                self.page.push_str(reason_phrase(status));
                return Answer::Reply(MetricsReply {
                    status,
                    content_type: "text/plain; charset=utf-8",
                    body: self.page.as_bytes(),
                    text: Some(&self.page),
                    rewritten: None,
                    delivery: Delivery::Whole,
                });
            }
            ScrapePlan::Hang => return Answer::Hang,
            ScrapePlan::Page(faults) => faults,
        };
        let content_type = self.content_type();
        let rewrites =
            faults.garbage.is_some() || faults.huge.is_some() || faults.truncate.is_some();
        let (body, text, rewritten): (&[u8], _, _) = if faults.stale || rewrites {
            let page = if faults.stale {
                match &self.stale {
                    Some(frozen) => frozen.clone(),
                    None => {
                        let b = Bytes::from(self.render(now, faults.nonfinite).to_owned());
                        self.stale = Some(b.clone());
                        b
                    }
                }
            } else {
                self.stale = None;
                Bytes::from(self.render(now, faults.nonfinite).to_owned())
            };
            self.faulted = faults.apply(page, &mut self.fault_rng);
            (&self.faulted, None, Some(self.faulted.clone()))
        } else {
            self.stale = None;
            let page = self.render(now, faults.nonfinite);
            (page.as_bytes(), Some(page), None)
        };
        let delivery = match (faults.truncate, faults.slow) {
            (Some((_, true)), _) => Delivery::ResetAfterBody,
            (None, Some(bps)) => Delivery::Trickle {
                bytes_per_sec: bps.max(1),
            },
            _ => Delivery::Whole,
        };
        Answer::Reply(MetricsReply {
            status: 200,
            content_type,
            body,
            text,
            rewritten,
            delivery,
        })
    }

    /// The page at `now` into the core's buffer: gauges and overrides brought up to
    /// date in the kept snapshot, nothing copied.
    fn render(&mut self, now: Duration, nonfinite: bool) -> &str {
        for (view, lane) in self.snap.engines.iter_mut().zip(&self.lanes) {
            let s = &lane.sched;
            view.running = s.running() as f64;
            view.waiting = s.waiting() as f64;
            view.kv = (s.kv_used() as f64 / view.kv_capacity.max(1) as f64).min(1.0);
        }
        self.snap.overrides.clear();
        for (name, wave, since) in &self.overrides {
            let v = wave.value_at(now.saturating_sub(*since));
            self.snap.overrides.push((name.clone(), v));
        }
        let cpu = self.cpu_seconds(now);
        if let Some(rt) = &mut self.snap.runtime {
            rt.process.cpu_secs = cpu;
        }
        self.snap.nonfinite = nonfinite;
        crate::metrics::page_kept(&self.snap, &mut self.page, self.page_memo.as_deref_mut())
    }
}

impl VllmCore {
    /// Render pages into `buf` from now on; answers the buffer used so far. A simulator
    /// of thousands of cores lends each one, for its scrape, one buffer that stays warm
    /// in the cache, instead of every core keeping a page-sized buffer of its own.
    pub fn lend_page_buffer(&mut self, buf: String) -> String {
        std::mem::replace(&mut self.page, buf)
    }

    /// Keep the last compact page and its numbers: a scrape whose numbers did not change
    /// since (no request moved the histograms or gauges) copies it instead of writing
    /// it again; the same bytes. Costs a page of memory per core: for a simulator whose
    /// cores are scraped more often than their load changes.
    pub fn keep_last_page(&mut self) {
        self.page_memo.get_or_insert_with(Box::default);
    }

    fn content_type(&self) -> &'static str {
        crate::metrics::content_type(self.cfg.dialect)
    }
}

/// What axum's `StatusCode::canonical_reason` says, as the shell answers.
fn reason_phrase(status: u16) -> &'static str {
    axum::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("error")
}
