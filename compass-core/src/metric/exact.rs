//! Exact `Phi*` (paper Section 3.2; replaces the heuristic of Appendix C).
//!
//! Nodes ("bins") have capacity `G` in {1, 2, 4, 8}; instances ("items") have
//! sizes `1..=G`. `Phi*` is the minimum number of partial bins (non-empty, not
//! full) over all packings. The full proofs are in `docs/metric.md`; each step
//! below names the lemma it relies on.
//!
//! 1. Reductions that keep `Phi*` unchanged (R1-R3).
//! 2. Closed form when the reduced counts satisfy WCC (eq. 21, Lemma CF).
//! 3. Otherwise: enumerate the O(1) canonical packings of the items of size
//!    at least 3 (Lemma L3), then place the 2-GPU items by a lemma-pruned enumeration
//!    (Lemmas E1, E2, P, M) and the 1-GPU items by an exact greedy (Lemma
//!    F1). At most 2 x 9 x 4 evaluations of O(G) each, whatever the counts.

use super::{total_gpus, wcc_holds, InstanceCounts};

/// Room histogram: `rooms[r]` = number of non-empty bins with `r` free GPUs
/// (`r` in `1..=8`).
type Rooms = [u64; 9];

fn supported(counts: &InstanceCounts, capacity: u32) -> bool {
    matches!(capacity, 1 | 2 | 4 | 8) && counts[(capacity as usize + 1)..].iter().all(|&c| c == 0)
}

/// Exact `Phi*`, or `None` when the input is outside the model.
pub(super) fn phi_star(counts: &InstanceCounts, capacity: u32) -> Option<u64> {
    let reduced = reduce(counts, capacity)?;
    Some(closed_form(&reduced, capacity).unwrap_or_else(|| search(&reduced, capacity)))
}

/// Reductions R1-R3 (each removes only full bins that some optimal packing
/// contains, so `Phi*` is unchanged):
/// - R1: a `G`-GPU instance is a full bin alone.
/// - R2: instances of `G/2` pair into full bins, leaving `n_{G/2} mod 2`.
/// - R3 (`G = 8`): `min(n5, n3)` bins `{5,3}`.
pub(super) fn reduce(counts: &InstanceCounts, capacity: u32) -> Option<InstanceCounts> {
    if !supported(counts, capacity) {
        return None;
    }
    let mut n = *counts;
    n[0] = 0;
    let g = capacity as usize;
    n[g] = 0;
    if g >= 2 {
        n[g / 2] %= 2;
    }
    if g == 8 {
        let m = n[5].min(n[3]);
        n[5] -= m;
        n[3] -= m;
    }
    Some(n)
}

/// Eq. (21): when WCC holds, `Phi* = [T mod G != 0]` (Lemma CF). Returns
/// `None` when WCC fails on the reduced counts.
pub(super) fn closed_form(reduced: &InstanceCounts, capacity: u32) -> Option<u64> {
    wcc_holds(reduced, capacity).then(|| lower_bound(reduced, capacity))
}

/// Any packing with `T mod G != 0` has a partial bin.
fn lower_bound(n: &InstanceCounts, capacity: u32) -> u64 {
    u64::from(!total_gpus(n).is_multiple_of(u64::from(capacity)))
}

/// Exact search on reduced counts (valid whether or not WCC holds).
pub(super) fn search(n: &InstanceCounts, capacity: u32) -> u64 {
    match capacity {
        1 => 0,
        2 => n[1] % 2,
        4 => {
            // Items >= 3 are the 3s, one per bin with one free GPU.
            let mut rooms = [0; 9];
            rooms[1] = n[3];
            place_small(capacity, &rooms, n[2], n[1])
        }
        _ => search_g8(n),
    }
}

