//! The bounded log of requests received, behind `GET /_mock/requests`.
//!
//! Bounded so that a long soak cannot grow it; tests and scenarios read the newest
//! entries to assert what a client actually sent (e.g. "keepalive every 2 s").

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::locking::lock;

/// One request as the fake saw it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestLog {
    /// Epoch milliseconds when it arrived.
    pub at_ms: u64,
    pub method: String,
    pub path: String,
    /// Status sent (for streams: the status of the stream's headers).
    pub status: u16,
    /// Time until the response headers were sent.
    pub elapsed_ms: u64,
    /// The fault applied to it, if any (`fail`, `latency`, `hang`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

pub struct Journal {
    cap: usize,
    entries: Mutex<VecDeque<RequestLog>>,
}

impl Journal {
    pub fn new(cap: usize) -> Self {
        Journal {
            cap: cap.max(1),
            entries: Mutex::new(VecDeque::new()),
        }
    }

    pub fn push(&self, entry: RequestLog) {
        let mut g = lock(&self.entries);
        if g.len() >= self.cap {
            g.pop_front();
        }
        g.push_back(entry);
    }

    pub fn snapshot(&self) -> Vec<RequestLog> {
        lock(&self.entries).iter().cloned().collect()
    }

    pub fn clear(&self) {
        lock(&self.entries).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest() {
        let j = Journal::new(2);
        for i in 0..3 {
            j.push(RequestLog {
                at_ms: i,
                method: "POST".into(),
                path: "/v3/kv/put".into(),
                status: 200,
                elapsed_ms: 0,
                fault: None,
            });
        }
        let got: Vec<u64> = j.snapshot().iter().map(|r| r.at_ms).collect();
        assert_eq!(got, vec![1, 2]);
    }
}
