//! The load model in virtual time: a request is admitted (or queued) on the least
//! loaded engine, gets its first token after the prefill and its last after the
//! planned inter-token gaps, then frees its slot for the head of the queue. Each step
//! is a timer; the stats are recorded at the step's time, as the serving flow
//! ([`crate::openai`]) records them when its sleeps end.

use std::cmp::Reverse;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{End, Flight, Handle, Outcome, RequestId, Step, Submitted, VllmCore};
use crate::answer::output_length;
use crate::error::ApiError;
use crate::faults::Fault;
use crate::latency::secs;
use crate::sched::{least_loaded, Decision};
use crate::stats::{FinishReason, Finished};
use crate::validate::{self, Api, Req};

impl VllmCore {
    /// vLLM's request rules: a body to a [`Req`] or vLLM's error (status and message).
    pub fn parse(&self, api: Api, body: &[u8]) -> Result<Req, ApiError> {
        validate::parse(&self.cfg, api, body)
    }

    /// A client sends `req` at `now` (see [`VllmCore::parse`] for a body). The same
    /// steps as the serving shell: startup 503, `completion_fail`, the least loaded
    /// engine, seeded output length, admission (429 when the queue is full),
    /// `completion_hang` and `completion_drop`.
    pub fn submit(&mut self, now: Duration, req: Req) -> Submitted {
        self.run_until(now);
        if !self.listening {
            return Submitted::Refused;
        }
        if self.starting(now) {
            return Submitted::Failed(503);
        }
        self.seq += 1;
        let mut rng =
            StdRng::seed_from_u64(self.cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.seq);
        let armed = self.faults.any(|f| {
            matches!(
                f,
                Fault::CompletionFail { .. } | Fault::CompletionHang | Fault::CompletionDrop { .. }
            )
        });
        let roll: f64 = rng.gen();
        let failing = if armed {
            self.faults.fire(|f| match f {
                Fault::CompletionFail { fraction, status } if roll < *fraction => Some(*status),
                _ => None,
            })
        } else {
            None
        };
        if let Some(status) = failing {
            return Submitted::Failed(status);
        }
        self.place(now, req, rng, armed)
    }

    /// Admit a request that passed the gates on the least loaded engine.
    fn place(&mut self, now: Duration, req: Req, mut rng: StdRng, armed: bool) -> Submitted {
        let loads = self
            .lanes
            .iter()
            .map(|l| l.sched.running() + l.sched.waiting());
        let Some(engine) = least_loaded(loads, self.seq as usize) else {
            return Submitted::Failed(503);
        };
        let (out_tokens, reason) = output_length(&req, self.cfg.natural_output_tokens, &mut rng);
        let need = req.prompt_tokens as u64 + out_tokens as u64;
        let id = RequestId(self.seq);
        let handle = self.flights.next_handle(id);
        let decision = match self.lanes.get_mut(engine) {
            Some(lane) => lane.sched.admit(need, || handle),
            None => return Submitted::Failed(503),
        };
        if decision == Decision::Rejected {
            if let Some(e) = self.snap.engines.get_mut(engine) {
                e.stats.rejected += 1;
            }
            return Submitted::Failed(429);
        }
        let (hang, drop_after) = self.after_admission_faults(armed);
        // The shell draws the completion id and the word offset here: draw them too,
        // so the timings come from the same random stream.
        let _: u128 = rng.gen();
        let _: u16 = rng.gen();
        let flight = Flight {
            id,
            engine,
            req,
            rng,
            out_tokens,
            reason,
            need,
            arrival: now,
            scheduled: now,
            first: now,
            itls: self.flights.gap_buffer(),
            drop_after,
            hang,
        };
        self.flights.insert(handle, flight);
        if decision == Decision::Run {
            self.schedule(handle, now);
        }
        Submitted::Accepted(id)
    }

    /// `completion_hang` (hold the slot, never answer), else `completion_drop` (reset
    /// after so many tokens), as the shell fires them once a request is admitted.
    fn after_admission_faults(&self, armed: bool) -> (bool, Option<u32>) {
        if !armed {
            return (false, None);
        }
        let hang = self
            .faults
            .fire(|f| matches!(f, Fault::CompletionHang).then_some(()))
            .is_some();
        if hang {
            return (true, None);
        }
        let drop_after = self.faults.fire(|f| match f {
            Fault::CompletionDrop { after_tokens } => Some(*after_tokens),
            _ => None,
        });
        (false, drop_after)
    }

    /// Run every step due at or before `now`; answers the requests that ended since
    /// the last call (in the order they ended).
    pub fn advance(&mut self, now: Duration) -> Vec<Outcome> {
        self.run_until(now);
        std::mem::take(&mut self.done)
    }