/// `G = 8`. After R1-R3: `n8 = 0`, `n4 <= 1`, and `n3 = 0` or `n5 = 0`.
/// Items of size >= 3 share a bin only as `{3,3}` or `{3,4}` (any three of
/// them exceed 8; `{3,5}` is gone; `{4,4}` is gone). By Lemma L3 some optimal
/// packing has at most one bin with exactly one 3 and no 4, so the packing of
/// the items >= 3 is fixed by `p34` (the 4 shares with a 3) and `lone3`.
fn search_g8(n: &InstanceCounts) -> u64 {
    let bound = lower_bound(n, 8);
    let mut best = u64::MAX;
    for p34 in 0..=n[4].min(n[3]).min(1) {
        for lone3 in 0..=1u64 {
            let Some(rest) = n[3].checked_sub(p34 + lone3) else {
                continue;
            };
            if rest % 2 != 0 {
                continue;
            }
            let mut rooms = [0; 9];
            rooms[1] = n[7] + p34; // {7}, {3,4}
            rooms[2] = n[6] + rest / 2; // {6}, {3,3}
            rooms[3] = n[5]; // {5}
            rooms[4] = n[4] - p34; // {4}
            rooms[5] = lone3; // {3}
            best = best.min(place_small(8, &rooms, n[2], n[1]));
            if best == bound {
                return best;
            }
        }
    }
    best
}

/// Places `twos` 2-GPU and `ones` 1-GPU instances on top of bins with free
/// room `rooms` (bins of larger instances, `rooms[r] <= 1` for `r >= 4`, none
/// with room above 5), plus new bins; returns the fewest partial bins.
///
/// 2s: room-1 bins take none; by Lemma E1 a 2 sits in a room-3 bin only when
/// every room-2 bin holds a 2, and by Lemma E2 a 2 sits in a new bin only when
/// every room-2 bin holds a 2; by Lemma P the new bins' 2s are packed `G/2`
/// per bin; by Lemma M only the four largest `y3` need evaluating. Rooms 4
/// and 5 (at most one bin each) are enumerated. 1s then fill by Lemma F1.
/// O(1) evaluations.
fn place_small(capacity: u32, rooms: &Rooms, twos: u64, ones: u64) -> u64 {
    debug_assert!(rooms[4] <= 1 && rooms[5] <= 1 && rooms[6..].iter().all(|&c| c == 0));
    let g = u64::from(capacity);
    let (c2, c3) = (rooms[2], rooms[3]);
    let mut best = u64::MAX;
    let mut eval = |t4: u64, t5: u64, y2: u64, y3: u64, pure: u64| {
        let mut h = *rooms;
        h[2] -= y2;
        h[3] -= y3;
        h[1] += y3;
        for (room, t) in [(4u64, t4), (5, t5)] {
            if rooms[room as usize] == 1 {
                h[room as usize] -= 1;
                let left = room - 2 * t;
                if left > 0 {
                    h[left as usize] += 1;
                }
            }
        }
        let per_bin = g / 2;
        if per_bin > 0 && !pure.is_multiple_of(per_bin) {
            h[(g - 2 * (pure % per_bin)) as usize] += 1;
        }
        best = best.min(fill_ones(capacity, &h, ones));
    };
    for t4 in 0..=(2 * rooms[4]).min(twos) {
        for t5 in 0..=(2 * rooms[5]).min(twos - t4) {
            let rem = twos - t4 - t5;
            if rem < c2 {
                eval(t4, t5, rem, 0, 0);
            } else {
                // Lemma M: y3 + 4 never costs more than y3, so only the
                // four largest values can be the minimum.
                let max_y3 = c3.min(rem - c2);
                for y3 in max_y3.saturating_sub(3)..=max_y3 {
                    eval(t4, t5, c2, y3, rem - c2 - y3);
                }
            }
        }
    }
    best
}

/// Lemma F1: given bins with free rooms `rooms`, `ones` 1-GPU instances are
/// best placed by filling the smallest rooms first; if they cover every room,
/// the rest go to new bins of which at most one is partial.
fn fill_ones(capacity: u32, rooms: &Rooms, ones: u64) -> u64 {
    let total_room: u64 = (1..=8).map(|r| r as u64 * rooms[r]).sum();
    let bins: u64 = rooms[1..].iter().sum();
    if ones >= total_room {
        return u64::from(!(ones - total_room).is_multiple_of(u64::from(capacity)));
    }
    let mut left = ones;
    let mut filled = 0;
    for r in 1..=8u64 {
        let take = rooms[r as usize].min(left / r);
        filled += take;
        left -= take * r;
        if take < rooms[r as usize] {
            break;
        }
    }
    bins - filled
}
