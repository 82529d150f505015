//! The data and its watchers: every closed revision is told to the watchers.
//!
//! Why a module of its own: the store (data and revisions) and the watch registry
//! (who is told) are separate concerns that must change together: every revision is
//! closed and told to the watchers in one step, so watchers see revisions in order.
//! [`Data`] pairs them; the store knows nothing of watchers, the registry nothing of
//! the store's writes.

use std::time::Duration;

use crate::codec::Header;
use crate::config::Config;
use crate::store::{Batch, Committed, Lease, Store};
use crate::watchers::Registry;
/// The data and its watchers. Reads go to the [`Store`] (by deref); every write that
/// may close a revision goes through [`Data`], which tells the watchers.
pub struct Data {
    pub store: Store,
    pub watchers: Registry,
}

impl std::ops::Deref for Data {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

impl std::ops::DerefMut for Data {
    fn deref_mut(&mut self) -> &mut Store {
        &mut self.store
    }
}

impl Data {
    /// `epoch_ms`: the wall clock now (auto lease IDs start from it).
    pub fn new(config: &Config, header: Header, epoch_ms: u64) -> Self {
        let mut store = Store::new(
            config.history_cap,
            config.min_lease_ttl,
            config.member_id,
            epoch_ms,
        );
        store.set_history_bytes_cap(config.history_bytes_cap);
        Data {
            store,
            watchers: Registry::new(header),
        }
    }

    fn tell(&mut self, committed: Option<Committed>) {
        if let Some(c) = committed {
            self.watchers.notify(c.rev, &c.events);
        }
    }

    /// Close the revision of `batch` (if it changed anything) and tell the watchers.
    pub fn commit(&mut self, batch: Batch) {
        let committed = self.store.close_revision(batch);
        self.tell(committed);
    }

    /// Revoke a lease, deleting its keys in one revision. None if it does not exist.
    pub fn revoke(&mut self, id: i64) -> Option<Lease> {
        let (lease, committed) = self.store.revoke_lease(id)?;
        self.tell(committed);
        Some(lease)
    }

    /// Expire every lease whose deadline passed by `now`; answers them.
    pub fn expire_due(&mut self, now: Duration) -> Vec<Lease> {
        let gone = self.store.expire_leases(now);
        let mut leases = Vec::with_capacity(gone.len());
        for (lease, committed) in gone {
            self.tell(committed);
            leases.push(lease);
        }
        leases
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::decode::parse;
    use crate::requests::CreateRequest;
    use crate::watchers::{self, LineSink, Stream, WatchSink};

    /// No server, no socket: a watch on the data alone, its answers in a sink.
    #[test]
    fn a_watch_hears_each_committed_revision_in_order() {
        let config = Config::default();
        let header = Header {
            cluster_id: 1,
            member_id: 2,
            revision: 0,
            raft_term: 2,
        };
        let mut data = Data::new(&config, header, 1_764_590_000_000);
        let sink = Arc::new(LineSink::default());
        let out: Arc<dyn WatchSink> = sink.clone();
        let mut next_id = 0;
        let create: CreateRequest = parse(br#"{"key":"YQ==","range_end":"Yg=="}"#).unwrap();
        let stream = Stream {
            id: 1,
            next_id: &mut next_id,
            out: &out,
        };
        watchers::create(&data.store, &mut data.watchers, stream, create);
        assert!(sink.drain()[0].contains(r#""created":true"#));
        for (key, value) in [(b"a1", b"x"), (b"zz", b"y"), (b"a2", b"z")] {
            let mut batch = Batch::default();
            data.store.put(&mut batch, key, value.to_vec(), 0);
            data.commit(batch);
        }
        let lines = sink.drain();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains(r#""revision":"2""#), "{}", lines[0]);
        assert!(lines[1].contains(r#""revision":"4""#), "{}", lines[1]);
        data.watchers.cancel(data.store.rev, 1, 0, &*out);
        assert!(sink.drain()[0].contains(r#""canceled":true"#));
        assert!(data.watchers.is_empty());
    }
}
