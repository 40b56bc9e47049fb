use compass_core::fairshare::tree::{NodeSpec, OrgTree};
use compass_core::model::ClusterSpec;
use compass_core::sim::budgets::*;
fn main() {
    let text = std::fs::read_to_string("../shared/traces/venus/venus_sample.csv").unwrap();
    let rows = compass_core::trace::read_str(&text, "venus", &Default::default())
        .unwrap()
        .jobs;
    let vcs: Vec<(String, u32)> = std::fs::read_to_string("../shared/traces/venus/vc_config.csv")
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let mut p = l.split(',');
            (
                p.next().unwrap().to_string(),
                p.next().unwrap().parse().unwrap(),
            )
        })
        .collect();
    let mut specs = vec![NodeSpec {
        name: "org".into(),
        parent: None,
        share: 1.0,
        managers: vec![],
        account: None,
    }];
    let total: u32 = vcs.iter().map(|v| v.1).sum();
    for (n, c) in &vcs {
        specs.push(NodeSpec {
            name: format!("t-{n}"),
            parent: Some("org".into()),
            share: *c as f64 / total as f64 * 0.999999,
            managers: vec![],
            account: Some(n.clone()),
        });
    }
    let tree = OrgTree::build(&specs).unwrap();
    let nodes: u32 = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(125);
    let demand: f64 = std::env::args()
        .nth(2)
        .map(|s| s.parse().unwrap())
        .unwrap_or(2.5);
    let policy = std::env::args().nth(3).unwrap_or("compass".into());
    let mut jobs = assign_venus(&rows, &vcs, 8.0 * 3600.0).unwrap();
    scale_demand(&mut jobs, nodes as u64 * 8, demand).unwrap();
    let mut cfg = BudgetSimConfig::new(ClusterSpec::new(nodes, 8).unwrap());
    cfg.policy = policy;
    cfg.horizon_s = Some(30.0 * 86400.0);
    let t = std::time::Instant::now();
    let r = run_budgets(&jobs, &tree, &cfg).unwrap();
    let mut r2 = r.clone();
    r2.teams.clear();
    println!("{:?}\n{}", t.elapsed(), serde_json::to_string(&r2).unwrap());
    for tm in &r.teams {
        println!(
            "{} share {:.3} owed {:.0} delivered {:.3}",
            tm.account, tm.share, tm.owed_gpu_h, tm.owed_delivered
        );
    }
}
