//! `--repeat R`: the same window replayed R times in a row (each run on
//! every cluster at once), and the mean and spread of every figure, live
//! and simulated, per cluster (`OUT/summary.md`, `OUT/summary.json`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::report::ClusterResult;

/// Mean, sample standard deviation, min and max of one figure over the
/// repeats where it exists.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    pub n: usize,
    pub mean: f64,
    /// Sample standard deviation (0 with one value).
    pub sd: f64,
    pub min: f64,
    pub max: f64,
    pub values: Vec<f64>,
}

impl Spread {
    pub fn of(values: Vec<f64>) -> Self {
        let n = values.len();
        if n == 0 {
            return Self::default();
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = if n > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Self {
            n,
            mean,
            sd,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            values,
        }
    }
}

/// The figures of one cluster in one run, by name, in report order. A
/// figure a run does not have (e.g. no WCC instant) is left out.
/// The summary's names of `causes.fit_wait_per_job_by_reason_s`, in the
/// order of [`super::observe::FIT_WAIT_REASONS`].
const FIT_WAIT_FIGURES: [&str; super::observe::FIT_WAIT_REASONS.len()] = [
    "waited while it fit: Reason=Priority, per job (wall s)",
    "waited while it fit: Reason=Resources, per job (wall s)",
    "waited while it fit: Reason=BeginTime, per job (wall s)",
    "waited while it fit: Reason=None, per job (wall s)",
    "waited while it fit: other reasons, per job (wall s)",
];

pub fn figures(r: &ClusterResult) -> Vec<(&'static str, f64)> {
    let mut f = vec![
        ("completed", r.completed as f64),
        ("AFR", r.afr),
        ("N*SIF time average (all instants)", r.mean_n_sif),
        ("max N*SIF (every poll)", r.max_n_sif as f64),
    ];
    if let Some(v) = r.max_n_sif_no_flight {
        f.push(("max N*SIF, no migration in flight", v as f64));
    }
    if let Some(v) = r.max_n_sif_under_wcc {
        f.push(("max N*SIF while WCC held (every poll)", v as f64));
    }
    if let Some(v) = r.max_n_sif_under_wcc_no_flight {
        f.push(("max N*SIF while WCC held, no migration in flight", v as f64));
    }
    if let Some(v) = r.max_n_sif_under_wcc_settled {
        f.push(("max N*SIF while WCC held (settled only)", v as f64));
    }
    f.extend([
        ("time not settled (share)", r.unsettled_share),
        (
            "time with a migration in flight (share)",
            r.causes.in_flight_share,
        ),
        ("AGU", r.agu),
        (
            "idle GPUs usable by waiting jobs that fit (share)",
            r.causes.idle_fit_share,
        ),
        (
            "idle GPUs kept from a waiting job by the layout (share)",
            r.causes.idle_layout_share,
        ),
        (
            "idle GPUs no waiting job needed (share)",
            r.causes.idle_not_needed_share(),
        ),
        (
            "idle GPUs with a migration in flight (share)",
            r.causes.idle_in_flight_share,
        ),
        ("jobs completed on every cluster", r.ajct_jobs as f64),
        ("AJCT, jobs completed on every cluster (wall s)", r.ajct_s),
        (
            "wait p50, jobs completed on every cluster (wall s)",
            r.waits.p50,
        ),
        ("wait p50, largest of those (wall s)", r.largest.waits.p50),
        ("wait p90, largest of those (wall s)", r.largest.waits.p90),
        ("migrations", r.migrations as f64),
        ("migrated jobs", r.migrated_jobs as f64),
        ("preemptions", r.preemptions as f64),
        (
            "started ahead of an earlier job",
            r.causes.started_ahead as f64,
        ),
        (
            "waited while it fit, per job (wall s)",
            r.causes.fit_wait_per_job_s,
        ),
    ]);
    for ((_, s), name) in r
        .causes
        .fit_wait_per_job_by_reason_s
        .iter()
        .zip(FIT_WAIT_FIGURES)
    {
        f.push((name, *s));
    }
    if let Some(w) = &r.common_window {
        f.push(("GPU utilisation over the common window", w.utilisation));
    }
    if r.requeue_cost.requeues > 0 {
        f.extend([
            (
                "requeue -> restart idle, mean (wall s)",
                r.requeue_cost.idle_mean_s,
            ),
            ("cost of one requeue (wall s)", r.requeue_cost.wall_cost_s),
            (
                "cost of one requeue (trace min)",
                r.requeue_cost.trace_cost_s / 60.0,
            ),
        ]);
    }
    if r.is_compass() {
        f.extend([
            (
                "held for a migration target (jobs)",
                r.causes.held_jobs as f64,
            ),
            ("held for a migration target (wall s)", r.causes.held_s),
            (
                "then no room after the hold's release (wall s)",
                r.causes.no_room_s,
            ),
        ]);
    }
    if let Some(s) = &r.simulated {
        f.extend([
            ("sim: AFR", s.afr),
            (
                "sim: max N*SIF (after every policy call)",
                s.max_n_sif as f64,
            ),
        ]);
        if let Some(agu) = s.agu {
            f.push(("sim: AGU", agu));
        }
        f.extend([
            (
                "sim: AJCT, jobs completed on every cluster (wall s)",
                s.ajct_s,
            ),
            (
                "sim: wait p50, jobs completed on every cluster (wall s)",
                s.waits.p50,
            ),
            (
                "sim: wait p50, largest of those (wall s)",
                s.largest.waits.p50,
            ),
            (
                "sim: wait p90, largest of those (wall s)",
                s.largest.waits.p90,
            ),
            ("sim: migrations (moved jobs)", s.migrations as f64),
            ("sim: migration cost (wall s)", s.migration_cost_s),
        ]);
        // The policy simulator's (`--service-config`): victims requeued,
        // as the live `preemptions` count them, and cancelled.
        if let (Some(p), Some(c)) = (s.preemptions, s.cancelled) {
            f.extend([
                (
                    "sim: preemptions (victims requeued)",
                    p.saturating_sub(c) as f64,
                ),
                ("sim: victims cancelled (not resumable)", c as f64),
            ]);
        }
        if s.afr > 0.0 {
            f.push(("live AFR / sim AFR", r.afr / s.afr));
        }
    }
    f
}

/// One run of a repeated replay: its number (1-based), every cluster's
/// results, and whether it hit `--timeout`.
pub struct RunResults {
    pub run: usize,
    pub results: Vec<ClusterResult>,
    pub timed_out: bool,
}

/// The results of the runs that finished (a run that hit `--timeout` is
/// left out of the means: its jobs did not all finish).
pub fn counted(runs: &[RunResults]) -> Vec<Vec<ClusterResult>> {
    runs.iter()
        .filter(|r| !r.timed_out)
        .map(|r| r.results.clone())
        .collect()
}

/// The numbers of the runs that hit `--timeout`.
pub fn timed_out(runs: &[RunResults]) -> Vec<usize> {
    runs.iter().filter(|r| r.timed_out).map(|r| r.run).collect()
}

/// One cluster over all repeats.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterSpread {
    pub name: String,
    /// Figure name -> spread, in report order.
    pub figures: Vec<(String, Spread)>,
}

