//! The data: keys with MVCC metadata, a bounded history of events, leases, the revision.
//!
//! Why one struct behind one lock: etcd serializes every write through raft, so a
//! revision is a total order; doing every write and its watch notification under one
//! mutex gives the same order for free (watchers never see revisions out of order).
//! Past revisions are reconstructed by undoing history events, so `range` at a revision
//! and `watch` from a revision work as far back as the history reaches; beyond that the
//! answer is etcd's "compacted" error, exactly as after a real compaction.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::codec::{is_zero, ser_b64, ser_i64};
use crate::error::EtcdError;

/// A fresh etcd 3.4's bbolt file, the part of it in use, and its page size.
const FRESH_DB_SIZE: i64 = 20480;
const FRESH_DB_IN_USE: i64 = 16384;
const PAGE: i64 = 4096;

/// etcd's largest lease TTL (`MaxLeaseTTL`).
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

/// One key as etcd stores and writes it (`mvccpb.KeyValue`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KeyValue {
    #[serde(serialize_with = "ser_b64", skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<u8>,
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub create_revision: i64,
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub mod_revision: i64,
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub version: i64,
    #[serde(serialize_with = "ser_b64", skip_serializing_if = "Vec::is_empty")]
    pub value: Vec<u8>,
    #[serde(serialize_with = "ser_i64", skip_serializing_if = "is_zero")]
    pub lease: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// A change at one revision. `prev` is always kept (watchers may ask for it, and past
/// revisions are rebuilt from it). Both are shared, not copied: a version of a key is
/// held once, by the store while it is current and by the events that name it, so the
/// history costs only the versions that are no longer current.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: EventKind,
    /// For a delete: only the key and the deleting revision, as etcd writes it.
    pub kv: Arc<KeyValue>,
    pub prev: Option<Arc<KeyValue>>,
}

impl Event {
    pub fn revision(&self) -> i64 {
        self.kv.mod_revision
    }
}

/// What a key and value cost in memory: their bytes (the metadata is a constant).
fn kv_bytes(kv: &KeyValue) -> usize {
    kv.key.len() + kv.value.len()
}

/// A lease: granted TTL, deadline (time since the core's start), attached keys.
#[derive(Clone, Debug)]
pub struct Lease {
    pub id: i64,
    pub ttl: i64,
    pub expires: Duration,
    pub keys: BTreeSet<Vec<u8>>,
}

impl Lease {
    /// Remaining whole seconds, as etcd truncates them.
    pub fn remaining_secs(&self, now: Duration) -> i64 {
        self.expires.saturating_sub(now).as_secs() as i64
    }
}

type KeyBounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// A key interval as etcd reads `key`/`range_end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRange {
    pub key: Vec<u8>,
    pub end: Vec<u8>,
}

impl KeyRange {
    pub fn new(key: Vec<u8>, end: Vec<u8>) -> Self {
        KeyRange { key, end }
    }

    pub fn contains(&self, k: &[u8]) -> bool {
        if self.end.is_empty() {
            k == self.key.as_slice()
        } else if self.end == [0] {
            k >= self.key.as_slice()
        } else {
            k >= self.key.as_slice() && k < self.end.as_slice()
        }
    }

    fn bounds(&self) -> Option<KeyBounds<'_>> {
        if self.end.is_empty() {
            Some((
                Bound::Included(&self.key[..]),
                Bound::Included(&self.key[..]),
            ))
        } else if self.end == [0] {
            Some((Bound::Included(&self.key[..]), Bound::Unbounded))
        } else if self.end <= self.key {
            None
        } else {
            Some((
                Bound::Included(&self.key[..]),
                Bound::Excluded(&self.end[..]),
            ))
        }
    }
}

