//! The world's server nodes by [`NodeId`], each with the timer the world has scheduled
//! for it.
//!
//! Why not a `BTreeMap<NodeId, _>`: every event looks a server up, often twice, and a
//! fleet has tens of thousands of them; a tree walk per lookup was a tenth of the
//! engine's time. Here a lookup is an index into a vector per kind of node. Walks go in
//! `NodeId` order (sidecars, vLLMs, etcd, master, master replicas), as the tree walked
//! them.

use std::time::Duration;

use crate::node::{NodeId, Server};

/// One server and its scheduled wake-up.
pub(crate) struct Slot {
    pub node: Box<dyn Server>,
    /// The timer event the world has queued for it (a later one supersedes it).
    pub wake: Option<Duration>,
}

/// Servers by id.
#[derive(Default)]
pub(crate) struct Servers {
    sidecar: Vec<Option<Slot>>,
    vllm: Vec<Option<Slot>>,
    etcd: Option<Slot>,
    master: Option<Slot>,
    /// Master replicas `k` ≥ 1, at index `k - 1`.
    replicas: Vec<Option<Slot>>,
}

impl Servers {
    pub fn get(&self, id: NodeId) -> Option<&Slot> {
        match id.server() {
            NodeId::Sidecar(i) => self.sidecar.get(i as usize)?.as_ref(),
            NodeId::Vllm(i) => self.vllm.get(i as usize)?.as_ref(),
            NodeId::Etcd => self.etcd.as_ref(),
            NodeId::Master => self.master.as_ref(),
            NodeId::MasterReplica(k) => self.replicas.get(replica(k)?)?.as_ref(),
            NodeId::EtcdEndpoint(_) => None,
        }
    }

    pub fn get_mut(&mut self, id: NodeId) -> Option<&mut Slot> {
        self.place(id.server(), false)?.as_mut()
    }

    /// Where the server `id` is kept (an etcd endpoint is no place of its own); with
    /// `grow`, the table grows to hold it.
    fn place(&mut self, id: NodeId, grow: bool) -> Option<&mut Option<Slot>> {
        match id {
            NodeId::Sidecar(i) => at(&mut self.sidecar, i as usize, grow),
            NodeId::Vllm(i) => at(&mut self.vllm, i as usize, grow),
            NodeId::Etcd => Some(&mut self.etcd),
            NodeId::Master => Some(&mut self.master),
            NodeId::MasterReplica(k) => at(&mut self.replicas, replica(k)?, grow),
            NodeId::EtcdEndpoint(_) => None,
        }
    }

    /// The server itself.
    pub fn node_mut(&mut self, id: NodeId) -> Option<&mut Box<dyn Server>> {
        self.get_mut(id).map(|s| &mut s.node)
    }

    pub fn contains(&self, id: NodeId) -> bool {
        self.get(id).is_some()
    }

    /// Put `node` at `id`. A server it replaces leaves its scheduled timer to it (the
    /// timer event is already queued).
    pub fn insert(&mut self, id: NodeId, node: Box<dyn Server>) {
        if let Some(s) = self.place(id, true) {
            let wake = s.as_ref().and_then(|s| s.wake);
            *s = Some(Slot { node, wake });
        }
    }

    /// Take the server at `id` out (its process is gone), with its scheduled timer:
    /// a timer event already queued for it finds no slot, or a fresh one that has
    /// not scheduled it.
    pub fn remove(&mut self, id: NodeId) -> Option<Slot> {
        self.place(id, false)?.take()
    }

    /// Every server's id, in `NodeId` order.
    pub fn ids(&self) -> Vec<NodeId> {
        let indexed = |v: &[Option<Slot>], make: fn(u32) -> NodeId| -> Vec<NodeId> {
            v.iter()
                .enumerate()
                .filter(|(_, s)| s.is_some())
                .map(|(i, _)| make(u32::try_from(i).unwrap_or(u32::MAX)))
                .collect()
        };
        let mut ids = indexed(&self.sidecar, NodeId::Sidecar);
        ids.extend(indexed(&self.vllm, NodeId::Vllm));
        ids.extend(self.etcd.as_ref().map(|_| NodeId::Etcd));
        ids.extend(self.master.as_ref().map(|_| NodeId::Master));
        ids.extend(indexed(&self.replicas, |k| NodeId::master(k as usize + 1)));
        ids
    }
}

/// Where master replica `k` ≥ 1 is kept (`None` for 0, which is no replica id).
fn replica(k: u32) -> Option<usize> {
    (k as usize).checked_sub(1)
}

/// Slot `i` of `v`; with `grow`, `v` grows to hold it.
fn at(v: &mut Vec<Option<Slot>>, i: usize, grow: bool) -> Option<&mut Option<Slot>> {
    if grow && v.len() <= i {
        v.resize_with(i + 1, || None);
    }
    v.get_mut(i)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;

    impl Server for Nothing {
        fn serve(
            &mut self,
            _: Duration,
            _: NodeId,
            _: &crate::node::Request,
        ) -> Option<crate::node::Reply> {
            None
        }
    }

    #[test]
    fn ids_walk_in_node_order_and_lookups_find_what_was_put() {
        let mut s = Servers::default();
        for id in [
            NodeId::Master,
            NodeId::Vllm(3),
            NodeId::Etcd,
            NodeId::Sidecar(1),
            NodeId::Vllm(0),
            NodeId::master(2),
        ] {
            s.insert(id, Box::new(Nothing));
        }
        let mut sorted = s.ids();
        sorted.sort();
        assert_eq!(s.ids(), sorted);
        assert_eq!(s.ids().len(), 6);
        assert!(s.contains(NodeId::MasterReplica(2)));
        assert!(!s.contains(NodeId::MasterReplica(1)));
        assert!(s.remove(NodeId::master(2)).is_some());
        assert!(!s.contains(NodeId::MasterReplica(2)));
        assert!(s.contains(NodeId::Vllm(3)));
        assert!(!s.contains(NodeId::Vllm(2)));
        assert!(!s.contains(NodeId::Sidecar(0)));
        assert!(s.get(NodeId::Vllm(9)).is_none());
    }
}
