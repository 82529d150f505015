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

/// Servers by id: a table per kind of node, in `NodeId` order (sidecars, vLLMs, etcd,
/// master, master replicas), each indexed by the id's number (see [`place`]).
#[derive(Default)]
pub(crate) struct Servers {
    tables: [Vec<Option<Slot>>; 5],
}

impl Servers {
    pub fn get(&self, id: NodeId) -> Option<&Slot> {
        let (table, i) = place(id.server())?;
        self.tables.get(table)?.get(i)?.as_ref()
    }

    pub fn get_mut(&mut self, id: NodeId) -> Option<&mut Slot> {
        let (table, i) = place(id.server())?;
        self.tables.get_mut(table)?.get_mut(i)?.as_mut()
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
        let Some((table, i)) = place(id) else {
            return;
        };
        let Some(v) = self.tables.get_mut(table) else {
            return;
        };
        if v.len() <= i {
            v.resize_with(i + 1, || None);
        }
        if let Some(s) = v.get_mut(i) {
            let wake = s.as_ref().and_then(|s| s.wake);
            *s = Some(Slot { node, wake });
        }
    }

    /// Take the server at `id` out (its process is gone), with its scheduled timer:
    /// a timer event already queued for it finds no slot, or a fresh one that has
    /// not scheduled it.
    pub fn remove(&mut self, id: NodeId) -> Option<Slot> {
        let (table, i) = place(id)?;
        self.tables.get_mut(table)?.get_mut(i)?.take()
    }

    /// Every server's id, in `NodeId` order.
    pub fn ids(&self) -> Vec<NodeId> {
        let mut ids = Vec::new();
        for (table, v) in self.tables.iter().enumerate() {
            let kept = v.iter().enumerate().filter(|(_, s)| s.is_some());
            ids.extend(kept.map(|(i, _)| id_at(table, i)));
        }
        ids
    }
}

/// Where the server `id` is kept: its table and its index there (`None` for an etcd
/// endpoint, no place of its own, and for replica 0, which is no replica id).
fn place(id: NodeId) -> Option<(usize, usize)> {
    Some(match id {
        NodeId::Sidecar(i) => (0, i as usize),
        NodeId::Vllm(i) => (1, i as usize),
        NodeId::Etcd => (2, 0),
        NodeId::Master => (3, 0),
        NodeId::MasterReplica(k) => (4, (k as usize).checked_sub(1)?),
        NodeId::EtcdEndpoint(_) => return None,
    })
}

/// The id of the server kept at index `i` of `table` ([`place`]'s inverse).
fn id_at(table: usize, i: usize) -> NodeId {
    let n = u32::try_from(i).unwrap_or(u32::MAX);
    match table {
        0 => NodeId::Sidecar(n),
        1 => NodeId::Vllm(n),
        2 => NodeId::Etcd,
        3 => NodeId::Master,
        _ => NodeId::master(i + 1),
    }
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
