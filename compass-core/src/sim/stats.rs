//! Wait-time percentiles.

use serde::{Deserialize, Serialize};

/// Summary of a set of waits (seconds). Percentiles are nearest-rank: the
/// `p`-th percentile is the smallest value with at least `p`% of the values
/// at or below it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    /// Summarises `values` (sorted here; order does not matter).
    pub fn of(mut values: Vec<f64>) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let rank = |p: f64| {
            let k = ((p / 100.0) * n as f64).ceil() as usize;
            values[k.clamp(1, n) - 1]
        };
        Self {
            count: n as u64,
            mean: values.iter().sum::<f64>() / n as f64,
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
            max: values[n - 1],
        }
    }
}

/// Job-size classes (total GPUs `w * g`) waits are reported by.
pub const SIZE_CLASSES: &[(u64, u64, &str)] = &[
    (1, 1, "1"),
    (2, 2, "2"),
    (3, 4, "3-4"),
    (5, 8, "5-8"),
    (9, 16, "9-16"),
    (17, 32, "17-32"),
    (33, 64, "33-64"),
    (65, u64::MAX, "65+"),
];

/// The label of the size class of a job of `gpus` GPUs.
pub fn size_class(gpus: u64) -> &'static str {
    SIZE_CLASSES
        .iter()
        .find(|(lo, hi, _)| (*lo..=*hi).contains(&gpus))
        .map(|c| c.2)
        .unwrap_or("65+")
}

/// Queue waits overall, by job size, and split by whether every instance of
/// the job needs a whole node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitStats {
    pub overall: Percentiles,
    /// Jobs whose instances each take a whole node (`g = G`).
    pub whole_node: Percentiles,
    /// Jobs whose instances are smaller than a node.
    pub sub_node: Percentiles,
    /// By total GPUs `w * g`, in the order of [`SIZE_CLASSES`]; classes with
    /// no job are left out.
    pub by_size: Vec<SizeWaits>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SizeWaits {
    pub gpus: String,
    pub waits: Percentiles,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let p = Percentiles::of((1..=100).map(f64::from).rev().collect());
        assert_eq!(
            (p.p50, p.p90, p.p99, p.max, p.count),
            (50.0, 90.0, 99.0, 100.0, 100)
        );
        assert_eq!(p.mean, 50.5);
        let p = Percentiles::of(vec![7.0]);
        assert_eq!((p.p50, p.p99), (7.0, 7.0));
        assert_eq!(Percentiles::of(vec![]).count, 0);
        assert_eq!(size_class(3), "3-4");
        assert_eq!(size_class(200), "65+");
    }
}
