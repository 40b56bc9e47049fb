//! An ordered set of node ids kept as a bitmap: the engine's by-level
//! indexes ([`super::compass`]'s `Index`) and the occupancy's nodes by free
//! GPUs. Every event re-indexes the nodes it touches, a few set moves each,
//! and Place and Compact read the lowest (or highest) members of a level;
//! as B-trees those moves were a large part of a departure's cost at
//! 10,000 nodes (issue #11: `compass bench`'s plugin mixes). Here a move is
//! a bit flipped and a word of the summary kept, and an in-order walk skips
//! 4,096 absent nodes per summary word.

use std::fmt;
use std::ops::Range;

use crate::model::{NodeId, NodeSet};

/// A set of node ids, walked in increasing order. `words[i]` holds nodes
/// `64 i .. 64 i + 64`; bit `i` of the summary is set exactly when
/// `words[i]` is not zero. Grows to the highest node inserted.
#[derive(Clone, Default)]
pub struct NodeBits {
    words: Vec<u64>,
    summary: Vec<u64>,
    len: usize,
}

impl NodeBits {
    pub fn new() -> Self {
        Self::default()
    }

    /// Members.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn contains(&self, n: NodeId) -> bool {
        let (w, b) = split(n);
        self.words.get(w).is_some_and(|x| x & b != 0)
    }

    /// Adds `n`; false if it was there.
    pub fn insert(&mut self, n: NodeId) -> bool {
        let (w, b) = split(n);
        if w >= self.words.len() {
            self.words.resize(w + 1, 0);
            self.summary.resize(self.words.len().div_ceil(64), 0);
        }
        if self.words[w] & b != 0 {
            return false;
        }
        self.words[w] |= b;
        let (s, sb) = split_usize(w);
        self.summary[s] |= sb;
        self.len += 1;
        true
    }

    /// Takes `n` out; false if it was not there.
    pub fn remove(&mut self, n: NodeId) -> bool {
        let (w, b) = split(n);
        match self.words.get_mut(w) {
            Some(x) if *x & b != 0 => {
                *x &= !b;
                if *x == 0 {
                    let (s, sb) = split_usize(w);
                    self.summary[s] &= !sb;
                }
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    /// The lowest member.
    pub fn first(&self) -> Option<NodeId> {
        self.iter().next()
    }

    /// The highest member.
    pub fn last(&self) -> Option<NodeId> {
        let s = self.summary.iter().rposition(|&x| x != 0)?;
        let w = s * 64 + (63 - self.summary[s].leading_zeros() as usize);
        Some((w * 64 + 63 - self.words[w].leading_zeros() as usize) as NodeId)
    }

    /// Takes out and returns the lowest member.
    pub fn pop_first(&mut self) -> Option<NodeId> {
        let n = self.first()?;
        self.remove(n);
        Some(n)
    }

    /// The members in increasing order.
    pub fn iter(&self) -> Iter<'_> {
        self.range(0..NodeId::MAX)
    }

    /// The members in `r`, in increasing order.
    pub fn range(&self, r: Range<NodeId>) -> Iter<'_> {
        let (w, _) = split(r.start);
        let bits = self
            .words
            .get(w)
            .map_or(0, |x| x & (!0u64 << (r.start % 64)));
        Iter {
            set: self,
            mask: None,
            word: w,
            bits,
            end: r.end,
        }
    }

    /// The members that are also in `mask` (all of them without one), in
    /// increasing order, a word at a time: members outside the mask cost a
    /// word each, 64 at a time (issue #11: a placement restricted to half
    /// of 10,000 nodes walked the other half's members one by one).
    pub fn within<'a>(&'a self, mask: Option<&'a NodeSet>) -> Iter<'a> {
        let mut it = self.range(0..NodeId::MAX);
        it.mask = mask;
        it.bits = it.masked(it.word);
        it
    }

    /// The index of the first non-zero word at or after `from`.
    fn next_word(&self, from: usize) -> Option<usize> {
        let (mut s, _) = split_usize(from);
        let mut m = *self.summary.get(s)? & (!0u64 << (from % 64));
        loop {
            if m != 0 {
                return Some(s * 64 + m.trailing_zeros() as usize);
            }
            s += 1;
            m = *self.summary.get(s)?;
        }
    }
}

/// Word index and bit of node `n`.
fn split(n: NodeId) -> (usize, u64) {
    split_usize(n as usize)
}

fn split_usize(i: usize) -> (usize, u64) {
    (i / 64, 1u64 << (i % 64))
}

