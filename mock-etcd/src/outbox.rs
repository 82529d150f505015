//! The bounded backlog of one watch stream: [`Outbox`], the [`WatchSink`] the HTTP
//! shell gives the core.
//!
//! Why a module of its own: this is where a slow watcher's memory is held, so its
//! bound lives here. A stream queues at most `watch_backlog` responses and at most
//! `watch_backlog_bytes` bytes of them (a single larger response is queued only into
//! an empty backlog, so that a catch-up from history always gets through). Past
//! either bound the stream is marked overflowed with the first revision it missed,
//! its watchers are dropped, and nothing more is queued. The bytes queued are counted
//! per stream and in a total shared by every stream; when the stream ends its
//! backlog is dropped with its receiver and its bytes leave the total.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, Notify};

use crate::watchers::WatchSink;

/// The sending side of one HTTP stream, shared by its watchers.
#[derive(Clone)]
pub struct Outbox {
    pub tx: mpsc::Sender<String>,
    /// Set when the backlog overflowed; holds the first revision not delivered.
    pub overflow: Arc<Overflow>,
    queued: Arc<AtomicUsize>,
    total: Arc<AtomicUsize>,
    max_bytes: usize,
}

#[derive(Default)]
pub struct Overflow {
    pub hit: AtomicBool,
    pub first_missed: AtomicI64,
    /// Watchers the registry dropped when the backlog overflowed.
    pub ids: std::sync::Mutex<Vec<i64>>,
    pub wake: Notify,
}

impl Outbox {
    /// An outbox of at most `lines` responses and `max_bytes` bytes; `total` counts
    /// the bytes queued by every stream.
    pub fn new(
        lines: usize,
        max_bytes: usize,
        total: Arc<AtomicUsize>,
    ) -> (Self, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel(lines.max(1));
        let out = Outbox {
            tx,
            overflow: Arc::new(Overflow::default()),
            queued: Arc::new(AtomicUsize::new(0)),
            total,
            max_bytes,
        };
        (out, rx)
    }

    /// A queued line of `len` bytes was taken off the backlog.
    pub fn took(&self, len: usize) {
        self.queued.fetch_sub(len, Ordering::AcqRel);
        self.total.fetch_sub(len, Ordering::AcqRel);
    }

    /// The stream ended (its receiver, and with it the backlog, is dropped): its bytes
    /// leave the total.
    pub fn release(&self) {
        let left = self.queued.swap(0, Ordering::AcqRel);
        self.total.fetch_sub(left, Ordering::AcqRel);
    }

    /// Bytes queued on this stream now.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }

    fn mark_overflow(&self, rev: i64) {
        self.overflow.first_missed.store(rev, Ordering::Release);
        self.overflow.hit.store(true, Ordering::Release);
        self.overflow.wake.notify_one();
    }
}

impl WatchSink for Outbox {
    fn dropped(&self, id: i64) {
        crate::locking::lock(&self.overflow.ids).push(id);
    }

    /// Queue a line; false (and the stream marked overflowed) if the backlog is full.
    fn send(&self, line: String, rev: i64) -> bool {
        if self.overflow.hit.load(Ordering::Acquire) {
            return false;
        }
        let len = line.len();
        let queued = self.queued();
        if queued > 0 && queued + len > self.max_bytes {
            self.mark_overflow(rev);
            return false;
        }
        match self.tx.try_send(line) {
            Ok(()) => {
                self.queued.fetch_add(len, Ordering::AcqRel);
                self.total.fetch_add(len, Ordering::AcqRel);
                true
            }
            Err(_) => {
                self.mark_overflow(rev);
                false
            }
        }
    }
}
