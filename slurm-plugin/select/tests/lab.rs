//! Scenarios of issue 3 on a real Slurm 22.05 cluster (munge, slurmctld, 8
//! slurmd with fake GPUs on this host): the SPANK options at submit, the
//! forwarding select plugin running GPU, non-GPU and out-of-model jobs,
//! placement against stock cons_tres on the same workloads, Compact
//! migrations (requeues) of resumable jobs only, and a slurmctld restart.
//! Assertions read where jobs actually run from Slurm (squeue, sinfo,
//! scontrol show job -d), not from the plugin. Needs root and
//! contrib/install-slurm-deps.sh + contrib/prepare-slurm-source.sh.

mod common;

use std::time::{Duration, Instant};

use common::{Lab, LabOptions, LAB_CONF};

const STOCK: LabOptions = LabOptions {
    compass: false,
    nodes: 8,
    conf: LAB_CONF,
    env: &[],
};
const COMPASS: LabOptions = LabOptions {
    compass: true,
    nodes: 8,
    conf: LAB_CONF,
    env: &[],
};

#[test]
fn spank_options_are_in_sbatch_help_and_validated_at_submit() {
    let lab = Lab::start("spank", COMPASS);
    let help = common::lossy(&lab.run("sbatch", &["--help"]).stdout);
    assert!(help.contains("--min-runtime=DURATION"), "{help}");
    assert!(help.contains("--resumable"), "{help}");

    for bad in ["bogus", "4x", "1:60", "-5", "1.5h", ""] {
        let arg = format!("--min-runtime={bad}");
        let err = lab.sbatch(&[&arg], "true").expect_err(bad);
        assert!(
            err.contains("--min-runtime") && err.contains("`4:00:00`") && err.contains("`30m`"),
            "{bad}: {err}"
        );
    }
    let err = lab.sbatch(&["--min-runtime=9h"], "true").unwrap_err();
    assert!(
        err.contains("--min-runtime=9h exceeds the site cap of 8:00:00"),
        "{err}"
    );
    let err = lab.sbatch(&["--resumable=soon"], "true").unwrap_err();
    assert!(
        err.contains("invalid --resumable value `soon`") && err.contains("--resumable=5m"),
        "{err}"
    );
    assert!(
        lab.run("squeue", &["-h"]).stdout.is_empty(),
        "no refused job was queued"
    );

    // accepted values travel with the job (AdminComment, via job_submit.lua)
    for (args, want) in [
        (
            vec!["--min-runtime=4h", "--resumable"],
            "compass:min_runtime=14400,resumable=1",
        ),
        (
            vec!["--min-runtime=90"],
            "compass:min_runtime=5400,resumable=0",
        ),
        (
            vec!["--min-runtime=0-2"],
            "compass:min_runtime=7200,resumable=0",
        ),
        (vec![], "compass:min_runtime=0,resumable=0"),
        (
            vec!["--resumable=5m"],
            "compass:min_runtime=0,resumable=1,migration_cost=300",
        ),
    ] {
        let id = lab.submit(&args);
        let show = lab.show_job(id);
        assert!(
            show.contains(&format!("AdminComment={want}")),
            "{args:?}: {show}"
        );
    }
}

#[test]
fn a_bad_spank_config_fails_only_our_own_options() {
    let lab = Lab::start("spank-bad-conf", COMPASS);
    let conf = lab.dir.join("etc/compass.conf");
    let good = std::fs::read_to_string(&conf).unwrap();
    let ran = |name: &str, args: &[&str], hold_then: Option<&dyn Fn()>| {
        let out = lab.dir.join(format!("{name}.out"));
        let o = out.display().to_string();
        let mut a = vec!["-n1", "--gpus-per-task=1", "-o", &o];
        a.extend_from_slice(args);
        let id = lab
            .sbatch(&a, "echo batch-ok; srun echo step-ok")
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(f) = hold_then {
            f();
            assert!(lab
                .run("scontrol", &["release", &id.to_string()])
                .status
                .success());
        }
        lab.wait_until(
            &format!("{name} ran its batch step and a job step"),
            Duration::from_secs(20),
            || {
                lab.job(id).0 == "GONE"
                    && std::fs::read_to_string(&out)
                        .is_ok_and(|t| t.contains("batch-ok") && t.contains("step-ok"))
            },
        );
        id
    };
    // accepted with a good config, run under a broken one: its steps run
    let broken = "[spank\nmax_min_runtime = \n";
    ran(
        "accepted-before",
        &["--min-runtime=1h", "--resumable", "-H"],
        Some(&|| std::fs::write(&conf, broken).unwrap()),
    );

    // an unparsable file: plain jobs and their steps run
    ran("plain", &[], None);
    for (opt, arg) in [
        ("--min-runtime", "--min-runtime=1h"),
        ("--resumable", "--resumable"),
    ] {
        let err = lab.sbatch(&[arg], "true").unwrap_err();
        assert!(
            err.contains(&format!(
                "{opt} cannot be used: the site config is unusable"
            )) && err.contains(&conf.display().to_string()),
            "{err}"
        );
    }

    // unknown sections and keys: ignored with a warning; the rest applies
    let with_unknown =
        good.replace("[spank]\n", "[spank]\nmax_runtime = \"1h\"\n") + "\n[future]\nknob = 1\n";
    assert_ne!(with_unknown, good);
    std::fs::write(&conf, &with_unknown).unwrap();
    let id = ran(
        "unknown-keys",
        &["--min-runtime=4h", "--resumable=5m"],
        None,
    );
    assert!(
        lab.show_job(id)
            .contains("AdminComment=compass:min_runtime=14400,resumable=1,migration_cost=300"),
        "{}",
        lab.show_job(id)
    );
    let err = lab.sbatch(&["--min-runtime=9h"], "true").unwrap_err();
    assert!(err.contains("exceeds the site cap of 8:00:00"), "{err}");
    let v = lab.run(
        "sbatch",
        &["-v", "--parsable", "-o", "/dev/null", "--wrap", "true"],
    );
    assert!(v.status.success());
    let stderr = common::lossy(&v.stderr);
    assert!(
        stderr.contains("unknown key `spank.max_runtime` ignored")
            && stderr.contains("unknown section `future` ignored"),
        "{stderr}"
    );
}

#[test]
fn a_compass_conf_that_does_not_load_leaves_plain_cons_tres_of_the_release_named() {
    // On a release other than Debian's 22.05 the lab's compass.conf names
    // that release's cons_tres (`select.stock_plugin`). A file that did not
    // load used to fall back to the default path, Debian's 22.05 cons_tres:
    // its entry points would be called with another release's structs.
    let lab = Lab::start("select-bad-conf", COMPASS);
    let conf = lab.dir.join("etc/compass.conf");
    let good = std::fs::read_to_string(&conf).unwrap();
    // A value out of range: the file does not load as a whole.
    let bad = good.replace("[select]\n", "[select]\npayback = 0.5\n");
    assert_ne!(bad, good);
    std::fs::write(&conf, &bad).unwrap();
    lab.restart_ctld();
    let log = lab.ctld_log();
    assert!(
        log.contains("select.payback = 0.5")
            && log.contains("the compass engine is disabled (plain cons_tres)"),
        "{}",
        lab.debug()
    );
    assert!(
        !log.contains("cannot load the stock cons_tres"),
        "{}",
        lab.debug()
    );
    // A GPU job runs, under plain cons_tres of the running release.
    let out = lab.dir.join("gpu-job.out");
    let o = out.display().to_string();
    let id = lab
        .sbatch(&["-N1", "--gpus-per-node=8", "-o", &o], "echo gpu-job-ran")
        .expect("submit");
    lab.wait_until("the GPU job ran", Duration::from_secs(30), || {
        lab.job(id).0 == "GONE"
            && std::fs::read_to_string(&out).is_ok_and(|t| t.contains("gpu-job-ran"))
    });
}

#[test]
fn the_values_reach_the_job_environment() {
    let lab = Lab::start("spank-env", COMPASS);
    let out = lab.dir.join("env.txt");
    let o = out.display().to_string();
    let id = lab
        .sbatch(&["--min-runtime=30m", "--resumable", "-o", &o], "env")
        .expect("submit");
    lab.wait_until(
        "the job wrote its environment",
        Duration::from_secs(15),
        || {
            lab.job(id).0 == "GONE"
                && std::fs::read_to_string(&out).is_ok_and(|t| t.contains("SLURM_JOB_ID"))
        },
    );
    let env = std::fs::read_to_string(&out).unwrap();
    assert!(
        env.contains("SLURM_SPANK_COMPASS_MIN_RUNTIME=1800"),
        "{env}"
    );
    assert!(env.contains("SLURM_SPANK_COMPASS_RESUMABLE=1"), "{env}");
}

