//! Slurm's own preemption beside compass's enforcement (issue 12), on a
//! real slurmctld: `contrib/slurm-lab.sh` with 1 node x 8 GPUs,
//! `etc/slurm-budget.conf` plus `PreemptType=preempt/partition_prio` and
//! `PreemptMode=REQUEUE`, read through libslurm as the service does. Root
//! only; skipped with a message otherwise. The cluster is always torn down.
//!
//! An unallocated resumable job holds the node and an allocated job of
//! another team waits for it: with `preempt/none` compass requeues the
//! unallocated job within one cycle (`lab_enforce.rs`, section 1). Here
//! Slurm preempts on its own, so compass preempts for no waiting job: the job keeps
//! running through several cycles and `/healthz`'s cycle status says why
//! (`enforcement_held`, `slurm_preemption`). Checked that it fails with
//! `[protection] beside_slurm_preemption = true` (the job is requeued).
//!
//! libslurm is initialised once per process: one test in this file.
//! Ports 25470-25471: clear of the other labs.

mod common;

use common::lab::{service_state, skip_reason, spec, step_until, Lab, LabSpec};
use compass_budget::cycle::Cycle;
use compass_budget::slurm::libslurm::LibSlurm;
use std::sync::Arc;
use std::time::Duration;

const PORT_BASE: u32 = 25_470;

#[test]
fn lab_compass_preempts_no_one_beside_slurm_preemption() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIPPED lab_compass_preempts_no_one_beside_slurm_preemption: {why}");
        return;
    }
    let budget = std::fs::read_to_string(common::lab::repo_root().join("etc/slurm-budget.conf"))
        .expect("etc/slurm-budget.conf");
    let mut conf: String = budget
        .lines()
        .filter(|l| !l.starts_with("MinJobAge"))
        .map(|l| format!("{l}\n"))
        .collect();
    conf.push_str("PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\n");
    let conf_file = std::env::temp_dir().join(format!(
        "compass-budget-preempt-type-{}.conf",
        std::process::id()
    ));
    std::fs::write(&conf_file, conf).expect("write extra conf");
    let lab = Lab::start(LabSpec {
        tag: "compass-budget-preempt-type",
        port_base: PORT_BASE,
        nodes: 1,
        gpus: 8,
        env: vec![("LAB_EXTRA_CONF", conf_file.clone())],
    });
    let _ = std::fs::remove_file(&conf_file);
    let slurm = Arc::new(LibSlurm::new(Some(lab.conf.clone())));
    let state = service_state(
        &lab,
        "[protection]\nenforce = true\n",
        vec![
            spec("org", None, 1.0, None),
            spec("ta", Some("org"), 0.5, Some("ta")),
            spec("tb", Some("org"), 0.5, Some("tb")),
        ],
    );
    let mut cycle =
        Cycle::new(state.clone(), slurm.clone(), slurm.clone()).with_actions(slurm.clone());
    cycle.step().expect("first cycle");

    let free = lab.tagged("tb", 0, true, &["--gres=gpu:8"]);
    step_until(
        &lab,
        &mut cycle,
        "the unallocated job to run",
        Duration::from_secs(60),
        || lab.job_field(free, "JobState") == "RUNNING",
    );
    let waiting = lab.tagged("ta", 600, true, &["--gres=gpu:8"]);
    step_until(
        &lab,
        &mut cycle,
        "the allocated job in compass's queue",
        Duration::from_secs(60),
        || state.queue().order.iter().any(|p| p.job.job.0 == waiting),
    );
    for _ in 0..4 {
        let rep = cycle.step().expect("cycle");
        assert_eq!(
            (rep.enforced.requeued, rep.enforced.cancelled),
            (0, 0),
            "{rep:?}"
        );
        assert!(
            rep.enforcement_held
                .as_deref()
                .is_some_and(|h| h.contains("PreemptType=preempt/partition_prio")),
            "{rep:?}"
        );
    }
    assert_eq!(lab.job_field(free, "JobState"), "RUNNING");
    assert_eq!(lab.job_field(free, "Restarts"), "0");
    assert_eq!(lab.job_field(waiting, "JobState"), "PENDING");
    let st = state.status().clone();
    assert_eq!(
        st.slurm_preemption.as_deref(),
        Some("preempt/partition_prio")
    );
    assert!(st.enforcement_held.is_some(), "{st:?}");
}
