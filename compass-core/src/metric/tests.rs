use super::*;
use proptest::prelude::*;

/// Obviously-correct brute force: put each item (in any order) into every
/// existing bin where it fits or into a new bin, and count the partial bins
/// of every complete packing. Bins with equal loads are interchangeable for
/// the items still to come, so only the first of them is tried.
fn brute_force(items: &[u32], capacity: u32) -> u64 {
    fn go(items: &[u32], capacity: u32, loads: &mut Vec<u32>, best: &mut u64) {
        let Some((&item, rest)) = items.split_first() else {
            let partial = loads.iter().filter(|&&l| l > 0 && l < capacity).count() as u64;
            *best = (*best).min(partial);
            return;
        };
        let mut tried = Vec::new();
        for b in 0..loads.len() {
            if loads[b] + item <= capacity && !tried.contains(&loads[b]) {
                tried.push(loads[b]);
                loads[b] += item;
                go(rest, capacity, loads, best);
                loads[b] -= item;
            }
        }
        loads.push(item);
        go(rest, capacity, loads, best);
        loads.pop();
    }
    let mut best = u64::MAX;
    go(items, capacity, &mut Vec::new(), &mut best);
    if items.is_empty() {
        0
    } else {
        best
    }
}

fn counts_of(items: &[u32]) -> InstanceCounts {
    let mut c = [0; 9];
    for &i in items {
        c[i as usize] += 1;
    }
    c
}

fn items_of(counts: &InstanceCounts) -> Vec<u32> {
    (1..=8u32)
        .rev()
        .flat_map(|g| std::iter::repeat_n(g, counts[g as usize] as usize))
        .collect()
}

/// Every multiset of `len` items of sizes `min..=max`, as non-increasing lists.
fn multisets(len: usize, max: u32, prefix: &mut Vec<u32>, out: &mut Vec<Vec<u32>>) {
    if prefix.len() == len {
        out.push(prefix.clone());
        return;
    }
    for s in 1..=max {
        if prefix.last().is_none_or(|&l| s <= l) {
            prefix.push(s);
            multisets(len, max, prefix, out);
            prefix.pop();
        }
    }
}

#[test]
fn phi_star_matches_brute_force_on_every_multiset_up_to_8_items() {
    for capacity in [1u32, 2, 4, 8] {
        let mut checked = 0;
        for len in 0..=8 {
            let mut all = Vec::new();
            multisets(len, capacity, &mut Vec::new(), &mut all);
            for items in all {
                let counts = counts_of(&items);
                let expect = brute_force(&items, capacity);
                assert_eq!(
                    phi_star(&counts, capacity),
                    expect,
                    "G={capacity} items={items:?}"
                );
                assert_eq!(
                    reference::phi_star(&counts, capacity),
                    expect,
                    "reference G={capacity} items={items:?}"
                );
                checked += 1;
            }
        }
        // C(G+8, 8) multisets of up to 8 items of G sizes.
        let expected = [0, 9, 45, 0, 495, 0, 0, 0, 12870][capacity as usize];
        assert_eq!(checked, expected, "G={capacity}");
    }
}

#[test]
fn closed_form_is_exact_whenever_wcc_holds() {
    // Eq. (21) against the brute force, on every WCC multiset of up to 8 items.
    for capacity in [1u32, 2, 4, 8] {
        for len in 0..=8 {
            let mut all = Vec::new();
            multisets(len, capacity, &mut Vec::new(), &mut all);
            for items in all
                .into_iter()
                .filter(|i| wcc_holds(&counts_of(i), capacity))
            {
                let t: u32 = items.iter().sum();
                assert_eq!(
                    brute_force(&items, capacity),
                    u64::from(!t.is_multiple_of(capacity)),
                    "{items:?}"
                );
            }
        }
    }
}

#[test]
fn forced_partial_nodes_example_of_section_3_1() {
    // A 4-GPU instance and a job of two 5-GPU instances: three partial nodes.
    let mut c = [0; 9];
    c[4] = 1;
    c[5] = 2;
    assert!(!wcc_holds(&c, 8));
    assert_eq!(phi_star(&c, 8), 3);
}

#[test]
fn wcc_examples() {
    let mut c = [0; 9];
    // n1 >= n3 + 3 n5 + 2 n6 + n7 on 8-GPU nodes.
    c[1] = 7;
    c[3] = 1;
    c[5] = 1;
    c[6] = 1;
    c[7] = 1;
    assert!(wcc_holds(&c, 8));
    assert_eq!(
        phi_star(&c, 8),
        u64::from(!total_gpus(&c).is_multiple_of(8))
    );
    c[1] = 6;
    assert!(!wcc_holds(&c, 8));
    // Power-of-two sizes never need fillers.
    let mut p = [0; 9];
    p[2] = 3;
    p[4] = 5;
    p[8] = 2;
    assert!(wcc_holds(&p, 8));
    assert_eq!(phi_star(&p, 8), 1); // 6 + 20 + 16 = 42 GPUs
                                    // On 4-GPU nodes a 3-GPU instance needs one filler; 5..8 cannot occur.
    let mut q = [0; 9];
    q[3] = 2;
    q[1] = 1;
    assert!(!wcc_holds(&q, 4));
    assert_eq!(phi_star(&q, 4), 1); // {3,1} full, {3} partial
    q[1] = 2;
    assert!(wcc_holds(&q, 4));
    assert_eq!(phi_star(&q, 4), 0);
    // The example state: 6 ones, 3 twos, one 4 -> 16 GPUs, no partial.
    let mut e = [0; 9];
    e[1] = 6;
    e[2] = 3;
    e[4] = 1;
    assert!(wcc_holds(&e, 8));
    assert_eq!(phi_star(&e, 8), 0);
}

