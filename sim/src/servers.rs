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
        match id.server() {
            NodeId::Sidecar(i) => self.sidecar.get_mut(i as usize)?.as_mut(),
            NodeId::Vllm(i) => self.vllm.get_mut(i as usize)?.as_mut(),
            NodeId::Etcd => self.etcd.as_mut(),
            NodeId::Master => self.master.as_mut(),
            NodeId::MasterReplica(k) => self.replicas.get_mut(replica(k)?)?.as_mut(),
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
        let place = |s: &mut Option<Slot>| {
            let wake = s.as_ref().and_then(|s| s.wake);
            *s = Some(Slot { node, wake });
        };
        let slot = match id {
            NodeId::Sidecar(i) => grown(&mut self.sidecar, i as usize),
            NodeId::Vllm(i) => grown(&mut self.vllm, i as usize),
            NodeId::Etcd => Some(&mut self.etcd),
            NodeId::Master => Some(&mut self.master),
            NodeId::MasterReplica(k) => match replica(k) {
                Some(at) => grown(&mut self.replicas, at),
                None => None,
            },
            NodeId::EtcdEndpoint(_) => None,
        };
        if let Some(s) = slot {
            place(s);
        }
    }

    /// Take the server at `id` out (its process is gone), with its scheduled timer:
    /// a timer event already queued for it finds no slot, or a fresh one that has
    /// not scheduled it.
    pub fn remove(&mut self, id: NodeId) -> Option<Slot> {
        let slot = match id {
            NodeId::Sidecar(i) => self.sidecar.get_mut(i as usize),
            NodeId::Vllm(i) => self.vllm.get_mut(i as usize),
            NodeId::Etcd => Some(&mut self.etcd),
            NodeId::Master => Some(&mut self.master),
            NodeId::MasterReplica(k) => match replica(k) {
                Some(at) => self.replicas.get_mut(at),
                None => None,
            },
            NodeId::EtcdEndpoint(_) => None,
        };
        slot.and_then(Option::take)
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
        for (at, s) in self.replicas.iter().enumerate() {
            if s.is_some() {
                ids.push(NodeId::master(at + 1));
            }
        }
        ids
    }
}

/// Where master replica `k` ≥ 1 is kept (`None` for 0, which is no replica id).
fn replica(k: u32) -> Option<usize> {
    (k as usize).checked_sub(1)
}

/// Slot `i` of `v`, which grows to hold it.
fn grown(v: &mut Vec<Option<Slot>>, i: usize) -> Option<&mut Option<Slot>> {
    if v.len() <= i {
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
            _: &mut rand::rngs::StdRng,
        ) -> Option<crate::node::Reply> {
            None
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
        fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
            self
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
