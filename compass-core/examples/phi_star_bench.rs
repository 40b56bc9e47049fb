//! Benchmark of the exact `Phi*` (not a test): per-call time of the closed
//! form, of the structured search on random states where WCC fails (counts up
//! to 600 per size), and of the memoised cache on a slowly drifting state.
//!
//! `cargo run --release -p compass-core --example phi_star_bench`

use std::time::{Duration, Instant};

use compass_core::metric::{phi_star, wcc_holds, InstanceCounts, PhiStarCache};

/// xorshift64: deterministic states without a dependency.
struct Rng(u64);
impl Rng {
    fn below(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % m
    }
}

fn time_per_call(
    states: &[InstanceCounts],
    mut f: impl FnMut(&InstanceCounts) -> u64,
) -> (Duration, u64) {
    let t = Instant::now();
    let sum: u64 = states.iter().map(&mut f).sum();
    (t.elapsed() / states.len().max(1) as u32, sum)
}

fn main() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut wcc_states = Vec::new();
    let mut hard_states = Vec::new();
    while wcc_states.len() < 20_000 || hard_states.len() < 20_000 {
        let mut c = [0; 9];
        for count in &mut c[1..] {
            *count = rng.below(600);
        }
        if rng.below(2) == 0 {
            c[3] = rng.below(5);
        }
        if wcc_holds(&c, 8) {
            wcc_states.push(c);
        } else {
            c[1] = rng.below(300);
            if !wcc_holds(&c, 8) {
                hard_states.push(c);
            }
        }
        if rng.below(3) == 0 {
            c[1] = 3 * c.iter().sum::<u64>();
            wcc_states.push(c);
        }
    }
    let (closed, a) = time_per_call(&wcc_states, |c| phi_star(c, 8));
    let (search, b) = time_per_call(&hard_states, |c| phi_star(c, 8));
    // A replay-like walk: one instance arrives or leaves per step.
    let mut walk = Vec::new();
    let mut c = hard_states[0];
    for _ in 0..100_000 {
        let g = 1 + rng.below(8) as usize;
        if rng.below(2) == 0 || c[g] == 0 {
            c[g] += 1;
        } else {
            c[g] -= 1;
        }
        walk.push(c);
    }
    let mut cache = PhiStarCache::new();
    let (cached, d) = time_per_call(&walk, |c| cache.phi_star(c, 8));
    let (direct, e) = time_per_call(&walk, |c| phi_star(c, 8));
    assert_eq!(d, e);
    println!(
        "closed form (WCC holds):   {closed:?} per call ({} states, checksum {a})",
        wcc_states.len()
    );
    println!(
        "exact search (WCC fails):  {search:?} per call ({} states, checksum {b})",
        hard_states.len()
    );
    println!(
        "random walk, cache:        {cached:?} per call (hits {}, misses {}, closed form {})",
        cache.hits(),
        cache.misses(),
        cache.closed_form_answers()
    );
    println!("random walk, no cache:     {direct:?} per call");
    // A costly neighbourhood: hundreds of 5s and 2s, few 1s; small moves.
    let mut walk = Vec::new();
    let mut c = [0, 10, 500, 0, 1, 400, 50, 20, 0];
    for _ in 0..100_000 {
        let g = [1, 2, 5, 6, 7, 8][rng.below(6) as usize];
        if rng.below(2) == 0 || c[g] == 0 {
            c[g] += 1;
        } else {
            c[g] -= 1;
        }
        walk.push(c);
    }
    let mut cache = PhiStarCache::new();
    let (cached, d) = time_per_call(&walk, |c| cache.phi_star(c, 8));
    let (direct, e) = time_per_call(&walk, |c| phi_star(c, 8));
    assert_eq!(d, e);
    println!(
        "costly walk, cache:        {cached:?} per call (hits {}, misses {})",
        cache.hits(),
        cache.misses()
    );
    println!("costly walk, no cache:     {direct:?} per call");
}
