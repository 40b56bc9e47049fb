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

use common::lab::{org_tree, skipped, step_until, Lab, LabSpec, Service, ServiceSpec};
use std::time::Duration;

const PORT_BASE: u32 = 25_470;

#[test]
fn lab_compass_preempts_no_one_beside_slurm_preemption() {
    if skipped("lab_compass_preempts_no_one_beside_slurm_preemption") {
        return;
    }
    let lab = Lab::start(LabSpec {
        tag: "compass-budget-preempt-type",
        port_base: PORT_BASE,
        nodes: 1,
        gpus: 8,
        conf_extra: "PreemptType=preempt/partition_prio\nPreemptMode=REQUEUE\n",
        ..LabSpec::default()
    });
    let Service {
        state, mut cycle, ..
    } = lab.service(ServiceSpec {
        config: "[protection]\nenforce = true\n",
        tree: org_tree(&[("ta", 0.5), ("tb", 0.5)]),
        act: true,
    });
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
