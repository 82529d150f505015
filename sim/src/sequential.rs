//! A map from sequentially issued ids to values, for the exchanges under way.
//!
//! Why not a `BTreeMap<u64, _>`: exchange ids are handed out in increasing order and
//! every exchange ends within its caller's timeout, so the live ones are a window of
//! recent ids. A deque over that window finds, inserts and removes in constant time and
//! walks in id order, as the tree did.

use std::collections::VecDeque;

/// Values by id; ids are inserted in increasing order.
#[derive(Debug)]
pub(crate) struct Sequential<T> {
    /// The id of `slots[0]`.
    base: u64,
    /// `None`: removed (or never inserted). The front is always `Some` (or empty).
    slots: VecDeque<Option<T>>,
}

impl<T> Default for Sequential<T> {
    fn default() -> Self {
        Sequential {
            base: 0,
            slots: VecDeque::new(),
        }
    }
}

impl<T> Sequential<T> {
    fn index(&self, id: u64) -> Option<usize> {
        usize::try_from(id.checked_sub(self.base)?).ok()
    }

    /// Insert `value` at `id`, which is above every id inserted so far; an id at or
    /// below one already inserted is ignored (it cannot happen in the world).
    pub fn insert(&mut self, id: u64, value: T) {
        if self.slots.is_empty() {
            self.base = id;
        }
        let Some(i) = self.index(id) else {
            return;
        };
        if i < self.slots.len() {
            return;
        }
        self.slots.resize_with(i, || None);
        self.slots.push_back(Some(value));
    }

    pub fn get(&self, id: u64) -> Option<&T> {
        self.slots.get(self.index(id)?)?.as_ref()
    }

    pub fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        self.slots.get_mut(self.index(id)?)?.as_mut()
    }

    pub fn remove(&mut self, id: u64) -> Option<T> {
        let value = self.slots.get_mut(self.index(id)?)?.take();
        self.trim_front();
        value
    }

    /// Every (id, value), in id order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &T)> {
        let base = self.base;
        self.slots
            .iter()
            .zip(base..)
            .filter_map(|(s, id)| s.as_ref().map(|v| (id, v)))
    }

    /// Keep the values `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for s in self.slots.iter_mut() {
            if s.as_ref().is_some_and(|v| !keep(v)) {
                *s = None;
            }
        }
        self.trim_front();
    }

    /// Drop the removed slots at the front, so that the front is `Some` (or empty).
    fn trim_front(&mut self) {
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_a_map_of_increasing_ids() {
        let mut m = Sequential::default();
        for id in [3u64, 4, 5, 9] {
            m.insert(id, id * 10);
        }
        m.insert(4, 0); // not above the last: ignored
        assert_eq!(m.get(4), Some(&40));
        assert_eq!(m.get(6), None);
        assert_eq!(m.remove(3), Some(30));
        assert_eq!(m.remove(3), None);
        *m.get_mut(5).unwrap() += 1;
        assert_eq!(m.iter().collect::<Vec<_>>(), [(4, &40), (5, &51), (9, &90)]);
        m.retain(|v| *v != 51);
        assert_eq!(m.len(), 2);
        assert_eq!(m.remove(4), Some(40));
        assert_eq!(m.iter().collect::<Vec<_>>(), [(9, &90)]);
        assert_eq!(m.remove(9), Some(90));
        assert_eq!(m.len(), 0);
        m.insert(12, 1);
        assert_eq!(m.get(12), Some(&1));
        assert_eq!(m.get(2), None);
    }
}