#[test]
fn a_job_submitted_from_a_resumable_job_is_accepted() {
    // Slurm exports a plain `--resumable` (no value) into the job as
    // SLURM_SPANK__SLURM_SPANK_OPTION_compass_resumable=(null), and an
    // `sbatch` inside the job applies it: the option callback got the
    // text "(null)" as a migration cost and refused, so a job that
    // resubmits itself (a checkpoint chain, the resumable jobs' own use)
    // could not.
    // The inner job inherits both options (docs/user-guide.md, "Jobs
    // submitted from inside a job").
    let lab = Lab::start("spank-nested", COMPASS);
    let out = lab.dir.join("nested.txt");
    let inner = lab.dir.join("inner.txt");
    let sbatch = common::client("sbatch").display().to_string();
    let script = format!(
        "{sbatch} --parsable -o {} --wrap env && echo nested-ok || echo nested-failed",
        inner.display()
    );
    let args = [
        "--resumable",
        "--min-runtime=30m",
        "-o",
        &out.display().to_string(),
    ];
    let id = lab.sbatch(&args, &script).expect("submit");
    lab.wait_until("the outer job ended", Duration::from_secs(20), || {
        lab.job(id).0 == "GONE" && std::fs::read_to_string(&out).is_ok_and(|t| t.contains("nested"))
    });
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("nested-ok"), "{text}");
    lab.wait_until("the inner job ran", Duration::from_secs(20), || {
        std::fs::read_to_string(&inner).is_ok_and(|t| t.contains("SLURM_JOB_ID"))
    });
    let env = std::fs::read_to_string(&inner).unwrap();
    assert!(env.contains("SLURM_SPANK_COMPASS_RESUMABLE=1"), "{env}");
    assert!(
        env.contains("SLURM_SPANK_COMPASS_MIN_RUNTIME=1800"),
        "{env}"
    );
}

#[test]
fn narrowing_stays_within_drained_nodes_exclusions_and_reservations() {
    let lab = Lab::start("candidates", COMPASS);
    let ok = |args: &[&str]| {
        assert!(
            lab.run("scontrol", args).status.success(),
            "scontrol {args:?}"
        )
    };
    ok(&[
        "update",
        "nodename=n[1-6]",
        "state=drain",
        "reason=compass-test",
    ]);
    let a = lab.submit(&["-n1", "--gpus-per-task=4"]);
    lab.wait_running(&[a], Duration::from_secs(15));
    let na = lab.job(a).1;
    assert!(
        na == "n7" || na == "n8",
        "drained nodes are never chosen: {na}"
    );
    ok(&["update", "nodename=n[1-6]", "state=resume"]);

    // the engine would pair the next 4-GPU instance with `a`; --exclude wins
    let b = lab.submit(&["-n1", "--gpus-per-task=4", &format!("--exclude={na}")]);
    lab.wait_running(&[b], Duration::from_secs(15));
    assert_ne!(lab.job(b).1, na);

    ok(&[
        "create",
        "reservation=compass",
        "nodes=n5,n6",
        "starttime=now",
        "duration=10",
        "users=root",
    ]);
    let c = lab.submit(&["-n2", "--gpus-per-task=8", "--reservation=compass"]);
    lab.wait_running(&[c], Duration::from_secs(15));
    assert_eq!(lab.job(c).1, "n[5-6]");
    let log = lab.ctld_log();
    for j in [a, b, c] {
        assert!(
            log.contains(&format!("job_test job {j} mode 0: narrowed")),
            "job {j}\n{}",
            lab.debug()
        );
    }
}

#[test]
fn forwarder_runs_gpu_non_gpu_and_out_of_model_jobs() {
    let lab = Lab::start("forward", COMPASS);
    let no_gpu = lab.submit(&["-n4"]);
    let tasks = lab.submit(&["-n2", "--gpus-per-task=2"]);
    let spread = lab.submit(&["-n3", "--gpus=3"]);
    let per_node = lab.submit(&["-N2", "--gres=gpu:8", "--ntasks-per-node=1"]);
    let tpn = lab.submit(&["-N2", "--ntasks-per-node=2", "--gpus-per-task=2"]);
    lab.wait_running(
        &[no_gpu, tasks, spread, per_node, tpn],
        Duration::from_secs(20),
    );

    assert!(
        !lab.show_job(no_gpu).contains("GRES=gpu"),
        "{}",
        lab.show_job(no_gpu)
    );
    assert!(
        lab.show_job(tasks).contains("GRES=gpu:4"),
        "{}",
        lab.show_job(tasks)
    );
    assert!(
        lab.show_job(spread).contains("GRES=gpu:3"),
        "{}",
        lab.show_job(spread)
    );
    let pn = lab.show_job(per_node);
    assert!(
        pn.contains("NumNodes=2") && pn.contains("GRES=gpu:8(IDX:0-7)"),
        "{pn}"
    );
    let t = lab.show_job(tpn);
    assert!(t.contains("NumNodes=2") && t.contains("GRES=gpu:4"), "{t}");
    let used: u32 = lab.gpus_used().iter().map(|(_, u)| u).sum();
    assert_eq!(used, 4 + 3 + 16 + 8);

    let log = lab.ctld_log();
    for j in [tasks, tpn, per_node] {
        assert!(
            log.contains(&format!("job_test job {j} mode 0: narrowed")),
            "job {j}\n{}",
            lab.debug()
        );
    }
    lab.wait_until(
        "state file lists the 5 jobs",
        Duration::from_secs(5),
        || {
            std::fs::metadata(lab.dir.join("run/compass-state.json")).is_ok()
                && lab.state_json()["jobs"].as_array().map(|j| j.len()) == Some(5)
        },
    );
    let state = lab.state_json();
    assert!(state["engine_error"].is_null(), "{state}");
    let foreign = |id: u32| {
        state["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == id)
            .map(|j| j["foreign"].as_bool().unwrap())
    };
    assert_eq!(
        foreign(spread),
        Some(true),
        "--gpus=3 over nodes is outside the model"
    );
    assert_eq!(foreign(tasks), Some(false));
    assert_eq!(foreign(tpn), Some(false));
    assert_eq!(foreign(no_gpu), Some(false));
}

/// The abstract's example on 3 nodes: 24 one-GPU jobs fill the cluster, 3, 5
/// and 2 of them end on n1, n2, n3. Returns the id of the 2 x 4-GPU job
/// submitted then, and the one-GPU jobs left.
fn abstract_workload(lab: &Lab) -> (u32, Vec<u32>) {
    let ids: Vec<u32> = (0..24)
        .map(|_| lab.submit(&["-n1", "--gpus-per-task=1", "--resumable"]))
        .collect();
    lab.wait_running(&ids, Duration::from_secs(30));
    let mut cancel = Vec::new();
    for (node, k) in [("n1", 3), ("n2", 5), ("n3", 2)] {
        let on: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&j| lab.job(j).1 == node)
            .take(k)
            .collect();
        assert_eq!(
            on.len(),
            k,
            "{node} holds {k} one-GPU jobs\n{}",
            lab.debug()
        );
        cancel.extend(on);
    }
    let args: Vec<String> = cancel.iter().map(|j| j.to_string()).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(lab.run("scancel", &args).status.success());
    let left = ids.into_iter().filter(|j| !cancel.contains(j)).collect();
    (
        lab.submit(&["-n2", "--gpus-per-task=4", "--resumable"]),
        left,
    )
}

#[test]
fn abstract_example_stock_cons_tres_blocks_the_two_by_four_job() {
    let lab = Lab::start(
        "abstract-stock",
        LabOptions {
            compass: false,
            nodes: 3,
            conf: LAB_CONF,
            env: &[],
        },
    );
    let (big, _) = abstract_workload(&lab);
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(lab.job(big).0, "PENDING", "{}", lab.debug());
    let free: Vec<u32> = lab.gpus_used().iter().map(|(_, u)| 8 - u).collect();
    assert_eq!(
        free,
        vec![3, 5, 2],
        "10 free GPUs, but no two nodes with 4 free"
    );
}

#[test]
fn abstract_example_compass_never_keeps_the_fragmented_layout() {
    let lab = Lab::start(
        "abstract-compass",
        LabOptions {
            compass: true,
            nodes: 3,
            conf: LAB_CONF,
            env: &[],
        },
    );
    let (big, mut left) = abstract_workload(&lab);
    left.push(big);
    lab.wait_running(&left, Duration::from_secs(30));
    let free: Vec<u32> = lab.gpus_used().iter().map(|(_, u)| 8 - u).collect();
    assert_eq!(free.iter().sum::<u32>(), 2, "{free:?}");
    assert!(lab.partial_nodes(8) <= 1, "{}", lab.debug());
    assert!(
        lab.ctld_log().contains("migration of job"),
        "Compact requeued one-GPU jobs"
    );
}

/// Does the plugin's published state hold exactly `jobs`, none of them
/// with a migration pending? Always true in a stock lab (no state file).
fn engine_holds(lab: &Lab, jobs: &[u32]) -> bool {
    if !lab.dir.join("run/compass-state.json").exists() {
        return true;
    }
    let s = lab.state_json();
    let mut held: Vec<u64> = s["jobs"]
        .as_array()
        .map(|a| a.iter().filter_map(|j| j["id"].as_u64()).collect())
        .unwrap_or_default();
    held.sort_unstable();
    let mut want: Vec<u64> = jobs.iter().map(|&j| u64::from(j)).collect();
    want.sort_unstable();
    let pending = s["pending_migrations"].as_array().map_or(0, Vec::len);
    held == want && pending == 0
}

