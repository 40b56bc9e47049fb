use compass_core::fairshare::tree::{NodeSpec, OrgTree};
use compass_core::model::{ClusterSpec, JobId, JobShape};
use compass_core::sim::budgets::*;
fn main() {
    let mut specs = vec![NodeSpec {
        name: "org".into(),
        parent: None,
        share: 1.0,
        managers: vec![],
        account: None,
    }];
    for (n, s) in [("a", 0.5), ("b", 0.3), ("c", 0.2)] {
        specs.push(NodeSpec {
            name: format!("t-{n}"),
            parent: Some("org".into()),
            share: s,
            managers: vec![],
            account: Some(n.into()),
        });
    }
    let tree = OrgTree::build(&specs).unwrap();
    let mut jobs = Vec::new();
    for k in 0..200u64 {
        let acct = ["a", "b", "c"][(k % 3) as usize];
        let g = [1, 2, 4, 8][(k % 4) as usize];
        let min = if k % 5 == 0 { 0.0 } else { 0.5 };
        jobs.push(BudgetJob {
            id: JobId(k + 1),
            account: acct.into(),
            submit_s: k as f64 * 360.0,
            duration_s: (1.0 + (k % 7) as f64) * 3600.0,
            shape: JobShape::new(1 + (k % 2) as u32, g),
            min_runtime_s: min * 3600.0,
            resumable: true,
        });
    }
    let mut cfg = BudgetSimConfig::new(ClusterSpec::new(6, 8).unwrap());
    cfg.record = Record::Events;
    let t = std::time::Instant::now();
    let r = run_budgets(&jobs, &tree, &cfg).unwrap();
    println!(
        "{:?} events {} preemptions {} completed {} migrations {}",
        t.elapsed(),
        r.events.len(),
        r.preemptions,
        r.completed,
        r.migrations
    );
    for e in r.events.iter().take(60) {
        println!("{:?}", e);
    }
}