/// The whole state of the fake etcd.
pub struct Store {
    pub rev: i64,
    /// History holds every event at revisions >= this (0: everything).
    pub compact_rev: i64,
    kvs: BTreeMap<Vec<u8>, Arc<KeyValue>>,
    /// Bytes of the current keys and values (kept as they change).
    live_bytes: usize,
    /// Bytes of the keys and values the history holds that are no longer current.
    history_bytes: usize,
    /// History is trimmed, oldest revision first, past this many such bytes.
    history_bytes_cap: usize,
    /// Writes to `kvs` so far (puts, deletes, losses; never reset): see [`Store::kv_writes`].
    kv_writes: u64,
    history: VecDeque<Arc<Event>>,
    history_cap: usize,
    pub leases: BTreeMap<i64, Lease>,
    expiry: BinaryHeap<Reverse<(Duration, i64)>>,
    next_lease: i64,
    member_id: u64,
    pub min_lease_ttl: i64,
}

/// A closed revision and its events: what watchers must be told (see `data::Data`).
#[must_use = "watchers must be told about a committed revision"]
pub struct Committed {
    pub rev: i64,
    pub events: Vec<Arc<Event>>,
}

/// Writes gathered for one revision; committed (or dropped if empty) as a unit.
#[derive(Default)]
pub struct Batch {
    pub events: Vec<Event>,
}

impl Store {
    /// `epoch_ms`: the wall clock now, in milliseconds since the Unix epoch; auto lease
    /// IDs start from it, as etcd's do.
    pub fn new(history_cap: usize, min_lease_ttl: i64, member_id: u64, epoch_ms: u64) -> Self {
        Store {
            rev: 1,
            compact_rev: 0,
            kvs: BTreeMap::new(),
            live_bytes: 0,
            history_bytes: 0,
            history_bytes_cap: usize::MAX,
            kv_writes: 0,
            history: VecDeque::new(),
            history_cap: history_cap.max(1),
            leases: BTreeMap::new(),
            expiry: BinaryHeap::new(),
            next_lease: lease_id_base(member_id, epoch_ms),
            member_id,
            min_lease_ttl,
        }
    }

    pub fn get(&self, key: &[u8]) -> Option<&KeyValue> {
        self.kvs.get(key).map(|kv| &**kv)
    }

    /// Bound the bytes of superseded versions the history keeps (see
    /// [`Store::retained_bytes`]).
    pub fn set_history_bytes_cap(&mut self, cap: usize) {
        self.history_bytes_cap = cap;
    }

    /// Bytes of keys and values held: the current ones plus the superseded versions
    /// the history keeps (each version counted once however many events name it).
    pub fn retained_bytes(&self) -> usize {
        self.live_bytes + self.history_bytes
    }

    /// Bytes of the superseded versions the history keeps (at most the history
    /// bytes cap once a revision is closed).
    pub fn history_bytes(&self) -> usize {
        self.history_bytes
    }

    /// How many times the keys and values were written (puts, deletes, data losses):
    /// the same count twice means every key and value is as it was (unlike the
    /// revision, which a data loss may set back).
    pub fn kv_writes(&self) -> u64 {
        self.kv_writes
    }

    /// Bytes of keys and values stored now (what the database size grows with).
    pub fn data_bytes(&self) -> usize {
        self.live_bytes
    }

    /// The database size `status` reports (and the quota reads): a fresh etcd 3.4's
    /// bbolt file, grown by a 4 KiB page per 4 KiB of stored keys and values.
    pub fn db_size(&self) -> i64 {
        FRESH_DB_SIZE + self.db_pages() * PAGE
    }

    /// The part of the database `status` reports in use.
    pub fn db_size_in_use(&self) -> i64 {
        FRESH_DB_IN_USE + self.db_pages() * PAGE
    }

    fn db_pages(&self) -> i64 {
        self.live_bytes.div_ceil(PAGE as usize) as i64
    }

    pub fn iter(&self) -> impl Iterator<Item = &KeyValue> {
        self.kvs.values().map(|kv| &**kv)
    }