    /// [`VllmCore::advance`] without giving up the outcome buffer: the requests that
    /// ended, drained (a caller that only counts them allocates nothing).
    pub fn advance_drain(&mut self, now: Duration) -> std::vec::Drain<'_, Outcome> {
        self.run_until(now);
        self.done.drain(..)
    }

    /// When the next step is due (`None`: nothing in flight needs waking).
    pub fn next_event_time(&self) -> Option<Duration> {
        self.timers.peek().map(|Reverse((at, ..))| *at)
    }

    /// (running, waiting, KV tokens held) of engine `i`.
    pub fn engine_load(&self, i: usize) -> Option<(usize, usize, u64)> {
        let s = &self.lanes.get(i)?.sched;
        Some((s.running(), s.waiting(), s.kv_used()))
    }

    pub(super) fn run_until(&mut self, now: Duration) {
        while let Some(Reverse((at, _, id, step))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            match step {
                Step::FirstToken => self.first_token(id, at),
                Step::Done => self.done_at(id, at),
            }
        }
    }

    /// `id` got its slot at `at`: the prefill starts (a hung request holds the slot
    /// and never gets further).
    fn schedule(&mut self, id: Handle, at: Duration) {
        let Some(f) = self.flights.get_mut(id) else {
            return;
        };
        f.scheduled = at;
        if f.hang {
            return;
        }
        let Some(lane) = self.lanes.get(f.engine) else {
            return;
        };
        let prefill =
            lane.latency
                .prefill_time(lane.sched.running(), f.req.prompt_tokens, &mut f.rng);
        self.timer(at + prefill, id, Step::FirstToken);
    }

    /// The first token: TTFT and the prefill are recorded, the decode is planned.
    fn first_token(&mut self, id: Handle, at: Duration) {
        let Some(f) = self.flights.get_mut(id) else {
            return;
        };
        let (Some(lane), Some(view)) = (
            self.lanes.get_mut(f.engine),
            self.snap.engines.get_mut(f.engine),
        ) else {
            return;
        };
        f.first = at;
        let hit = lane.prefix.lookup(f.req.prompt_hash);
        view.stats.record_render(f.req.prompt_tokens, f.req.chat);
        view.stats
            .record_prefill(f.req.prompt_tokens, hit, (at - f.arrival).as_secs_f64());
        let running = lane.sched.running();
        f.itls.clear();
        f.itls
            .extend((1..f.out_tokens).map(|_| lane.latency.inter_token_secs(running, &mut f.rng)));
        let cut = f
            .drop_after
            .filter(|k| *k < f.out_tokens)
            .map(|k| k.saturating_sub(1) as usize);
        let end = match cut {
            Some(k) => at + secs(f.itls.iter().take(k).sum()),
            None => {
                f.drop_after = None;
                at + secs(f.itls.iter().sum())
            }
        };
        self.timer(end, id, Step::Done);
    }

    /// The last token (or the drop): record, free the slot, start who it goes to.
    fn done_at(&mut self, handle: Handle, at: Duration) {
        let id = handle.id;
        let Some(f) = self.flights.remove(handle) else {
            return;
        };
        let Some(view) = self.snap.engines.get_mut(f.engine) else {
            return;
        };
        let end = if f.drop_after.is_some() {
            view.stats.count_success(FinishReason::Abort);
            End::Dropped
        } else {
            view.stats.record_decode(&f.itls);
            let finished = finished_of(&f, at, f.out_tokens);
            view.stats.record_finished(f.reason, &finished);
            End::Finished {
                reason: f.reason,
                output_tokens: f.out_tokens,
            }
        };
        self.done.push(Outcome { id, at, end });
        let mut granted = Vec::new();
        if let Some(lane) = self.lanes.get_mut(f.engine) {
            lane.sched.release(f.need, |_| false, |w| granted.push(w));
        }
        self.flights.give_back(f.itls);
        for g in granted {
            self.schedule(g, at);
        }
    }

    /// Resume every paused lane and schedule what its queue starts.
    pub(crate) fn resume_lanes(&mut self, now: Duration) {
        let mut granted = Vec::new();
        for lane in &mut self.lanes {
            lane.sched.resume(|_| false, |w| granted.push(w));
        }
        for g in granted {
            self.schedule(g, now);
        }
    }

    fn timer(&mut self, at: Duration, id: Handle, step: Step) {
        self.timer_seq += 1;
        self.timers.push(Reverse((at, self.timer_seq, id, step)));
    }
}

/// What the stats record of a request that ended at `end` with `generated` tokens.
fn finished_of(f: &Flight, end: Duration, generated: u32) -> Finished {
    Finished {
        prompt_tokens: f.req.prompt_tokens,
        generation_tokens: generated,
        max_tokens_param: f.req.max_tokens_param,
        max_generation_tokens: f.req.max_tokens,
        n: 1,
        queue: (f.scheduled - f.arrival).as_secs_f64(),
        prefill: (f.first - f.scheduled).as_secs_f64(),
        decode: (end - f.first).as_secs_f64(),
        e2e: (end - f.arrival).as_secs_f64(),
    }
}