/// A mixed 1/2/4/8-GPU workload, then every other job ends. Returns the
/// partial nodes left once the cluster settled.
fn mixed_workload(lab: &Lab, settle: Duration) -> usize {
    let sizes = [8, 4, 2, 1, 4, 2, 1, 8, 4, 2, 1, 4, 2, 1, 4, 1, 2, 4, 1, 2];
    let ids: Vec<u32> = sizes
        .iter()
        .map(|g| lab.submit(&["-n1", &format!("--gpus-per-task={g}"), "--resumable"]))
        .collect();
    lab.wait_running(&ids, Duration::from_secs(30));
    let gone: Vec<String> = ids
        .iter()
        .skip(1)
        .step_by(2)
        .map(|j| j.to_string())
        .collect();
    let args: Vec<&str> = gone.iter().map(String::as_str).collect();
    assert!(lab.run("scancel", &args).status.success());
    let left: Vec<u32> = ids.iter().step_by(2).copied().collect();
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    // Settled: every remaining job running, and (compass) the engine holds
    // exactly them with no migration pending, for 2 s. Slurm tells the
    // plugin a cancelled job is gone when its nodes report it done, which
    // Slurm 24.11 took more than 3 s to do on a loaded CI machine: with
    // squeue alone this checked before Compact had seen any job end.
    let mut stable_since = None;
    while t0.elapsed() < settle {
        let settled = left.iter().all(|&j| lab.job(j).0 == "RUNNING") && engine_holds(lab, &left);
        if settled {
            let s = *stable_since.get_or_insert_with(Instant::now);
            if s.elapsed() > Duration::from_secs(2) {
                break;
            }
        } else {
            stable_since = None;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    lab.wait_running(&left, Duration::from_secs(5));
    let used: u32 = lab.gpus_used().iter().map(|(_, u)| u).sum();
    let want: u32 = sizes.iter().step_by(2).sum();
    assert_eq!(used, want, "no job lost\n{}", lab.debug());
    lab.partial_nodes(8)
}

#[test]
fn mixed_workload_stock_cons_tres_leaves_several_partial_nodes() {
    let lab = Lab::start("mixed-stock", STOCK);
    let partial = mixed_workload(&lab, Duration::from_secs(3));
    assert!(
        partial >= 3,
        "stock cons_tres: {partial} partial nodes\n{}",
        lab.debug()
    );
}

#[test]
fn mixed_workload_compass_leaves_at_most_two_partial_nodes() {
    let lab = Lab::start("mixed-compass", COMPASS);
    let partial = mixed_workload(&lab, Duration::from_secs(30));
    assert!(
        partial <= 2,
        "compass: {partial} partial nodes\n{}",
        lab.debug()
    );
    // The plugin checks the engine's invariants every 10 s. Nor any other
    // error of the plugin: a job migrated while the workload arrived and
    // then cancelled before it restarted (most runs under 24.11) has no
    // priority to give back, which is no error.
    std::thread::sleep(Duration::from_secs(10));
    let log = lab.ctld_log();
    assert!(
        !log.contains("engine invariant violated") && !log.contains("error: compass"),
        "{}",
        lab.debug()
    );
}

/// Three 1 x 4-GPU jobs: two share a node, one is alone. The first ends.
/// Returns (moved-or-not job ids, their nodes before) for the caller.
fn departure(lab: &Lab, resumable: bool) -> (u32, u32, String, String) {
    let mut args = vec!["-n1", "--gpus-per-task=4"];
    if resumable {
        // A nice the migration must give back (Slurm's priority recompute
        // resets it).
        args.extend(["--resumable", "--nice=7"]);
    }
    let a = lab.submit(&args);
    let b = lab.submit(&args);
    let c = lab.submit(&args);
    lab.wait_running(&[a, b, c], Duration::from_secs(15));
    let (na, nb, nc) = (lab.job(a).1, lab.job(b).1, lab.job(c).1);
    assert_eq!(
        na,
        nb,
        "the engine pairs two 4-GPU instances on one node\n{}",
        lab.debug()
    );
    assert_ne!(nb, nc);
    assert_eq!(lab.partial_nodes(8), 1);
    assert!(lab.run("scancel", &[&a.to_string()]).status.success());
    (b, c, nb, nc)
}

#[test]
fn departure_requeues_a_resumable_job_onto_the_planned_node_within_5s() {
    let lab = Lab::start("migrate", COMPASS);
    let (b, c, nb, nc) = departure(&lab, true);
    let t0 = Instant::now();
    let waited = lab.wait_until(
        "B and C share one node again",
        Duration::from_secs(15),
        || {
            let (sb, xb) = lab.job(b);
            let (sc, xc) = lab.job(c);
            sb == "RUNNING" && sc == "RUNNING" && xb == xc
        },
    );
    assert!(
        waited <= Duration::from_secs(5),
        "restarted {:?} after the departure",
        t0.elapsed()
    );
    let (xb, xc) = (lab.job(b).1, lab.job(c).1);
    // exactly one of them moved, onto the node of the other
    let moved = if xb != nb { b } else { c };
    assert!(
        (xb == nc && moved == b) || (xc == nb && moved == c),
        "{}",
        lab.debug()
    );
    assert!(
        lab.show_job(moved).contains("Restarts=1"),
        "{}",
        lab.show_job(moved)
    );
    let stayed = if moved == b { c } else { b };
    assert!(lab.show_job(stayed).contains("Restarts=0"));
    assert_eq!(lab.partial_nodes(8), 0, "{}", lab.debug());
    // The migrated job was first in the queue until it restarted, then got
    // its computed priority and its nice back.
    assert!(
        lab.ctld_log().contains(&format!(
            "migration of job {moved}: requeued, pinned to its planned nodes, eligible now, first in the queue until it restarts; target {}",
            lab.job(moved).1
        )),
        "{}",
        lab.debug()
    );
    lab.wait_until(
        "the moved job's priority is computed again, with its nice",
        Duration::from_secs(10),
        || {
            let show = lab.show_job(moved);
            !show.contains("Priority=4294967040") && show.contains("Nice=7")
        },
    );
}

#[test]
fn a_migration_whose_target_has_no_cpus_left_restarts_elsewhere_within_the_hold_limit() {
    // A (1 CPU), B and C (4 CPUs each), 4 GPUs each, resumable: A and B
    // share a node, C is alone. CPU-only jobs take every other CPU of both
    // nodes. When A ends, Compact (which models GPUs only) moves B or C
    // next to the other, but Slurm cannot start it there: no CPUs left.
    // Before the hold limit the moved job waited for its pin to expire
    // (60 s), first in the queue; now its pin is dropped after
    // HOLD_LIMIT_S (10 s) of refusals and Slurm places it.
    let lab = Lab::start("busy-target", COMPASS);
    let gpu = ["-n1", "--gpus-per-task=4", "--resumable"];
    let a = lab.submit(&[&gpu[..], &["-c1"]].concat());
    let b = lab.submit(&[&gpu[..], &["-c4"]].concat());
    let c = lab.submit(&[&gpu[..], &["-c4"]].concat());
    lab.wait_running(&[a, b, c], Duration::from_secs(15));
    let (na, nb, nc) = (lab.job(a).1, lab.job(b).1, lab.job(c).1);
    assert_eq!(na, nb, "{}", lab.debug());
    assert_ne!(nb, nc);
    let x1 = lab.submit(&["-w", &nb, "-n27"]);
    let x2 = lab.submit(&["-w", &nc, "-n28"]);
    lab.wait_running(&[x1, x2], Duration::from_secs(15));
    assert!(lab.run("scancel", &[&a.to_string()]).status.success());
    let mut moved = 0;
    lab.wait_until(
        "B or C requeued for a migration",
        Duration::from_secs(20),
        || {
            let log = lab.ctld_log();
            moved = [b, c]
                .into_iter()
                .find(|j| log.contains(&format!("migration of job {j}: requeued")))
                .unwrap_or(0);
            moved != 0
        },
    );
    let t0 = Instant::now();
    lab.wait_until(
        "the moved job runs again (before the fix: its pin expired after 60 s)",
        Duration::from_secs(45),
        || lab.job(moved).0 == "RUNNING",
    );
    assert!(
        lab.ctld_log().contains(&format!("job {moved}: held ")),
        "{:?} after its requeue\n{}",
        t0.elapsed(),
        lab.debug()
    );
    assert!(lab
        .ctld_log()
        .contains("for planned nodes that are not free; hold dropped with its migration's pin"));
    assert!(
        lab.show_job(moved).contains("Restarts=1"),
        "{}",
        lab.show_job(moved)
    );
}

#[test]
fn departure_never_touches_a_job_that_is_not_resumable() {
    let lab = Lab::start("no-migrate", COMPASS);
    let (b, c, nb, nc) = departure(&lab, false);
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(lab.job(b), ("RUNNING".to_string(), nb));
    assert_eq!(lab.job(c), ("RUNNING".to_string(), nc));
    assert!(lab.show_job(b).contains("Restarts=0") && lab.show_job(c).contains("Restarts=0"));
    assert!(
        !lab.ctld_log().contains("migration of job"),
        "{}",
        lab.debug()
    );
}

/// Slurm asks "could this job ever run?" (TEST_ONLY) when a job cannot
/// start at once; the engine's plan for *now* must not answer it. A valid
/// job was refused at submit with "Requested node configuration is not
/// available" (Slurm's test39.15 under contrib/slurm-testsuite.sh, on the
/// plugin before TEST_ONLY was left unnarrowed). This guard runs a job that
/// cannot start now on both labs; it does not reproduce that exact refusal
/// (the unit test `modes_are_read_from_the_low_byte_and_test_only_is_never_narrowed`
/// pins the rule).
#[test]
fn a_job_that_cannot_start_now_is_queued_not_refused() {
    for opts in [STOCK, COMPASS] {
        let compass = opts.compass;
        let lab = Lab::start("test-only-never-narrowed", opts);
        let whole: Vec<u32> = (0..6)
            .map(|_| lab.submit(&["--ntasks=1", "--gpus-per-task=8"]))
            .collect();
        lab.wait_running(&whole, Duration::from_secs(20));
        let spread = lab.sbatch(&["--nodes=3", "--gpus-per-task=1", "-t1"], "sleep 1");
        let id = spread.unwrap_or_else(|e| {
            panic!(
                "compass={compass}: a job that fits 3 of 8 nodes was refused: {e}\n{}",
                lab.debug()
            )
        });
        let (state, _) = lab.job(id);
        assert!(
            ["PENDING", "RUNNING", "COMPLETING", "GONE"].contains(&state.as_str()),
            "compass={compass}: job {id} is {state}"
        );
        // Once the cluster frees, it runs to the end.
        for j in &whole {
            lab.run("scancel", &[&j.to_string()]);
        }
        lab.wait_until("the 3-node job completed", Duration::from_secs(60), || {
            lab.job(id).0 == "GONE"
        });
        let show = lab.show_job(id);
        assert!(
            show.contains("JobState=COMPLETED"),
            "compass={compass}: {show}"
        );
    }
}

#[test]
fn a_protected_job_is_not_migrated_before_its_min_runtime() {
    // A and B share a node, C is alone, all resumable; B is protected for
    // an hour. When A ends, B stays and C moves onto B's node.
    let lab = Lab::start("min-runtime-protects", COMPASS);
    let args = ["-n1", "--gpus-per-task=4", "--resumable"];
    let a = lab.submit(&args);
    let b = lab.submit(&[&args[..], &["--min-runtime=1h"]].concat());
    let c = lab.submit(&args);
    lab.wait_running(&[a, b, c], Duration::from_secs(15));
    let (na, nb, nc) = (lab.job(a).1, lab.job(b).1, lab.job(c).1);
    assert_eq!(na, nb, "{}", lab.debug());
    assert_ne!(nb, nc);
    lab.wait_until(
        "the state file counts B as protected",
        Duration::from_secs(10),
        || lab.state_json()["kept_still"]["protected"].as_u64() == Some(1),
    );
    assert!(lab.run("scancel", &[&a.to_string()]).status.success());
    lab.wait_until("C restarted on B's node", Duration::from_secs(20), || {
        lab.job(c) == ("RUNNING".to_string(), nb.clone())
    });
    assert_eq!(lab.job(b), ("RUNNING".to_string(), nb.clone()));
    never_migrated(&lab, b);
}

/// The node lists job `id` started on, in order, from slurmctld.log (the
/// main scheduler's `Allocate` and backfill's `Started` lines).
fn starts_of(lab: &Lab, id: u32) -> Vec<String> {
    let alloc = format!("Allocate JobId={id} NodeList=");
    let started = format!("Started JobId={id} in ");
    lab.ctld_log()
        .lines()
        .filter_map(|l| {
            if let Some(i) = l.find(&alloc) {
                return l[i + alloc.len()..].split_whitespace().next();
            }
            let i = l.find(&started)?;
            l[i + started.len()..]
                .split(" on ")
                .nth(1)?
                .split_whitespace()
                .next()
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn a_job_whose_tasks_may_share_a_node_starts_and_moves_as_planned() {
    // Slurm's testsuite run (issue #11, defect 2): a `--ntasks=2
    // --gpus-per-task=2` job planned on two nodes was packed by cons_tres
    // on one of them, and each migration toward the plan landed on the node
    // it left. A (2 GPUs, 15 s) and B (4 GPUs) share n1; C (2 x 2,
    // resumable) is planned on n1's last two GPUs and a second node, and
    // must start there; when A ends, C's lone instance joins n1 in one
    // migration, never a restart where it was.
    let lab = Lab::start("spread", COMPASS);
    let a = lab
        .sbatch(&["-n1", "--gpus-per-task=2"], "sleep 15")
        .unwrap();
    let b = lab.submit(&["-n1", "--gpus-per-task=4"]);
    lab.wait_running(&[a, b], Duration::from_secs(15));
    let n1 = lab.job(b).1;
    assert_eq!(lab.job(a).1, n1, "{}", lab.debug());
    let c = lab.submit(&["--ntasks=2", "--gpus-per-task=2", "--resumable"]);
    lab.wait_running(&[c], Duration::from_secs(15));
    let first = lab.job(c).1;
    assert!(
        lab.ctld_log().contains(&format!(
            "job_test job {c} mode 0: narrowed 8 -> 2 nodes, spread over 2"
        )),
        "{}",
        lab.debug()
    );
    let used = lab.gpus_used();
    let on = |node: &str| used.iter().find(|(n, _)| n == node).map_or(0, |u| u.1);
    assert_eq!(on(&n1), 8, "C's first instance fills n1\n{}", lab.debug());
    assert_ne!(first, n1, "C spreads over two nodes\n{}", lab.debug());
    lab.wait_until("C joins B on n1", Duration::from_secs(40), || {
        lab.job(c) == ("RUNNING".to_string(), n1.clone()) && lab.job(a).0 == "GONE"
    });
    let starts = starts_of(&lab, c);
    assert_eq!(
        starts.len(),
        2,
        "one migration: {starts:?}\n{}",
        lab.debug()
    );
    assert!(
        starts.windows(2).all(|w| w[0] != w[1]),
        "a migration landed where it started: {starts:?}\n{}",
        lab.debug()
    );
    assert_eq!(lab.partial_nodes(8), 0, "{}", lab.debug());
}

/// A (4 GPUs, 2-minute limit) and B (4 GPUs, 1-minute limit, ends after
/// `b_s` seconds), not resumable, fill one node X; C (2 GPUs, resumable)
/// runs alone on Y; with `fill_others`, a job of 8 GPUs fills each other
/// node. Returns the lab, `[A, B, C]`, X and Y.
fn x_full_and_c_alone(name: &str, b_s: u32, fill_others: bool) -> (Lab, [u32; 3], String, String) {
    let lab = Lab::start(name, COMPASS);
    let a = lab.submit(&["-n1", "--gpus-per-task=4", "-t", "2"]);
    let b = lab
        .sbatch(
            &["-n1", "--gpus-per-task=4", "-t", "1"],
            &format!("sleep {b_s}"),
        )
        .unwrap();
    lab.wait_running(&[a, b], Duration::from_secs(15));
    let x = lab.job(a).1;
    assert_eq!(lab.job(b).1, x, "{}", lab.debug());
    let c = lab.submit(&["-n1", "--gpus-per-task=2", "--resumable"]);
    lab.wait_running(&[c], Duration::from_secs(15));
    let y = lab.job(c).1;
    assert_ne!(y, x, "{}", lab.debug());
    if fill_others {
        let full: Vec<u32> = (0..6)
            .map(|_| lab.submit(&["-n1", "--gpus-per-task=8"]))
            .collect();
        lab.wait_running(&full, Duration::from_secs(20));
    }
    (lab, [a, b, c], x, y)
}

/// `job` never restarted (`Restarts=0`) and the plugin never requeued it
/// (no `migration of job N` line, any N that begins so).
fn never_migrated(lab: &Lab, job: u32) {
    assert!(
        lab.show_job(job).contains("Restarts=0"),
        "{}",
        lab.show_job(job)
    );
    assert!(
        !lab.ctld_log().contains(&format!("migration of job {job}")),
        "{}",
        lab.debug()
    );
}

/// `job` keeps running on `node` for the next 10 s (Compact runs within a
/// second of the event before); `what` names the failure.
fn stays_on(lab: &Lab, job: u32, node: &str, what: &str) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        assert_eq!(
            lab.job(job),
            ("RUNNING".to_string(), node.to_string()),
            "{what}\n{}",
            lab.debug()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// D waits for X and X is kept for it: A's end would move C onto X, the
/// fuller node; while D waits nothing moves there (C stays on Y), and D
/// starts on X when B ends.
fn x_is_kept_until_d_starts(lab: &Lab, [a, _, c]: [u32; 3], x: &str, y: &str, d: u32) {
    lab.wait_until("X kept for D", Duration::from_secs(20), || {
        lab.ctld_log().contains(&format!(
            "job {d} waits for node(s) {x}: no migration onto them"
        ))
    });
    assert_eq!(lab.job(d).0, "PENDING", "{}", lab.debug());
    assert!(lab.run("scancel", &[&a.to_string()]).status.success());
    stays_on(lab, c, y, "C moved while D waited for X");
    lab.wait_until("D ran", Duration::from_secs(40), || {
        !starts_of(lab, d).is_empty()
    });
    assert_eq!(starts_of(lab, d), vec![x.to_string()], "{}", lab.debug());
    never_migrated(lab, c);
}

#[test]
fn a_node_a_waiting_job_names_takes_no_migration_until_it_starts() {
    // Slurm's testsuite run (issue #11): test1.84's `srun --exclusive -w
    // n3` waited 120 s while Compact moved five jobs onto n3, each
    // restarting first in the queue. D (no GPUs) names X: `--exclusive -w
    // X`.
    let (lab, jobs, x, y) = x_full_and_c_alone("keep-named", 25, false);
    let d = lab
        .sbatch(&["-n1", "--exclusive", "-w", &x], "sleep 3")
        .unwrap();
    x_is_kept_until_d_starts(&lab, jobs, &x, &y, d);
}

#[test]
fn the_node_slurm_plans_for_a_restricted_exclusive_job_takes_no_migration() {
    // Slurm's test17.12 under compass (issue #11): an `--exclusive -C
    // feat1` job waited 135 s while three migrations restarted jobs on its
    // node. Only X has feature `f`; D (no GPUs, `--exclusive -C f`) names
    // no node, but backfill plans it on X, the one node it may use.
    let (lab, jobs, x, y) = x_full_and_c_alone("keep-feature", 25, false);
    let set = lab.run(
        "scontrol",
        &[
            "update",
            &format!("NodeName={x}"),
            "AvailableFeatures=f",
            "ActiveFeatures=f",
        ],
    );
    assert!(set.status.success(), "{set:?}");
    let d = lab
        .sbatch(&["-n1", "--exclusive", "-C", "f"], "sleep 3")
        .unwrap();
    x_is_kept_until_d_starts(&lab, jobs, &x, &y, d);
}

#[test]
fn a_waiting_exclusive_job_takes_the_node_a_migration_empties() {
    // Every node busy; X empties first (A's and B's limits), so backfill
    // plans D, `--exclusive` without a node list or a constraint, on X.
    // Nothing is kept for a job that may use any node: A's end moves C onto
    // X, which empties Y, and D starts there at once, before B ends and X
    // could take it.
    let (lab, [a, b, c], x, y) = x_full_and_c_alone("keep-exclusive", 50, true);
    let d = lab.sbatch(&["-n1", "--exclusive"], "sleep 3").unwrap();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(lab.job(d).0, "PENDING", "{}", lab.debug());
    assert!(lab.run("scancel", &[&a.to_string()]).status.success());
    lab.wait_until("D ran", Duration::from_secs(30), || {
        !starts_of(&lab, d).is_empty()
    });
    assert_eq!(starts_of(&lab, d), vec![y.clone()], "{}", lab.debug());
    assert_eq!(lab.job(b).0, "RUNNING", "{}", lab.debug());
    lab.wait_running(&[c], Duration::from_secs(15));
    assert_eq!(lab.job(c).1, x, "{}", lab.debug());
    assert!(
        lab.show_job(c).contains("Restarts=1"),
        "{}",
        lab.show_job(c)
    );
    assert!(!lab
        .ctld_log()
        .contains(&format!("job {d} waits for node(s)")));
}

#[test]
fn a_resumable_job_that_names_its_node_is_never_migrated_off_it() {
    // A and B (4 GPUs each, not resumable) share X; C (4 GPUs, resumable,
    // `-w Y`) runs on Y. A's end leaves two half nodes, and C is the only
    // job free to move: moved onto X, it could not restart there (Slurm
    // starts it on a set that includes Y), so after the hold it would
    // restart on Y, a requeue for nothing. The engine holds it on Y.
    let lab = Lab::start("named", COMPASS);
    let a = lab.submit(&["-n1", "--gpus-per-task=4"]);
    let b = lab.submit(&["-n1", "--gpus-per-task=4"]);
    lab.wait_running(&[a, b], Duration::from_secs(15));
    let x = lab.job(a).1;
    assert_eq!(lab.job(b).1, x, "{}", lab.debug());
    let y = if x == "n1" { "n2" } else { "n1" };
    let c = lab.submit(&["-n1", "--gpus-per-task=4", "--resumable", "-w", y]);
    lab.wait_running(&[c], Duration::from_secs(15));
    assert_eq!(lab.job(c).1, y, "{}", lab.debug());
    assert!(lab.run("scancel", &[&a.to_string()]).status.success());
    stays_on(&lab, c, y, "C was moved off the node it names");
    assert!(
        lab.show_job(c).contains("Restarts=0"),
        "{}",
        lab.show_job(c)
    );
    assert_eq!(lab.partial_nodes(8), 2, "{}", lab.debug());
}

#[test]
fn a_job_about_to_end_is_not_migrated_while_a_long_one_is() {
    // A and B (1 x 4 GPUs, the partition's 1-hour default limit) share a
    // node; C (2-minute limit) is alone. When A ends, moving C would cost
    // its 60 s migration (the site default) out of less than 2 minutes
    // left: the rule keeps it, and B moves onto C's node instead.
    let lab = Lab::start("ends-soon", COMPASS);
    let args = ["-n1", "--gpus-per-task=4", "--resumable"];
    let a = lab.submit(&args);
    let b = lab.submit(&args);
    let c = lab.submit(&[&args[..], &["--time=2"]].concat());
    lab.wait_running(&[a, b, c], Duration::from_secs(15));
    let (na, nb, nc) = (lab.job(a).1, lab.job(b).1, lab.job(c).1);
    assert_eq!(na, nb, "{}", lab.debug());
    assert_ne!(nb, nc);
    lab.wait_until(
        "the state file counts C as ending soon",
        Duration::from_secs(10),
        || lab.state_json()["kept_still"]["ends-soon"].as_u64() == Some(1),
    );
    assert!(lab.run("scancel", &[&a.to_string()]).status.success());
    lab.wait_until("B restarted on C's node", Duration::from_secs(20), || {
        lab.job(b) == ("RUNNING".to_string(), nc.clone())
    });
    assert!(
        lab.show_job(b).contains("Restarts=1"),
        "{}",
        lab.show_job(b)
    );
    assert_eq!(lab.job(c), ("RUNNING".to_string(), nc.clone()));
    never_migrated(&lab, c);
    assert_eq!(lab.partial_nodes(8), 0, "{}", lab.debug());
}

/// A and B (1 x 4 GPUs, resumable) share a node, C (1 x 4) is alone; A is
/// cancelled. Returns B and C with their nodes.
fn two_half_nodes(lab: &Lab) -> [(u32, String); 2] {
    two_half_nodes_with(lab, &[])
}

/// [`two_half_nodes`], the three jobs submitted with `extra` sbatch
/// arguments too.
fn two_half_nodes_with(lab: &Lab, extra: &[&str]) -> [(u32, String); 2] {
    let mut args = vec!["-n1", "--gpus-per-task=4", "--resumable"];
    args.extend_from_slice(extra);
    let a = lab.submit(&args);
    let b = lab.submit(&args);
    let c = lab.submit(&args);
    lab.wait_running(&[a, b, c], Duration::from_secs(15));
    let (na, nb, nc) = (lab.job(a).1, lab.job(b).1, lab.job(c).1);
    assert_eq!(na, nb, "{}", lab.debug());
    assert_ne!(nb, nc);
    assert!(lab.run("scancel", &[&a.to_string()]).status.success());
    [(b, nb), (c, nc)]
}

/// Exactly one of B and C was requeued (the move that let `waiter` start),
/// and they end on one node with no partial node left.
fn one_move_joins(lab: &Lab, b: u32, c: u32, waiter: &str) {
    let restarts = [b, c]
        .iter()
        .filter(|id| lab.show_job(**id).contains("Restarts=1"))
        .count();
    assert_eq!(restarts, 1, "one move let {waiter} start\n{}", lab.debug());
    lab.wait_until("B and C run on one node", Duration::from_secs(30), || {
        let (jb, jc) = (lab.job(b), lab.job(c));
        jb.0 == "RUNNING" && jb == jc
    });
    assert_eq!(lab.partial_nodes(8), 0, "{}", lab.debug());
}

#[test]
fn with_move_when_waiting_jobs_move_only_while_a_job_waits() {
    // select.move_when = "waiting" (the site default). A and B (1 x 4
    // GPUs) share a node, C (1 x 4) is alone. When A ends nobody waits:
    // no job moves, and the state file counts B and C as `no-gain`. Then D
    // (7 whole nodes, 8 nodes in all) waits: Compact moves B or C next to
    // the other, and D starts on the 7 empty nodes.
    let lab = Lab::start(
        "move-when-waiting",
        LabOptions {
            conf: "lab-compass-waiting.conf",
            ..COMPASS
        },
    );
    let [(b, nb), (c, nc)] = two_half_nodes(&lab);
    lab.wait_until(
        "the state file counts B and C as held by move_when",
        Duration::from_secs(15),
        || lab.state_json()["kept_still"]["no-gain"].as_u64() == Some(2),
    );
    // Compact ran after A's departure (the state file is rewritten after
    // it) and moved nobody: both still run where they started, never
    // requeued.
    for (id, node) in [(b, &nb), (c, &nc)] {
        assert_eq!(lab.job(id), ("RUNNING".to_string(), node.clone()));
        assert!(lab.show_job(id).contains("Restarts=0"), "{}", lab.debug());
    }
    assert_eq!(lab.partial_nodes(8), 2, "{}", lab.debug());
    let d = lab.submit(&["-N7", "--gres=gpu:8", "--ntasks-per-node=1"]);
    lab.wait_running(&[d], Duration::from_secs(40));
    one_move_joins(&lab, b, c, "D");
}

#[test]
fn with_move_when_starts_jobs_move_only_when_a_waiting_job_gains_room() {
    // select.move_when = "starts" (issue 10). A and B (1 x 4 GPUs) share a
    // node, C (1 x 4) is alone; A ends. D (6 whole nodes) waits and fits
    // the 6 empty nodes as they are: no move would start it sooner, so
    // none is made. Then E (1 whole node) waits with no whole node free:
    // moving B or C next to the other lets it start, and that move is made.
    let lab = Lab::start(
        "move-when-starts",
        LabOptions {
            conf: "lab-compass-starts.conf",
            ..COMPASS
        },
    );
    let [(b, nb), (c, nc)] = two_half_nodes(&lab);
    let d = lab.submit(&["-N6", "--gres=gpu:8", "--ntasks-per-node=1"]);
    lab.wait_running(&[d], Duration::from_secs(30));
    // A few of the plugin's ticks (once a second) with D started: B and C
    // still run where they started, never requeued.
    std::thread::sleep(Duration::from_secs(4));
    for (id, node) in [(b, &nb), (c, &nc)] {
        assert_eq!(lab.job(id), ("RUNNING".to_string(), node.clone()));
        assert!(lab.show_job(id).contains("Restarts=0"), "{}", lab.debug());
    }
    assert_eq!(lab.partial_nodes(8), 2, "{}", lab.debug());
    let e = lab.submit(&["-N1", "--gres=gpu:8", "--ntasks-per-node=1"]);
    lab.wait_running(&[e], Duration::from_secs(40));
    one_move_joins(&lab, b, c, "E");
}

#[test]
fn with_move_when_pays_tidying_moves_wait_for_jobs_that_pay_for_them() {
    // select.move_when = "pays" (the site default; issue 10), a migration
    // costing 1 min. A and B (1 x 4 GPUs) share a node, C (1 x 4) is
    // alone; A ends; Q (6 whole nodes, not resumable, 10 min) fills the
    // rest; Z (7 whole nodes) waits. Moving C next to B lets nobody start
    // now, but gives Z its room when Q ends (the head's guard lets it: Z's
    // reservation gets earlier). With B and C's time limits of 5 minutes
    // that tidying move does not pay (they have less than 1 min + 20 x
    // 1 min left): none is made. With limits of 2 hours (and too few runs
    // ended to say otherwise) it pays, and is made.
    let lab = Lab::start(
        "move-when-pays",
        LabOptions {
            conf: "lab-compass-pays.conf",
            ..COMPASS
        },
    );
    let whole = |n: &'static str| [n, "--gres=gpu:8", "--ntasks-per-node=1", "--time=10"];
    let [(b, nb), (c, nc)] = two_half_nodes_with(&lab, &["--time=5"]);
    let q = lab.submit(&whole("-N6"));
    lab.wait_running(&[q], Duration::from_secs(30));
    let z = lab.submit(&whole("-N7"));
    // A few of the plugin's ticks (once a second) with Z waiting.
    std::thread::sleep(Duration::from_secs(5));
    for (id, node) in [(b, &nb), (c, &nc)] {
        assert_eq!(lab.job(id), ("RUNNING".to_string(), node.clone()));
        assert!(lab.show_job(id).contains("Restarts=0"), "{}", lab.debug());
    }
    assert_eq!(lab.partial_nodes(8), 2, "{}", lab.debug());
    let log = lab.ctld_log();
    assert!(
        !log.contains("would delay the waiting head"),
        "kept still by the pays gate, not by the head's guard\n{}",
        lab.debug()
    );
    for id in [z, q, b, c] {
        assert!(lab.run("scancel", &[&id.to_string()]).status.success());
    }
    lab.wait_until("the cluster is empty", Duration::from_secs(30), || {
        lab.gpus_used().iter().all(|(_, used)| *used == 0)
    });
    let [(b, _), (c, _)] = two_half_nodes_with(&lab, &["--time=120"]);
    let q = lab.submit(&whole("-N6"));
    lab.wait_running(&[q], Duration::from_secs(30));
    lab.submit(&whole("-N7"));
    lab.wait_until("a tidying move", Duration::from_secs(30), || {
        [b, c]
            .iter()
            .any(|id| lab.show_job(*id).contains("Restarts=1"))
    });
    one_move_joins(&lab, b, c, "nobody now (a tidying move)");
}

/// `LAB_EXTRA_CONF` for a lab whose nodes stay COMPLETING for 5 s after
/// each job (an `Epilog` that sleeps): Slurm cannot start the next job on
/// a departed job's nodes before the plugin's thread (once a second) has
/// run the Compact that follows the departure. Files under `dir`.
fn slow_epilog_conf(dir: &std::path::Path) -> &'static str {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("scratch dir");
    let epilog = dir.join("epilog.sh");
    std::fs::write(&epilog, "#!/bin/sh\nsleep 5\nexit 0\n").expect("epilog");
    std::fs::set_permissions(&epilog, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let conf = dir.join("slow-epilog.conf");
    std::fs::write(&conf, format!("Epilog={}\n", epilog.display())).expect("conf");
    Box::leak(conf.display().to_string().into_boxed_str())
}

#[test]
fn a_departure_compact_never_takes_the_waiting_heads_room() {
    // Issue #11, live. A (4 GPUs) and B (2 GPUs), not resumable, share a
    // node; X (7 whole nodes) fills the rest; G (1 GPU, resumable) can only
    // go into A and B's node, as a guest. H (7 whole nodes) waits. When X
    // ends, its 7 nodes are exactly H's room; Compact's guest repair would
    // migrate G into one of them (and the migration, pinned and first in
    // the queue, would start there first: H would wait an hour for A or
    // B). The plugin tries the Compact on a fork, holds G still, and H
    // starts on X's nodes with no migration.
    let scratch = std::env::temp_dir().join(format!("compass-slow-epilog-{}", std::process::id()));
    let extra = slow_epilog_conf(&scratch);
    let env: &'static [(&'static str, &'static str)] =
        Box::leak(vec![("LAB_EXTRA_CONF", extra)].into_boxed_slice());
    let lab = Lab::start(
        "head-guard",
        LabOptions {
            conf: "lab-compass-waiting.conf",
            env,
            ..COMPASS
        },
    );
    let a = lab.submit(&["-n1", "--gpus-per-task=4"]);
    let b = lab.submit(&["-n1", "--gpus-per-task=2"]);
    lab.wait_running(&[a, b], Duration::from_secs(20));
    let na = lab.job(a).1;
    assert_eq!(lab.job(b).1, na, "{}", lab.debug());
    let whole = ["-N7", "--gres=gpu:8", "--ntasks-per-node=1"];
    let x = lab.submit(&whole);
    lab.wait_running(&[x], Duration::from_secs(20));
    let g = lab.submit(&["-n1", "--gpus-per-task=1", "--resumable"]);
    lab.wait_running(&[g], Duration::from_secs(20));
    assert_eq!(lab.job(g).1, na, "the only free GPUs\n{}", lab.debug());
    let h = lab.submit(&whole);
    lab.wait_until("H pending", Duration::from_secs(10), || {
        lab.job(h).0 == "PENDING"
    });
    // Slurm offers H to the plugin at submit and at each backfill pass
    // (bf_interval=1): it waits, in the plugin's eyes, from then on.
    std::thread::sleep(Duration::from_secs(3));
    let x_nodes = lab.job(x).1;
    assert!(lab.run("scancel", &[&x.to_string()]).status.success());
    lab.wait_running(&[h], Duration::from_secs(40));
    assert_eq!(lab.job(h).1, x_nodes, "{}", lab.debug());
    assert_eq!(lab.job(g), ("RUNNING".to_string(), na.clone()));
    assert!(
        lab.show_job(g).contains("Restarts=0"),
        "{}",
        lab.show_job(g)
    );
    let log = lab.ctld_log();
    assert!(!log.contains("migration of job"), "{}", lab.debug());
    assert!(
        log.contains(&format!(
            "Compact held job(s) {g} still: moving them would delay the waiting head, job {h}"
        )),
        "{}",
        lab.debug()
    );
    drop(lab);
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn a_failing_plugin_thread_falls_back_to_plain_cons_tres() {
    // Test-only hook (debug builds): every round of the plugin's thread
    // panics. It gives up after 3 rounds, with one line in slurmctld's log,
    // and GPU jobs then run under plain cons_tres: none waits forever.
    let lab = Lab::start(
        "worker-dies",
        LabOptions {
            env: &[("COMPASS_TEST_WORKER_PANIC", "always")],
            ..COMPASS
        },
    );
    let first = lab.submit(&["-n1", "--gpus-per-task=4", "--resumable"]);
    lab.wait_running(&[first], Duration::from_secs(15));
    lab.wait_until("the fallback line", Duration::from_secs(20), || {
        lab.ctld_log().contains("falling back to plain cons_tres")
    });
    let log = lab.ctld_log();
    assert_eq!(
        log.matches("falling back to plain cons_tres").count(),
        1,
        "{log}"
    );
    assert!(log.contains("round failed (panic: injected panic"), "{log}");
    // The state file is published after the log line (by the next round).
    let state_path = lab.dir.join("run/compass-state.json");
    lab.wait_until(
        "the state file says the engine is off",
        Duration::from_secs(20),
        || {
            std::fs::read_to_string(&state_path)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|v| v["engine_active"] == false)
        },
    );
    let state = lab.state_json();
    assert_eq!(state["engine_active"], false, "{state}");
    assert!(
        state["engine_error"]
            .as_str()
            .is_some_and(|e| e.contains("failed 3 rounds")),
        "{state}"
    );
    // plain cons_tres from now on: jobs start, nothing is narrowed
    let before = lab.ctld_log().matches("narrowed").count();
    let ids: Vec<u32> = (0..3)
        .map(|_| lab.submit(&["-n1", "--gpus-per-task=4", "--resumable"]))
        .collect();
    lab.wait_running(&ids, Duration::from_secs(15));
    assert!(lab.run("scancel", &[&first.to_string()]).status.success());
    std::thread::sleep(Duration::from_secs(3));
    let log = lab.ctld_log();
    assert_eq!(log.matches("narrowed").count(), before, "{}", lab.debug());
    assert!(!log.contains("migration of job"), "{}", lab.debug());
    for &j in &ids {
        assert_eq!(lab.job(j).0, "RUNNING");
    }
}

#[test]
fn a_plugin_thread_round_that_fails_once_is_retried() {
    let lab = Lab::start(
        "worker-panics-once",
        LabOptions {
            env: &[("COMPASS_TEST_WORKER_PANIC", "once")],
            ..COMPASS
        },
    );
    // the departure scenario still migrates: the thread lives on
    let (b, c, _, _) = departure(&lab, true);
    lab.wait_until(
        "B and C share one node again",
        Duration::from_secs(20),
        || {
            let (sb, xb) = lab.job(b);
            let (sc, xc) = lab.job(c);
            sb == "RUNNING" && sc == "RUNNING" && xb == xc
        },
    );
    let log = lab.ctld_log();
    assert_eq!(log.matches("round failed (panic").count(), 1, "{log}");
    assert!(!log.contains("falling back"), "{log}");
}

#[test]
fn reconfigure_and_restart_keep_a_migrated_job_in_its_cool_down() {
    // A and B (resumable) share a node, C (not resumable) is alone. A ends:
    // B must move onto C's node. Then D (not resumable) runs alone and C
    // ends, leaving B and D alone on their nodes: only B could move, but it
    // is in its 10-minute cool-down, through `scontrol reconfigure` and a
    // slurmctld restart alike (both rebuild the engine).
    let lab = Lab::start("cool-down-survives", COMPASS);
    let res = ["-n1", "--gpus-per-task=4", "--resumable"];
    let plain = ["-n1", "--gpus-per-task=4"];
    let a = lab.submit(&res);
    let b = lab.submit(&res);
    let c = lab.submit(&plain);
    lab.wait_running(&[a, b, c], Duration::from_secs(15));
    let (na, nb, nc) = (lab.job(a).1, lab.job(b).1, lab.job(c).1);
    assert_eq!(na, nb, "{}", lab.debug());
    assert_ne!(nb, nc);
    assert!(lab.run("scancel", &[&a.to_string()]).status.success());
    lab.wait_until("B moved onto C's node", Duration::from_secs(20), || {
        lab.job(b) == ("RUNNING".to_string(), nc.clone())
    });
    let d = lab.submit(&plain);
    lab.wait_running(&[d], Duration::from_secs(15));
    assert_ne!(lab.job(d).1, nc, "{}", lab.debug());
    let migrations_of_b = |l: &Lab| {
        l.ctld_log()
            .matches(&format!("migration of job {b}: requeued"))
            .count()
    };
    assert_eq!(migrations_of_b(&lab), 1);

    let rebuilt = |l: &Lab| l.ctld_log().matches("engine rebuilt from").count();
    let before = rebuilt(&lab);
    let out = lab.run("scontrol", &["reconfigure"]);
    assert!(out.status.success(), "{}", common::lossy(&out.stderr));
    lab.wait_until("the engine rebuilt", Duration::from_secs(15), || {
        rebuilt(&lab) > before
    });
    assert!(lab.run("scancel", &[&c.to_string()]).status.success());
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(migrations_of_b(&lab), 1, "B moved again\n{}", lab.debug());
    assert!(
        lab.show_job(b).contains("Restarts=1"),
        "{}",
        lab.show_job(b)
    );
    assert_eq!(lab.partial_nodes(8), 2, "{}", lab.debug());

    lab.restart_ctld();
    lab.wait_until("slurmctld answers", Duration::from_secs(20), || {
        lab.run("scontrol", &["ping"]).status.success()
    });
    std::thread::sleep(Duration::from_secs(8));
    assert!(lab.show_job(b).contains("Restarts=1"), "{}", lab.debug());
    assert_eq!(lab.job(b), ("RUNNING".to_string(), nc.clone()));
    assert!(
        !lab.ctld_log()
            .contains("cool-downs and in-flight migrations from before the restart are lost"),
        "{}",
        lab.debug()
    );
}

#[test]
fn slurmctld_restart_rebuilds_the_engine_without_losing_jobs() {
    let lab = Lab::start("restart", COMPASS);
    let ids = [
        lab.submit(&["-n2", "--gpus-per-task=4", "--resumable"]),
        lab.submit(&["-n1", "--gpus-per-task=2"]),
        lab.submit(&["-n3", "--gpus-per-task=1", "--resumable"]),
        lab.submit(&["-n3", "--gpus=3"]),
        lab.submit(&["-n2"]),
    ];
    lab.wait_running(&ids, Duration::from_secs(20));
    let before: Vec<(String, String)> = ids.iter().map(|&j| lab.job(j)).collect();
    let count = |l: &Lab| {
        common::lossy(&l.run("squeue", &["-h", "-o", "%i"]).stdout)
            .lines()
            .count()
    };
    assert_eq!(count(&lab), ids.len());

    lab.restart_ctld();
    lab.wait_until("slurmctld answers", Duration::from_secs(20), || {
        lab.run("scontrol", &["ping"]).status.success()
    });
    let after: Vec<(String, String)> = ids.iter().map(|&j| lab.job(j)).collect();
    assert_eq!(before, after, "same jobs, same nodes, still running");
    assert_eq!(count(&lab), ids.len(), "no job lost or duplicated");
    assert!(
        lab.ctld_log()
            .contains(&format!("engine rebuilt from {} running jobs", ids.len())),
        "{}",
        lab.debug()
    );
    // the rebuilt state matches what Slurm runs, node by node
    let restarted = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    lab.wait_until(
        "state file rewritten after the restart",
        Duration::from_secs(15),
        || lab.state_json()["updated_unix"].as_u64().unwrap_or(0) > restarted,
    );
    let state = lab.state_json();
    assert_eq!(published_of(&state), lab.gpus_used(), "{state}");
    assert_eq!(state["jobs"].as_array().unwrap().len(), ids.len());
    // the engine keeps placing after the restart
    let next = lab.submit(&["-n1", "--gpus-per-task=2"]);
    lab.wait_running(&[next], Duration::from_secs(15));
    assert!(
        lab.ctld_log()
            .contains(&format!("job_test job {next} mode 0: narrowed")),
        "{}",
        lab.debug()
    );
}

/// GPUs in use per node as the plugin's published state says.
fn published_of(state: &serde_json::Value) -> Vec<(String, u32)> {
    state["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["used_gpus"].as_u64().unwrap() as u32,
            )
        })
        .collect()
}

fn published_gpus(lab: &Lab) -> Vec<(String, u32)> {
    published_of(&lab.state_json())
}

/// The published pools: name and node names.
fn published_pools(lab: &Lab) -> Vec<(String, Vec<String>)> {
    lab.state_json()["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let names = p["node_names"].as_array().unwrap();
            (
                p["name"].as_str().unwrap().to_string(),
                names
                    .iter()
                    .map(|n| n.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn partitions_that_share_no_node_get_their_own_pools() {
    // `select.pools_by_partition` (default true). The lab starts with one
    // partition over its eight nodes: one pool. An admin splits it at run
    // time (`scontrol update` and `scontrol create`
    // partition); the two halves share no partition, so each gets its own
    // engine, rebuilt from the running jobs at the next job test (before:
    // one pool over all eight nodes, every job held inside its partition,
    // Theorem 1's bound promised nowhere).
    let lab = Lab::start("partitions", COMPASS);
    let names =
        |r: std::ops::RangeInclusive<u32>| -> Vec<String> { r.map(|i| format!("n{i}")).collect() };
    lab.wait_until("one pool", Duration::from_secs(20), || {
        published_pools(&lab) == [("8xgpu".to_string(), names(1..=8))]
    });
    let early = lab.submit(&["-n1", "--gpus-per-task=2"]);
    lab.wait_running(&[early], Duration::from_secs(15));
    // The engine's first node: in what stays partition `gpu`.
    assert_eq!(lab.job(early).1, "n1", "{}", lab.debug());
    for args in [
        &["update", "PartitionName=gpu", "Nodes=n[1-4]"][..],
        &[
            "create",
            "PartitionName=other",
            "Nodes=n[5-8]",
            "State=UP",
            "MaxTime=INFINITE",
            "OverSubscribe=NO",
        ][..],
    ] {
        let out = lab.run("scontrol", args);
        assert!(
            out.status.success(),
            "scontrol {args:?}: {}",
            common::lossy(&out.stderr)
        );
    }
    // Each partition's engine packs its own jobs: two 4-GPU jobs share a
    // node of their partition, in each. The first job test after the
    // change rebuilds the engine.
    let jobs: Vec<(u32, &str)> = ["gpu", "gpu", "other", "other"]
        .into_iter()
        .map(|p| {
            (
                lab.submit(&["--resumable", "-p", p, "-n1", "--gpus-per-task=4"]),
                p,
            )
        })
        .collect();
    let split = [
        ("8xgpu@gpu".to_string(), names(1..=4)),
        ("8xgpu@other".to_string(), names(5..=8)),
    ];
    lab.wait_until("one pool per partition", Duration::from_secs(20), || {
        published_pools(&lab) == split
    });
    assert!(
        lab.ctld_log()
            .contains("partition groups changed: engine rebuilt from 1 running jobs"),
        "{}",
        lab.debug()
    );
    let ids: Vec<u32> = jobs.iter().map(|j| j.0).collect();
    lab.wait_running(&ids, Duration::from_secs(20));
    let on = |j: u32| lab.job(j).1;
    assert_eq!(on(jobs[0].0), on(jobs[1].0), "{}", lab.debug());
    assert_eq!(on(jobs[2].0), on(jobs[3].0), "{}", lab.debug());
    assert!(names(1..=4).contains(&on(jobs[0].0)), "{}", lab.debug());
    assert!(names(5..=8).contains(&on(jobs[2].0)), "{}", lab.debug());
    lab.wait_until(
        "the published state matches Slurm's, node by node",
        Duration::from_secs(15),
        || published_gpus(&lab) == lab.gpus_used(),
    );
    let state = lab.state_json();
    let partial: Vec<u64> = (0..2)
        .map(|k| state["pools"][k]["partial_nodes"].as_u64().unwrap())
        .collect();
    // `gpu`: the 2-GPU job's node; `other`: none.
    assert_eq!(partial, [1, 0], "{}", lab.debug());
}

#[test]
fn a_node_slurm_takes_out_of_a_running_job_is_free_in_the_engine() {
    // `scontrol update job=J NumNodes=1` shrinks a running 2 x 8 job: Slurm
    // frees one node (`excise_node_from_job`, `select_p_job_resized`). The
    // engine's state follows, node by node (before: it counted the 8 GPUs
    // of the node taken out until the job ended).
    let lab = Lab::start("resized", COMPASS);
    let wide = lab.submit(&["-N2", "--gpus-per-node=8"]);
    let other = lab.submit(&["-n1", "--gpus-per-task=2"]);
    lab.wait_running(&[wide, other], Duration::from_secs(15));
    let out = lab.run(
        "scontrol",
        &["update", &format!("jobid={wide}"), "NumNodes=1"],
    );
    assert!(out.status.success(), "{}", common::lossy(&out.stderr));
    lab.wait_until(
        "Slurm runs the job on one node",
        Duration::from_secs(10),
        || lab.gpus_used().iter().filter(|(_, g)| *g == 8).count() == 1,
    );
    lab.wait_until(
        "the published state matches Slurm's, node by node",
        Duration::from_secs(15),
        || published_gpus(&lab) == lab.gpus_used(),
    );
    assert!(
        lab.ctld_log().contains(&format!("job {wide}: ")),
        "{}",
        lab.debug()
    );
    assert_eq!(lab.job(wide).0, "RUNNING");
    // The engine keeps placing, and the job's end frees its last node.
    assert!(lab.run("scancel", &[&wide.to_string()]).status.success());
    let next = lab.submit(&["-N1", "--gpus-per-node=8"]);
    lab.wait_running(&[next], Duration::from_secs(15));
    lab.wait_until(
        "the published state matches Slurm's after the end",
        Duration::from_secs(15),
        || published_gpus(&lab) == lab.gpus_used(),
    );
}

#[test]
fn jobs_placed_before_the_plugin_are_adopted_and_compacted() {
    let lab = Lab::start("install-under-load", STOCK);
    // stock cons_tres: sixteen 4-GPU jobs fill the cluster, then one job
    // ends on each of four nodes: four partial nodes
    let ids: Vec<u32> = (0..16)
        .map(|_| lab.submit(&["-n1", "--gpus-per-task=4", "--resumable"]))
        .collect();
    lab.wait_running(&ids, Duration::from_secs(30));
    let mut gone = Vec::new();
    for node in ["n1", "n3", "n5", "n7"] {
        let j = *ids
            .iter()
            .find(|&&j| lab.job(j).1 == node)
            .expect("a job on the node");
        gone.push(j.to_string());
    }
    let args: Vec<&str> = gone.iter().map(String::as_str).collect();
    assert!(lab.run("scancel", &args).status.success());
    let left: Vec<u32> = ids
        .iter()
        .copied()
        .filter(|j| !gone.contains(&j.to_string()))
        .collect();
    lab.wait_until("stock layout settles", Duration::from_secs(10), || {
        lab.partial_nodes(8) == 4
    });

    lab.switch_to_compass();
    lab.wait_until("slurmctld answers", Duration::from_secs(20), || {
        lab.run("scontrol", &["ping"]).status.success()
    });
    assert!(
        lab.ctld_log()
            .contains("engine rebuilt from 12 running jobs"),
        "{}",
        lab.debug()
    );
    // Compact pairs the lone 4-GPU instances through requeues
    lab.wait_until("compact layout", Duration::from_secs(40), || {
        lab.partial_nodes(8) == 0 && left.iter().all(|&j| lab.job(j).0 == "RUNNING")
    });
    let used: u32 = lab.gpus_used().iter().map(|(_, u)| u).sum();
    assert_eq!(used, 48, "no job lost");
}

#[test]
fn disabled_engine_is_plain_cons_tres() {
    let lab = Lab::start(
        "disabled",
        LabOptions {
            conf: "lab-compass-disabled.conf",
            ..COMPASS
        },
    );
    let ids = [
        lab.submit(&["-n1", "--gpus-per-task=4", "--resumable"]),
        lab.submit(&["-n1", "--gpus-per-task=4", "--resumable"]),
        lab.submit(&["-n1", "--gpus-per-task=4", "--resumable"]),
        lab.submit(&["-n2"]),
    ];
    lab.wait_running(&ids, Duration::from_secs(15));
    assert!(lab.run("scancel", &[&ids[0].to_string()]).status.success());
    std::thread::sleep(Duration::from_secs(5));
    let log = lab.ctld_log();
    assert!(!log.contains("narrowed"), "{}", lab.debug());
    assert!(!log.contains("migration of job"), "{}", lab.debug());
    assert!(
        log.contains("select/cons_tres"),
        "stock cons_tres loaded through the wrapper"
    );
    for &j in &ids[1..] {
        assert_eq!(lab.job(j).0, "RUNNING");
    }
}

/// The detailed lines (each job_test decision) follow Slurm's
/// `DebugFlags=SelectType` when compass.conf does not ask for them
/// (`select.log_decisions`, set in the other lab tests): absent without the
/// flag, there from `scontrol setdebugflags +SelectType` on (read live, no
/// restart), as `SelectType: compass: ...`, and gone again after
/// `-SelectType`. The lab's slurmctld logs at `verbose`, so only the flag
/// decides.
#[test]
fn detailed_lines_follow_the_select_type_debug_flag() {
    let lab = Lab::start(
        "debug-flags",
        LabOptions {
            conf: "lab-compass-quiet.conf",
            ..COMPASS
        },
    );
    let conf = std::fs::read_to_string(lab.dir.join("etc/slurm.conf")).unwrap();
    assert!(!conf.contains("DebugFlags"), "{conf}");
    let setflags = |arg: &str| {
        let out = lab.run("scontrol", &["setdebugflags", arg]);
        assert!(out.status.success(), "{}", common::lossy(&out.stderr));
    };
    let narrowed = |j: u32| format!("SelectType: compass: job_test job {j} mode 0: narrowed");
    let run_one = || {
        let j = lab.submit(&["-n1", "--gpus-per-task=2"]);
        lab.wait_running(&[j], Duration::from_secs(20));
        // The engine placed it (the plugin is active without the flag too).
        lab.wait_until(
            "the job in the published state",
            Duration::from_secs(20),
            || {
                lab.state_json()["jobs"]
                    .as_array()
                    .is_some_and(|js| js.iter().any(|x| x["id"] == j))
            },
        );
        j
    };

    let a = run_one();
    let log = lab.ctld_log();
    assert!(
        !log.contains(&format!("job_test job {a}")),
        "{}",
        lab.debug()
    );
    assert!(!log.contains("SelectType: compass:"), "{}", lab.debug());

    setflags("+SelectType");
    let b = run_one();
    lab.wait_until(
        "the detailed line of job b",
        Duration::from_secs(10),
        || lab.ctld_log().contains(&narrowed(b)),
    );

    setflags("-SelectType");
    let before = lab.ctld_log().matches("SelectType: compass:").count();
    let c = run_one();
    let log = lab.ctld_log();
    assert!(
        !log.contains(&format!("job_test job {c}")),
        "{}",
        lab.debug()
    );
    assert_eq!(log.matches("SelectType: compass:").count(), before);
}
