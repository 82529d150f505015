//! The label names of one label block, for the duplicate-name check.
//!
//! Real lines carry a handful of labels, so the first [`SMALL`] names are compared
//! pairwise in a fixed array: no allocation and no hashing on the common path. Past
//! that the names move into a hash set, so a hostile line with a million labels costs a
//! million inserts rather than half a trillion comparisons.

use std::collections::HashSet;
use std::hash::{Hash, Hasher};

use super::sample::unescape;

/// Names compared pairwise before switching to a hash set.
pub(crate) const SMALL: usize = 8;

/// A label name as written: bare, or the inside of a quoted name.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Name<'a> {
    raw: &'a str,
    /// Holds a backslash: compare the unescaped text.
    escaped: bool,
}

impl<'a> Name<'a> {
    pub(crate) fn new(raw: &'a str, escaped: bool) -> Self {
        Name { raw, escaped }
    }
}

impl PartialEq for Name<'_> {
    /// Same name once unescaped, as the label iterator yields it (`"a"` is `a`; in
    /// lenient mode `"\q"` and `"\\q"` are both `\q`).
    fn eq(&self, other: &Self) -> bool {
        if self.escaped || other.escaped {
            unescape(self.raw) == unescape(other.raw)
        } else {
            self.raw == other.raw
        }
    }
}

impl Eq for Name<'_> {}

impl Hash for Name<'_> {
    /// Hashes the unescaped text, so equal names hash alike whatever their spelling.
    fn hash<H: Hasher>(&self, state: &mut H) {
        if self.escaped {
            unescape(self.raw).hash(state)
        } else {
            self.raw.hash(state)
        }
    }
}

/// Names seen so far in one label block.
#[derive(Debug, Default)]
pub(crate) struct NameSet<'a> {
    small: [Name<'a>; SMALL],
    len: usize,
    big: Option<HashSet<Name<'a>>>,
}

impl<'a> NameSet<'a> {
    /// Adds `name`; `false` when it was already there.
    #[inline]
    pub(crate) fn insert(&mut self, name: Name<'a>) -> bool {
        if let Some(big) = &mut self.big {
            return big.insert(name);
        }
        if self.small.iter().take(self.len).any(|n| *n == name) {
            return false;
        }
        if let Some(slot) = self.small.get_mut(self.len) {
            *slot = name;
            self.len += 1;
            return true;
        }
        self.spill(name)
    }

    /// The array is full: move to a hash set (names in it are distinct, and so is `name`).
    #[cold]
    fn spill(&mut self, name: Name<'a>) -> bool {
        let mut big = HashSet::with_capacity(4 * SMALL);
        big.extend(self.small);
        big.insert(name);
        self.big = Some(big);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_repeat_at_every_position_and_size() {
        for n in [1usize, 2, SMALL - 1, SMALL, SMALL + 1, 3 * SMALL, 1000] {
            let names: Vec<String> = (0..n).map(|i| format!("l{i}")).collect();
            for repeat in 0..n {
                let mut set = NameSet::default();
                for (i, s) in names.iter().enumerate() {
                    assert!(set.insert(Name::new(s, false)), "n {n}: l{i} is new");
                }
                let again = &names[repeat];
                assert!(!set.insert(Name::new(again, false)), "n {n}: {again} again");
                assert!(set.insert(Name::new("fresh", false)), "n {n}");
            }
        }
    }

    #[test]
    fn escaped_names_compare_unescaped() {
        for size in [0usize, SMALL + 2] {
            let fillers: Vec<String> = (0..size).map(|i| format!("f{i}")).collect();
            let mut set = NameSet::default();
            for f in &fillers {
                assert!(set.insert(Name::new(f, false)));
            }
            assert!(set.insert(Name::new(r"a\q", true)));
            assert!(!set.insert(Name::new(r"a\\q", true)), "size {size}");
            assert!(set.insert(Name::new(r#"b\"c"#, true)));
            assert!(!set.insert(Name::new(r#"b\"c"#, true)), "size {size}");
            assert!(set.insert(Name::new("plain", false)));
            assert!(!set.insert(Name::new("plain", true)), "size {size}");
        }
    }
}
