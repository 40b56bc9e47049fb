//! GPU weights (issue 12): an hour on one GPU type may cost more than an
//! hour on another (`[gpu_weights]` in the service config: `a100 = 2.0`,
//! `l40s = 1.0`). Every charge, allocation and capacity of the fair-share
//! rules is in *weighted GPU-seconds*: a job's usage is the sum over its GPUs
//! of weight x time, the cluster's capacity the sum of its GPUs' weights.
//! Untyped GPUs and types the table does not name weigh 1.0, so without a
//! table every number is plain GPU-seconds, as before.
//!
//! This is the one place the weights are applied; the service and the
//! policy simulator both call it.

use std::collections::BTreeMap;

use crate::error::{CoreError, Result};
use crate::gres::GpuCounts;

/// The weight of untyped GPUs and of types the table does not name.
pub const DEFAULT_GPU_WEIGHT: f64 = 1.0;

/// GPU type -> weight. Types compare case-insensitively (Slurm's GRES types
/// are case-sensitive, but `A100` and `a100` on one site are one GPU).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuWeights {
    by_type: BTreeMap<String, f64>,
}

impl GpuWeights {
    /// Weights from a table. Each weight must be a finite number > 0 and at
    /// most 1000; each type a non-empty GRES type name.
    pub fn new<'a, I>(table: I) -> Result<Self>
    where
        I: IntoIterator<Item = (&'a str, f64)>,
    {
        let mut by_type = BTreeMap::new();
        for (t, w) in table {
            let key = t.trim().to_ascii_lowercase();
            if key.is_empty() || key.contains([',', ':', '=', '(', ')', ' ']) {
                return Err(CoreError::Invalid(format!(
                    "gpu_weights: `{t}` is not a GPU type (write it as in gres.conf's Type=, e.g. a100)"
                )));
            }
            if !(w.is_finite() && w > 0.0 && w <= 1000.0) {
                return Err(CoreError::Invalid(format!(
                    "gpu_weights: the weight of `{t}` must be a number in (0, 1000], got {w}"
                )));
            }
            if by_type.insert(key, w).is_some() {
                return Err(CoreError::Invalid(format!(
                    "gpu_weights: `{t}` is named twice (types ignore case)"
                )));
            }
        }
        Ok(Self { by_type })
    }

    /// No type has a weight of its own: every GPU weighs 1.0.
    pub fn is_uniform(&self) -> bool {
        self.by_type
            .values()
            .all(|w| (*w - DEFAULT_GPU_WEIGHT).abs() < f64::EPSILON)
    }

    /// The table, type -> weight (lower-case types).
    pub fn table(&self) -> &BTreeMap<String, f64> {
        &self.by_type
    }

    /// The weight of one GPU of type `t` (`None`: untyped).
    pub fn weight(&self, t: Option<&str>) -> f64 {
        t.and_then(|t| self.by_type.get(&t.to_ascii_lowercase()).copied())
            .unwrap_or(DEFAULT_GPU_WEIGHT)
    }

    /// Weighted GPUs of a node, a job's allocation or a request: each typed
    /// GPU at its type's weight, the GPUs of [`GpuCounts::total`] that no
    /// type names at [`DEFAULT_GPU_WEIGHT`].
    pub fn weighted(&self, c: &GpuCounts) -> f64 {
        let mut typed = 0u64;
        let mut sum = 0.0;
        for (t, n) in &c.by_type {
            typed = typed.saturating_add(*n);
            sum += *n as f64 * self.weight(Some(t));
        }
        sum + c.total().saturating_sub(typed) as f64 * DEFAULT_GPU_WEIGHT
    }

    /// The mean weight per GPU of `c` (what a ledger interval stores:
    /// `gpus x weight` is its charge rate); [`DEFAULT_GPU_WEIGHT`] for no
    /// GPU.
    pub fn mean_weight(&self, c: &GpuCounts) -> f64 {
        match c.total() {
            0 => DEFAULT_GPU_WEIGHT,
            n => self.weighted(c) / n as f64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(untyped: u64, typed: &[(&str, u64)]) -> GpuCounts {
        GpuCounts {
            untyped,
            by_type: typed.iter().map(|(t, n)| (t.to_string(), *n)).collect(),
        }
    }

    #[test]
    fn each_gpu_is_charged_at_its_type_weight() {
        let w = GpuWeights::new([("a100", 2.0), ("L40S", 1.0), ("h100", 3.5)]).unwrap();
        assert_eq!(w.weight(Some("a100")), 2.0);
        assert_eq!(w.weight(Some("A100")), 2.0);
        assert_eq!(w.weight(Some("l40s")), 1.0);
        assert_eq!(w.weight(Some("v100")), 1.0, "unknown type");
        assert_eq!(w.weight(None), 1.0, "untyped");
        // 4 a100 GPUs: 8 weighted GPUs; mean weight 2.
        assert_eq!(w.weighted(&counts(0, &[("a100", 4)])), 8.0);
        assert_eq!(w.mean_weight(&counts(0, &[("a100", 4)])), 2.0);
        // A multi-type node: 4 a100 + 4 h100 = 8 + 14.
        assert_eq!(w.weighted(&counts(0, &[("a100", 4), ("h100", 4)])), 22.0);
        // A TRES string lists the untyped total next to the typed entries
        // (`gres/gpu=8,gres/gpu:a100=8`): counted once.
        assert_eq!(w.weighted(&counts(8, &[("a100", 8)])), 16.0);
        // Untyped GPUs beyond the typed ones weigh 1.
        assert_eq!(w.weighted(&counts(6, &[("a100", 2)])), 4.0 + 4.0);
        assert_eq!(w.weighted(&counts(3, &[])), 3.0);
        assert_eq!(w.mean_weight(&counts(0, &[])), 1.0);
        assert!(!w.is_uniform());
        assert!(GpuWeights::default().is_uniform());
        assert_eq!(
            GpuWeights::default().weighted(&counts(0, &[("a100", 8)])),
            8.0
        );
    }

    #[test]
    fn bad_tables_are_refused_with_the_reason() {
        for (t, w, why) in [
            ("a100", 0.0, "(0, 1000]"),
            ("a100", -1.0, "(0, 1000]"),
            ("a100", f64::NAN, "(0, 1000]"),
            ("a100", f64::INFINITY, "(0, 1000]"),
            ("", 1.0, "not a GPU type"),
            ("gpu:a100", 1.0, "not a GPU type"),
        ] {
            let e = GpuWeights::new([(t, w)]).unwrap_err().to_string();
            assert!(e.contains(why), "{t}={w}: {e}");
        }
        let e = GpuWeights::new([("a100", 1.0), ("A100", 2.0)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("twice"), "{e}");
    }
}
