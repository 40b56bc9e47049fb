//! A plain exact `Phi*` by exhaustive search, independent of [`super::exact`]:
//! every packing is described by listing its bins in decreasing order of their
//! largest item, so `Phi*(n) = min over bins B holding the largest remaining
//! item of [B partial] + Phi*(n - B)`, memoised on the remaining counts.
//!
//! Exponential in the number of item sizes present; used as the test oracle
//! for larger cases and as the fallback for inputs outside the model (any
//! capacity `1..=8`; an item larger than the capacity is one partial bin).

use std::collections::HashMap;

use super::InstanceCounts;

pub(super) fn phi_star(counts: &InstanceCounts, capacity: u32) -> u64 {
    let cap = capacity.min(8) as usize;
    let mut n = *counts;
    n[0] = 0;
    // Items that fit no bin each form a partial bin of their own.
    let oversize: u64 = n[(cap + 1)..].iter().sum();
    for c in n[(cap + 1)..].iter_mut() {
        *c = 0;
    }
    if cap == 0 {
        return oversize;
    }
    let mut memo = HashMap::new();
    oversize + solve(&mut n, cap, &mut memo)
}

fn solve(n: &mut InstanceCounts, cap: usize, memo: &mut HashMap<InstanceCounts, u64>) -> u64 {
    let Some(largest) = (1..=cap).rev().find(|&g| n[g] > 0) else {
        return 0;
    };
    if let Some(&v) = memo.get(&*n) {
        return v;
    }
    n[largest] -= 1;
    let mut best = u64::MAX;
    complete_bin(n, cap, largest, cap - largest, memo, &mut best);
    n[largest] += 1;
    memo.insert(*n, best);
    best
}

/// Adds to the open bin (free room `room`) items of size `<= max_size`, in
/// non-increasing order, trying every choice; `best` gets the minimum of
/// `[bin partial] + Phi*(rest)` over all completions.
fn complete_bin(
    n: &mut InstanceCounts,
    cap: usize,
    size_now: usize,
    room: usize,
    memo: &mut HashMap<InstanceCounts, u64>,
    best: &mut u64,
) {
    // Option: close the bin here.
    let cost = u64::from(room > 0) + solve(n, cap, memo);
    *best = (*best).min(cost);
    // Option: add one more item of size s <= size_now (non-increasing order).
    for s in (1..=size_now.min(room)).rev() {
        if n[s] > 0 {
            n[s] -= 1;
            complete_bin(n, cap, s, room - s, memo, best);
            n[s] += 1;
        }
    }
}