    /// The keys that start with `prefix` now, in key order, read in place.
    pub fn iter_prefix<'a>(&'a self, prefix: &'a [u8]) -> impl Iterator<Item = &'a KeyValue> {
        let from = (Bound::Included(prefix), Bound::Unbounded);
        self.kvs
            .range::<[u8], _>(from)
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(_, kv)| &**kv)
    }

    /// Keys of `range` at revision `at` (0: now), in key order.
    pub fn range_at(&self, range: &KeyRange, at: i64) -> Result<Vec<KeyValue>, EtcdError> {
        if at > self.rev {
            return Err(EtcdError::future_rev());
        }
        if at > 0 && at < self.compact_rev {
            return Err(EtcdError::compacted());
        }
        let Some(bounds) = range.bounds() else {
            return Ok(Vec::new());
        };
        if at <= 0 || at == self.rev {
            return Ok(self
                .kvs
                .range::<[u8], _>(bounds)
                .map(|(_, v)| KeyValue::clone(v))
                .collect());
        }
        let mut view: BTreeMap<Vec<u8>, Arc<KeyValue>> = self
            .kvs
            .range::<[u8], _>(bounds)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for ev in self.history.iter().rev() {
            if ev.revision() <= at {
                break;
            }
            if !range.contains(&ev.kv.key) {
                continue;
            }
            match &ev.prev {
                Some(prev) => view.insert(prev.key.clone(), prev.clone()),
                None => view.remove(&ev.kv.key),
            };
        }
        Ok(view.into_values().map(|kv| KeyValue::clone(&kv)).collect())
    }

    /// Put at the revision being built; answers the previous value.
    pub fn put(
        &mut self,
        batch: &mut Batch,
        key: &[u8],
        value: Vec<u8>,
        lease: i64,
    ) -> Option<KeyValue> {
        let rev = self.rev + 1;
        let prev = self.kvs.get(key).cloned();
        let kv = Arc::new(KeyValue {
            key: key.to_vec(),
            create_revision: prev.as_ref().map_or(rev, |p| p.create_revision),
            mod_revision: rev,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            value,
            lease,
        });
        let old_lease = prev.as_ref().map_or(0, |p| p.lease);
        if old_lease != lease {
            if let Some(l) = self.leases.get_mut(&old_lease) {
                l.keys.remove(key);
            }
        }
        if lease != 0 {
            if let Some(l) = self.leases.get_mut(&lease) {
                l.keys.insert(key.to_vec());
            }
        }
        self.kv_writes += 1;
        self.live_bytes += kv_bytes(&kv);
        if let Some(p) = &prev {
            self.live_bytes -= kv_bytes(p);
            // Superseded, but the history holds it (this event's `prev`).
            self.history_bytes += kv_bytes(p);
        }
        self.kvs.insert(key.to_vec(), kv.clone());
        batch.events.push(Event {
            kind: EventKind::Put,
            kv,
            prev: prev.clone(),
        });
        prev.map(|p| KeyValue::clone(&p))
    }

    /// Delete every key of `range` at the revision being built; answers the deleted keys.
    pub fn delete(&mut self, batch: &mut Batch, range: &KeyRange) -> Vec<KeyValue> {
        let Some(bounds) = range.bounds() else {
            return Vec::new();
        };
        let keys: Vec<Vec<u8>> = self
            .kvs
            .range::<[u8], _>(bounds)
            .map(|(k, _)| k.clone())
            .collect();
        let rev = self.rev + 1;
        let mut gone = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(prev) = self.kvs.remove(&k) {
                self.kv_writes += 1;
                self.live_bytes -= kv_bytes(&prev);
                self.history_bytes += kv_bytes(&prev);
                if let Some(l) = self.leases.get_mut(&prev.lease) {
                    l.keys.remove(&k);
                }
                batch.events.push(Event {
                    kind: EventKind::Delete,
                    kv: Arc::new(KeyValue {
                        key: k,
                        mod_revision: rev,
                        ..KeyValue::default()
                    }),
                    prev: Some(prev.clone()),
                });
                gone.push(KeyValue::clone(&prev));
            }
        }
        gone
    }

    /// Close the revision: bump it if anything changed and record history. Answers the
    /// revision and its events for the watchers, if anything changed.
    pub fn close_revision(&mut self, batch: Batch) -> Option<Committed> {
        if batch.events.is_empty() {
            return None;
        }
        self.rev += 1;
        let events: Vec<Arc<Event>> = batch.events.into_iter().map(Arc::new).collect();
        self.history.extend(events.iter().cloned());
        self.trim_history();
        Some(Committed {
            rev: self.rev,
            events,
        })
    }

    /// Past either cap (events, superseded bytes), drop the oldest revisions, as an
    /// auto-compaction would.
    fn trim_history(&mut self) {
        while self.history.len() > self.history_cap || self.history_bytes > self.history_bytes_cap {
            let Some(oldest) = self.history.front().map(|e| e.revision()) else {
                break;
            };
            self.drop_history_before(oldest + 1);
            self.compact_rev = oldest + 1;
        }
        if self.history.capacity() > 2 * self.history.len() + 64 {
            self.history.shrink_to_fit();
        }
    }

    /// Drop the events before `rev`; the superseded versions they held go with them.
    fn drop_history_before(&mut self, rev: i64) {
        while self.history.front().is_some_and(|e| e.revision() < rev) {
            if let Some(e) = self.history.pop_front() {
                if let Some(p) = &e.prev {
                    self.history_bytes = self.history_bytes.saturating_sub(kv_bytes(p));
                }
            }
        }
    }

    /// The last `n` events of the history, oldest first (`None`: it holds fewer).
    pub fn last_events(&self, n: usize) -> Option<impl Iterator<Item = &Arc<Event>>> {
        let start = self.history.len().checked_sub(n)?;
        Some(self.history.range(start..))
    }

    /// The revision of the event before the last `n` of the history (`None`: there is none).
    pub fn revision_before_last(&self, n: usize) -> Option<i64> {
        let i = self.history.len().checked_sub(n)?.checked_sub(1)?;
        self.history.get(i).map(|e| e.revision())
    }

    /// Events at revisions >= `from`, oldest first.
    pub fn history_from(&self, from: i64) -> impl Iterator<Item = &Arc<Event>> {
        let skip = self.history.partition_point(|e| e.revision() < from);
        self.history.iter().skip(skip)
    }

    /// Drop history before `rev` (etcd compaction). Errors as etcd does.
    pub fn compact(&mut self, rev: i64) -> Result<(), EtcdError> {
        if rev > self.rev {
            return Err(EtcdError::future_rev());
        }
        if rev <= self.compact_rev {
            return Err(EtcdError::compacted());
        }
        self.drop_history_before(rev);
        self.compact_rev = rev;
        Ok(())
    }

    /// Grant a lease (`id` 0: pick one). TTLs below the minimum are raised to it.
    pub fn grant(&mut self, id: i64, ttl: i64, now: Duration) -> Result<(i64, i64), EtcdError> {
        if ttl > MAX_LEASE_TTL {
            return Err(EtcdError::lease_ttl_too_large());
        }
        let ttl = ttl.max(self.min_lease_ttl);
        let id = if id == 0 {
            loop {
                self.next_lease = self.next_lease.wrapping_add(1);
                if self.next_lease > 0 && !self.leases.contains_key(&self.next_lease) {
                    break self.next_lease;
                }
            }
        } else if self.leases.contains_key(&id) {
            return Err(EtcdError::lease_exists());
        } else {
            id
        };
        let expires = deadline(now, ttl);
        self.leases.insert(
            id,
            Lease {
                id,
                ttl,
                expires,
                keys: BTreeSet::new(),
            },
        );
        self.expiry.push(Reverse((expires, id)));
        Ok((id, ttl))
    }

    /// Refresh a lease; answers its granted TTL, or None if it does not exist.
    pub fn keepalive(&mut self, id: i64, now: Duration) -> Option<i64> {
        let lease = self.leases.get_mut(&id)?;
        lease.expires = deadline(now, lease.ttl);
        let (expires, ttl) = (lease.expires, lease.ttl);
        self.expiry.push(Reverse((expires, id)));
        // Lazily dropped entries accumulate with keepalives; rebuild when it pays.
        if self.expiry.len() > 4 * self.leases.len() + 1024 {
            self.rebuild_expiry();
        }
        Some(ttl)
    }

    fn rebuild_expiry(&mut self) {
        self.expiry = self
            .leases
            .values()
            .map(|l| Reverse((l.expires, l.id)))
            .collect();
    }

    /// Revoke a lease and delete its keys in one revision. None if it does not exist.
    pub fn revoke_lease(&mut self, id: i64) -> Option<(Lease, Option<Committed>)> {
        let lease = self.leases.remove(&id)?;
        let mut batch = Batch::default();
        for k in &lease.keys {
            let r = KeyRange::new(k.clone(), Vec::new());
            self.delete(&mut batch, &r);
        }
        let committed = self.close_revision(batch);
        Some((lease, committed))
    }

    /// Revoke every lease whose deadline passed by `now`; answers them in order.
    pub fn expire_leases(&mut self, now: Duration) -> Vec<(Lease, Option<Committed>)> {
        let mut due = Vec::new();
        while let Some(Reverse((at, id))) = self.expiry.peek().copied() {
            if at > now {
                break;
            }
            self.expiry.pop();
            let live = self.leases.get(&id).is_some_and(|l| l.expires <= now);
            if live {
                if let Some(gone) = self.revoke_lease(id) {
                    due.push(gone);
                }
            }
        }
        due
    }

    /// The earliest deadline of a live lease (stale queue entries left by keepalives
    /// are dropped on the way).
    pub fn next_deadline(&mut self) -> Option<Duration> {
        while let Some(Reverse((at, id))) = self.expiry.peek().copied() {
            if self.leases.get(&id).is_some_and(|l| l.expires == at) {
                return Some(at);
            }
            self.expiry.pop();
        }
        None
    }

    /// Leases sorted by deadline, as etcd lists them.
    pub fn leases_by_expiry(&self) -> Vec<&Lease> {
        let mut v: Vec<&Lease> = self.leases.values().collect();
        v.sort_by_key(|l| (l.expires, l.id));
        v
    }

    /// Forget everything, as an etcd restarted without its data dir.
    pub fn lose_data(&mut self, reset_revision: bool, epoch_ms: u64) {
        self.kv_writes += 1;
        self.kvs.clear();
        self.history.clear();
        self.live_bytes = 0;
        self.history_bytes = 0;
        self.leases.clear();
        self.expiry.clear();
        // A restarted etcd seeds its ID generator from the clock again, so a lease granted
        // after the loss never takes the ID of one granted before it: a client still
        // keeping an old lease alive must hear that it is gone, not refresh someone else's.
        self.next_lease = lease_id_base(self.member_id, epoch_ms).max(self.next_lease);
        if reset_revision {
            self.rev = 1;
            self.compact_rev = 0;
        } else {
            self.compact_rev = self.rev;
        }
    }
}