/// [`NodeBits::iter`], [`NodeBits::range`], [`NodeBits::within`].
pub struct Iter<'a> {
    set: &'a NodeBits,
    /// Only members of this set are given.
    mask: Option<&'a NodeSet>,
    /// The word `bits` comes from; `bits` holds its members (in the mask)
    /// not yet given.
    word: usize,
    bits: u64,
    end: NodeId,
}

impl Iter<'_> {
    /// Word `w` of the set, in the mask.
    fn masked(&self, w: usize) -> u64 {
        self.set.words.get(w).copied().unwrap_or(0) & self.mask.map_or(!0, |m| m.word(w))
    }
}

impl Iterator for Iter<'_> {
    type Item = NodeId;

    fn next(&mut self) -> Option<NodeId> {
        loop {
            if self.bits != 0 {
                let n = self.word * 64 + self.bits.trailing_zeros() as usize;
                self.bits &= self.bits - 1;
                if n >= self.end as usize {
                    // past the end: stop for good
                    self.bits = 0;
                    self.end = 0;
                    return None;
                }
                return Some(n as NodeId);
            }
            if (self.word + 1) * 64 >= self.end as usize {
                return None;
            }
            self.word = self.set.next_word(self.word + 1)?;
            self.bits = self.masked(self.word);
        }
    }
}

impl Extend<NodeId> for NodeBits {
    fn extend<I: IntoIterator<Item = NodeId>>(&mut self, nodes: I) {
        for n in nodes {
            self.insert(n);
        }
    }
}

impl FromIterator<NodeId> for NodeBits {
    fn from_iter<I: IntoIterator<Item = NodeId>>(nodes: I) -> Self {
        let mut s = Self::new();
        s.extend(nodes);
        s
    }
}

/// Equal when the members are (however far each has grown).
impl PartialEq for NodeBits {
    fn eq(&self, other: &Self) -> bool {
        let (short, long) = if self.words.len() <= other.words.len() {
            (self, other)
        } else {
            (other, self)
        };
        self.len == other.len
            && long.words[..short.words.len()] == short.words[..]
            && long.words[short.words.len()..].iter().all(|&x| x == 0)
    }
}

impl Eq for NodeBits {}

impl fmt::Debug for NodeBits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn an_empty_set_has_no_first_last_or_members() {
        let mut s = NodeBits::new();
        assert_eq!((s.first(), s.last(), s.pop_first()), (None, None, None));
        assert_eq!(s.iter().count(), 0);
        assert!(!s.remove(5));
        assert!(s.insert(5) && !s.insert(5));
        assert!(s.remove(5));
        assert_eq!((s.first(), s.last(), s.len()), (None, None, 0));
        // grown, then emptied: equal to one never grown
        assert_eq!(s, NodeBits::new());
    }

    proptest! {
        /// Every operation against a B-tree set of the same ids, across
        /// word and summary-word boundaries (ids up to 9,000: three
        /// summary words).
        #[test]
        fn node_bits_behave_as_an_ordered_set(
            ops in prop::collection::vec((0u8..4, 0u32..9_000, 0u32..9_000), 1..400),
            step in 1u32..7,
        ) {
            let mut s = NodeBits::new();
            let mut b: BTreeSet<NodeId> = BTreeSet::new();
            // A candidate set: every `step`-th node and whole words of it
            // empty, the last words past its end.
            let mask = NodeSet::from_nodes(8_500, (0..8_500).filter(|n| n % step == 0 && (n / 64) % 3 != 1));
            for (op, x, y) in ops {
                match op {
                    0 | 1 => prop_assert_eq!(s.insert(x), b.insert(x)),
                    2 => prop_assert_eq!(s.remove(x), b.remove(&x)),
                    _ => prop_assert_eq!(s.pop_first(), b.pop_first()),
                }
                prop_assert_eq!(s.len(), b.len());
                prop_assert_eq!(s.is_empty(), b.is_empty());
                prop_assert_eq!(s.first(), b.first().copied());
                prop_assert_eq!(s.last(), b.last().copied());
                prop_assert_eq!(s.contains(y), b.contains(&y));
                let (lo, hi) = (x.min(y), x.max(y));
                let r: Vec<NodeId> = s.range(lo..hi).collect();
                let want: Vec<NodeId> = b.range(lo..hi).copied().collect();
                prop_assert_eq!(r, want);
                prop_assert!(s.iter().eq(b.iter().copied()));
                prop_assert!(s.within(None).eq(b.iter().copied()));
                prop_assert!(s.within(Some(&mask)).eq(b.iter().copied().filter(|&n| mask.contains(n))));
                prop_assert_eq!(&s, &b.iter().copied().collect::<NodeBits>());
            }
        }
    }
}