#[test]
fn large_counts_have_known_answers() {
    let mut c = [0; 9];
    c[5] = 300; // each 5 alone
    assert_eq!(phi_star(&c, 8), 300);
    let mut c = [0; 9];
    c[3] = 301; // 150 bins {3,3} and one {3}
    assert_eq!(phi_star(&c, 8), 151);
    let mut c = [0; 9];
    c[6] = 200;
    c[1] = 100; // 50 bins {6,1,1}, 150 lone 6s
    assert_eq!(phi_star(&c, 8), 150);
    let mut c = [0; 9];
    c[7] = 400;
    c[1] = 399;
    c[8] = 1000;
    assert_eq!(phi_star(&c, 8), 1);
    let mut c = [0; 9];
    c[5] = 500;
    c[3] = 500;
    c[4] = 999;
    c[2] = 700;
    c[1] = 3;
    // {5,3} x500 full; 4s pair except one; the twos fill {4,2,2} and {2,2,2,2}
    // bins; 1+... total = 4 + 1400 + 3 = 1407 -> 1407 mod 8 = 7 -> at least 1.
    assert_eq!(phi_star(&c, 8), 1);
}

#[test]
fn out_of_model_inputs_do_not_panic() {
    let mut c = [0; 9];
    c[3] = 2;
    c[5] = 1;
    // Capacity 6 (refused by ClusterSpec): {3,3} full, {5} partial.
    assert_eq!(phi_star(&c, 6), 1);
    // 5-GPU instance on 4-GPU nodes: counted as its own partial node.
    assert_eq!(phi_star(&c, 4), 3);
    assert_eq!(phi_star(&c, 0), 3);
}

#[test]
fn cache_agrees_and_reuses_reduced_states() {
    let mut cache = PhiStarCache::new();
    let mut c = [0; 9];
    c[5] = 3;
    c[2] = 1;
    let v = cache.phi_star(&c, 8);
    assert_eq!(v, phi_star(&c, 8));
    // Adding full bins ({8}, {4,4}) keeps the reduced key: a hit.
    c[8] += 4;
    c[4] += 2;
    assert_eq!(cache.phi_star(&c, 8), v);
    assert_eq!((cache.misses(), cache.hits(), cache.len()), (1, 1, 1));
    c[1] = 100;
    assert_eq!(cache.phi_star(&c, 8), phi_star(&c, 8));
    assert_eq!(cache.closed_form_answers(), 1);
}

#[test]
fn sif_is_normalised_excess() {
    assert_eq!(sif(3, 1, 4), 0.5);
    assert_eq!(sif(0, 1, 4), 0.0);
}

fn counts_strategy(capacity: u32, max_each: u64) -> impl Strategy<Value = InstanceCounts> {
    proptest::collection::vec(0..=max_each, 8).prop_map(move |v| {
        let mut c = [0; 9];
        let g = capacity as usize;
        c[1..=g].copy_from_slice(&v[..g]);
        c
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn phi_star_matches_exhaustive_search_g8(c in counts_strategy(8, 5)) {
        prop_assert_eq!(phi_star(&c, 8), reference::phi_star(&c, 8), "counts {:?}", c);
    }

    #[test]
    fn phi_star_matches_exhaustive_search_skewed_g8(
        big in 0usize..7, n in 6u64..=24, c in counts_strategy(8, 3)
    ) {
        // One size much more numerous than the rest.
        let mut c = c;
        c[big + 1] = n;
        prop_assert_eq!(phi_star(&c, 8), reference::phi_star(&c, 8), "counts {:?}", c);
    }

    #[test]
    fn phi_star_matches_exhaustive_search_many_fives_and_twos(
        n5 in 0u64..=16, n2 in 0u64..=20, n1 in 0u64..=6, n4 in 0u64..=3, n6 in 0u64..=4, n7 in 0u64..=3
    ) {
        // Exercises Lemmas E1, E2 and M: many room-3 bins competing for 2s.
        let c = [0, n1, n2, 0, n4, n5, n6, n7, 0];
        prop_assert_eq!(phi_star(&c, 8), reference::phi_star(&c, 8), "counts {:?}", c);
    }

    #[test]
    fn phi_star_matches_exhaustive_search_g4(c in counts_strategy(4, 12)) {
        prop_assert_eq!(phi_star(&c, 4), reference::phi_star(&c, 4), "counts {:?}", c);
    }

    #[test]
    fn phi_star_is_invariant_under_adding_full_power_of_two_bins(c in counts_strategy(8, 40), k in 0u64..5) {
        let mut d = c;
        d[8] += k;
        d[4] += 2 * k;
        prop_assert_eq!(phi_star(&c, 8), phi_star(&d, 8));
    }

    #[test]
    fn cache_matches_direct(cs in proptest::collection::vec(counts_strategy(8, 30), 1..20)) {
        let mut cache = PhiStarCache::with_slots(8);
        for c in &cs {
            prop_assert_eq!(cache.phi_star(c, 8), phi_star(c, 8));
        }
    }
}

#[test]
fn brute_force_sanity() {
    assert_eq!(brute_force(&[4, 5, 5], 8), 3);
    assert_eq!(brute_force(&[4, 4], 8), 0);
    assert_eq!(brute_force(&[3, 3, 3], 8), 2);
    assert_eq!(items_of(&counts_of(&[5, 1, 1])), vec![5, 1, 1]);
}
