//! Benchmark (not a test): the time `select/cons_tres_compass` adds to
//! `select_p_job_test`, against the stock cons_tres call it wraps, on the
//! same pending queue. Root only; starts lab clusters (contrib/slurm-lab.sh).
//!
//! ```sh
//! cargo run --release -p compass-select --example job_test_overhead -- [PENDING_JOBS] [SECONDS]
//! ```
//!
//! 1. Fills the 8 x 8-GPU lab cluster with jobs, queues PENDING_JOBS
//!    (default 200) mixed GPU jobs that cannot start, and lets the main and
//!    backfill schedulers run for SECONDS (default 20): every pass tests each
//!    pending job (RUN_NOW, TEST_ONLY, WILL_RUN).
//! 2. Reads the plugin's own counters from its state file: time in the
//!    engine (mapping, planning, narrowing) and time in the wrapped stock
//!    call, over the same calls. Ratio = (engine + stock) / stock.
//! 3. Runs the same queue on stock cons_tres and compares the backfill
//!    scheduler's mean cycle time (sdiag) of the two clusters.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{Lab, LabOptions};

const SHAPES: [(u32, u32); 6] = [(1, 8), (2, 4), (4, 2), (2, 8), (8, 1), (3, 4)];

fn load(lab: &Lab, pending: usize, seconds: u64) {
    let full: Vec<u32> = (0..8)
        .map(|_| lab.submit(&["-n1", "--gpus-per-task=8", "-t", "60"]))
        .collect();
    lab.wait_running(&full, Duration::from_secs(30));
    for i in 0..pending {
        let (w, g) = SHAPES[i % SHAPES.len()];
        lab.submit(&[
            &format!("-n{w}"),
            &format!("--gpus-per-task={g}"),
            "-t",
            "30",
        ]);
    }
    std::thread::sleep(Duration::from_secs(seconds));
}

/// Mean backfill cycle in microseconds from sdiag.
fn backfill_mean_us(lab: &Lab) -> Option<f64> {
    let out = common::lossy(&lab.run("sdiag", &[]).stdout);
    let after = out.split("Backfilling stats").nth(1)?;
    let field = |name: &str| -> Option<f64> {
        after
            .lines()
            .find(|l| l.trim_start().starts_with(name))?
            .split(':')
            .nth(1)?
            .trim()
            .parse()
            .ok()
    };
    let cycles = field("Total cycles")?;
    let mean = field("Mean cycle")?;
    (cycles > 0.0).then_some(mean)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let pending: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(200);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);

    let compass_bf = {
        let lab = Lab::start(
            "bench-compass",
            LabOptions {
                compass: true,
                ..LabOptions::default()
            },
        );
        load(&lab, pending, seconds);
        let st = lab.state_json();
        let t = &st["job_test"];
        let (calls, engine, stock) = (
            t["calls"].as_u64().unwrap_or(0),
            t["engine_ns"].as_u64().unwrap_or(0),
            t["stock_ns"].as_u64().unwrap_or(0),
        );
        assert!(calls > 0 && stock > 0, "no job_test calls recorded: {st}");
        println!("pending queue: {pending} jobs, {seconds} s of scheduling");
        println!(
            "select_p_job_test calls: {calls}; mean engine {:.1} us + stock cons_tres {:.1} us",
            engine as f64 / calls as f64 / 1e3,
            stock as f64 / calls as f64 / 1e3
        );
        println!(
            "added time ratio (compass job_test / stock job_test, same calls): {:.3}",
            (engine + stock) as f64 / stock as f64
        );
        backfill_mean_us(&lab)
    };
    let stock_bf = {
        let lab = Lab::start(
            "bench-stock",
            LabOptions {
                compass: false,
                ..LabOptions::default()
            },
        );
        load(&lab, pending, seconds);
        backfill_mean_us(&lab)
    };
    match (compass_bf, stock_bf) {
        (Some(c), Some(s)) if s > 0.0 => {
            println!(
                "backfill mean cycle: compass {c:.0} us, stock {s:.0} us, ratio {:.3}",
                c / s
            )
        }
        _ => println!("backfill cycle times not available from sdiag"),
    }
}