/// Every cluster over all repeats (`runs[k]` is run k's results).
pub fn spreads(runs: &[Vec<ClusterResult>]) -> Vec<ClusterSpread> {
    let mut names: Vec<String> = Vec::new();
    for run in runs {
        for r in run {
            if !names.contains(&r.name) {
                names.push(r.name.clone());
            }
        }
    }
    names
        .into_iter()
        .map(|name| {
            let mut order: Vec<&'static str> = Vec::new();
            let mut values: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
            for r in runs.iter().flatten().filter(|r| r.name == name) {
                for (k, v) in figures(r) {
                    if !order.contains(&k) {
                        order.push(k);
                    }
                    values.entry(k).or_default().push(v);
                }
            }
            ClusterSpread {
                figures: order
                    .into_iter()
                    .map(|k| {
                        (
                            k.to_string(),
                            Spread::of(values.remove(k).unwrap_or_default()),
                        )
                    })
                    .collect(),
                name,
            }
        })
        .collect()
}

fn cell(s: &Spread) -> String {
    if s.n == 0 {
        return "-".into();
    }
    let digits = if s.max.abs() < 1.0 && s.min.abs() < 1.0 {
        4
    } else {
        1
    };
    format!(
        "{:.d$} ± {:.d$} [{:.d$}, {:.d$}] (n={})",
        s.mean,
        s.sd,
        s.min,
        s.max,
        s.n,
        d = digits
    )
}

