//! The requests a core has accepted and not yet ended, in a slab: a request is reached
//! through its [`Handle`] (its id and its slot), which its timers and its place in a
//! queue keep; a slot is reused once its request ended.
//!
//! Why not a map by id: a flight carries its own generator (a few hundred bytes), which
//! a tree moves at every insert and remove; and a simulator runs thousands of cores,
//! each with a request or two in flight. The inter-token gaps' buffers are kept for the
//! next requests too.

use super::{Flight, RequestId};

/// A request in flight: its id (what callers know it by) and its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Handle {
    pub id: RequestId,
    slot: u32,
}

#[derive(Default)]
pub(super) struct Flights {
    slots: Vec<Option<Flight>>,
    free: Vec<u32>,
    /// Inter-token gap buffers of ended requests, cleared.
    spare: Vec<Vec<f64>>,
}

impl Flights {
    /// The handle the next [`Flights::insert`] will give request `id` (a request waits
    /// in a queue by its handle, decided before it is kept).
    pub fn next_handle(&self, id: RequestId) -> Handle {
        let slot = match self.free.last() {
            Some(slot) => *slot,
            None => u32::try_from(self.slots.len()).unwrap_or(u32::MAX),
        };
        Handle { id, slot }
    }

    /// Keep `flight` at `h` (from [`Flights::next_handle`], nothing inserted since).
    pub fn insert(&mut self, h: Handle, flight: Flight) {
        if self.free.last() == Some(&h.slot) {
            self.free.pop();
        } else if h.slot as usize == self.slots.len() {
            self.slots.push(None);
        }
        if let Some(s) = self.slots.get_mut(h.slot as usize) {
            *s = Some(flight);
        }
    }

    pub fn get_mut(&mut self, h: Handle) -> Option<&mut Flight> {
        self.slots
            .get_mut(h.slot as usize)?
            .as_mut()
            .filter(|f| f.id == h.id)
    }

    pub fn remove(&mut self, h: Handle) -> Option<Flight> {
        let slot = self.slots.get_mut(h.slot as usize)?;
        if slot.as_ref().is_none_or(|f| f.id != h.id) {
            return None;
        }
        self.free.push(h.slot);
        slot.take()
    }

    /// The ids in flight, in id order.
    pub fn ids(&self) -> Vec<RequestId> {
        let mut ids: Vec<RequestId> = self.slots.iter().flatten().map(|f| f.id).collect();
        ids.sort();
        ids
    }

    /// Forget every request (their gap buffers are kept).
    pub fn clear(&mut self) {
        let ended: Vec<Flight> = self.slots.drain(..).flatten().collect();
        for f in ended {
            self.give_back(f.itls);
        }
        self.free.clear();
    }

    /// An empty buffer for a request's inter-token gaps.
    pub fn gap_buffer(&mut self) -> Vec<f64> {
        self.spare.pop().unwrap_or_default()
    }

    /// A gap buffer no longer needed.
    pub fn give_back(&mut self, mut itls: Vec<f64>) {
        // A handful is all a core ever has in flight at once.
        if self.spare.len() < 8 {
            itls.clear();
            self.spare.push(itls);
        }
    }
}