/// `now + ttl` seconds, saturating far in the future instead of overflowing.
fn deadline(now: Duration, ttl: i64) -> Duration {
    now.saturating_add(Duration::from_secs(ttl.max(0) as u64))
}

/// etcd's ID generator puts the member ID's low 16 bits on top and a millisecond
/// timestamp below, so auto lease IDs look like `7587890012345678901`.
fn lease_id_base(member_id: u64, epoch_ms: u64) -> i64 {
    let ms = epoch_ms & 0xff_ffff_ffff;
    let id = ((member_id & 0xffff) << 48) | (ms << 8);
    (id & (i64::MAX as u64)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMBER: u64 = 10276657743932975437;
    const EPOCH_MS: u64 = 1_764_590_000_000;

    fn r(k: &str, e: &str) -> KeyRange {
        KeyRange::new(k.as_bytes().to_vec(), e.as_bytes().to_vec())
    }

    #[test]
    fn ranges_and_overlaps() {
        assert!(r("a", "").contains(b"a"));
        assert!(!r("a", "").contains(b"ab"));
        assert!(r("a", "b").contains(b"ab"));
        assert!(KeyRange::new(b"a".to_vec(), vec![0]).contains(b"zzz"));
        assert!(r("b", "a").bounds().is_none());
    }

    #[test]
    fn leases_granted_after_data_loss_never_reuse_an_old_id() {
        let mut s = Store::new(100, 2, MEMBER, EPOCH_MS);
        let now = Duration::from_secs(1_000);
        let old: Vec<i64> = (0..3)
            .map(|_| s.grant(0, 5, now).map(|(id, _)| id).unwrap())
            .collect();
        s.lose_data(true, EPOCH_MS);
        for _ in 0..3 {
            let (id, _) = s.grant(0, 5, now).unwrap();
            assert!(!old.contains(&id), "lease {id} reused after data loss");
        }
        for id in old {
            assert_eq!(s.keepalive(id, now), None);
        }
    }

    #[test]
    fn every_write_is_counted_and_nothing_else() {
        let mut s = Store::new(100, 2, MEMBER, EPOCH_MS);
        let now = Duration::from_secs(1_000);
        let (lease, _) = s.grant(0, 5, now).unwrap();
        assert_eq!(s.kv_writes(), 0, "a lease is no key");
        let mut b = Batch::default();
        s.put(&mut b, b"k", b"1".to_vec(), lease);
        let _ = s.close_revision(b);
        assert_eq!(s.kv_writes(), 1);
        let _ = s.keepalive(lease, now);
        let _ = s.get(b"k");
        let mut b = Batch::default();
        assert!(s.delete(&mut b, &r("x", "")).is_empty());
        assert_eq!(s.kv_writes(), 1, "reads, keepalives, deletes of nothing");
        s.delete(&mut b, &r("k", ""));
        let _ = s.close_revision(b);
        assert_eq!(s.kv_writes(), 2);
        s.lose_data(true, EPOCH_MS);
        assert_eq!(s.kv_writes(), 3, "a loss, even of nothing, and never back");
    }

    #[test]
    fn past_revisions_are_rebuilt_from_history() {
        let mut s = Store::new(100, 2, MEMBER, EPOCH_MS);
        let mut b = Batch::default();
        s.put(&mut b, b"k", b"1".to_vec(), 0);
        let _ = s.close_revision(b);
        let mut b = Batch::default();
        s.put(&mut b, b"k", b"2".to_vec(), 0);
        let _ = s.close_revision(b);
        let mut b = Batch::default();
        s.delete(&mut b, &r("k", ""));
        let _ = s.close_revision(b);
        assert_eq!(s.rev, 4);
        let at = |rev| {
            s.range_at(&r("k", ""), rev)
                .unwrap()
                .first()
                .map(|kv| kv.value.clone())
        };
        assert_eq!(at(2), Some(b"1".to_vec()));
        assert_eq!(at(3), Some(b"2".to_vec()));
        assert_eq!(at(4), None);
        assert_eq!(at(1), None);
        assert!(s.range_at(&r("k", ""), 5).is_err());
    }

    #[test]
    fn history_cap_compacts() {
        let mut s = Store::new(2, 2, MEMBER, EPOCH_MS);
        for i in 0..5u8 {
            let mut b = Batch::default();
            s.put(&mut b, b"k", vec![i], 0);
            let _ = s.close_revision(b);
        }
        assert_eq!(s.rev, 6);
        assert_eq!(s.compact_rev, 5);
        assert!(s.range_at(&r("k", ""), 4).is_err());
        assert_eq!(s.range_at(&r("k", ""), 5).unwrap()[0].value, vec![3]);
    }

    #[test]
    fn revoke_deletes_keys_in_one_revision() {
        let now = Duration::from_secs(1_000);
        let mut s = Store::new(100, 2, MEMBER, EPOCH_MS);
        let (id, ttl) = s.grant(0, 1, now).unwrap();
        assert_eq!(ttl, 2);
        let mut b = Batch::default();
        s.put(&mut b, b"a", vec![], id);
        s.put(&mut b, b"b", vec![], id);
        let _ = s.close_revision(b);
        assert_eq!(s.rev, 2);
        assert!(s.expire_leases(now + Duration::from_secs(1)).is_empty());
        let gone = s.expire_leases(now + Duration::from_secs(3));
        assert_eq!(gone.len(), 1);
        assert_eq!(s.rev, 3);
        assert_eq!(s.iter().count(), 0);
    }
}