/// The summary table: one row per figure, one column per cluster, each cell
/// `mean ± sd [min, max] (n)`.
pub fn table(clusters: &[ClusterSpread]) -> String {
    let mut order: Vec<&str> = Vec::new();
    for c in clusters {
        for (k, _) in &c.figures {
            if !order.contains(&k.as_str()) {
                order.push(k);
            }
        }
    }
    let mut out = String::from("| figure |");
    for c in clusters {
        let _ = write!(out, " {} |", c.name);
    }
    out.push_str("\n|---|");
    for _ in clusters {
        out.push_str("---|");
    }
    out.push('\n');
    for k in order {
        let _ = write!(out, "| {k} |");
        for c in clusters {
            let s = c
                .figures
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, s)| cell(s))
                .unwrap_or("-".into());
            let _ = write!(out, " {s} |");
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_of_values() {
        let s = Spread::of(vec![1.0, 2.0, 3.0]);
        assert_eq!((s.n, s.mean, s.sd, s.min, s.max), (3, 2.0, 1.0, 1.0, 3.0));
        assert_eq!(Spread::of(vec![5.0]).sd, 0.0);
        assert_eq!(Spread::of(vec![]).n, 0);
    }

    #[test]
    fn spreads_per_cluster_and_figure() {
        let run = |afr: f64, wcc: Option<u64>| {
            vec![
                ClusterResult {
                    name: "compass".into(),
                    state_file: Some("/s".into()),
                    afr,
                    max_n_sif_under_wcc: wcc,
                    ..Default::default()
                },
                ClusterResult {
                    name: "stock".into(),
                    afr: 0.1,
                    ..Default::default()
                },
            ]
        };
        let s = spreads(&[run(0.02, Some(2)), run(0.04, None)]);
        assert_eq!(s.len(), 2);
        let get = |c: &ClusterSpread, k: &str| {
            c.figures
                .iter()
                .find(|(n, _)| n == k)
                .map(|(_, s)| s.clone())
                .unwrap()
        };
        let afr = get(&s[0], "AFR");
        assert_eq!((afr.n, afr.min, afr.max), (2, 0.02, 0.04));
        assert!((afr.mean - 0.03).abs() < 1e-12);
        assert_eq!(get(&s[0], "max N*SIF while WCC held (every poll)").n, 1);
        assert_eq!(get(&s[1], "AFR").sd, 0.0);
        let t = table(&s);
        assert!(
            t.contains("| AFR | 0.0300 ± 0.0141 [0.0200, 0.0400] (n=2) |"),
            "{t}"
        );
        assert!(t.contains("held for a migration target (jobs)"), "{t}");
    }

    /// The policy simulation's preemptions are figures of the summary (the
    /// requeued ones, as the live `preemptions` count them); a figure it
    /// does not measure (AGU over the busy time) is left out, not zero.
    #[test]
    fn the_policy_simulations_figures_are_summarised() {
        use crate::replay::sim::Simulated;
        let r = ClusterResult {
            name: "stock".into(),
            simulated: Some(Simulated {
                afr: 0.05,
                agu: None,
                preemptions: Some(9),
                cancelled: Some(2),
                ..Default::default()
            }),
            ..Default::default()
        };
        let f = figures(&r);
        let get = |k: &str| f.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        assert_eq!(get("sim: preemptions (victims requeued)"), Some(7.0));
        assert_eq!(get("sim: victims cancelled (not resumable)"), Some(2.0));
        assert_eq!(get("sim: AGU"), None);
        let placement = ClusterResult {
            simulated: Some(Simulated {
                agu: Some(0.9),
                ..Default::default()
            }),
            ..r
        };
        let f = figures(&placement);
        assert!(f.iter().any(|(n, v)| *n == "sim: AGU" && *v == 0.9));
        assert!(!f.iter().any(|(n, _)| n.contains("sim: preemptions")));
    }
}
