//! The Slurm client side of a replay: the clusters given with `--cluster`,
//! `sbatch`/`scontrol`/`sinfo` run with `SLURM_CONF` set per cluster, and
//! parsers for their output (`scontrol show job -d --oneliner`: per-node GPU
//! allocation, restarts, run time; shared/slurm-lab/REPORT.md explains why
//! GPU placement is read there).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};

use compass_core::placement::pools::NodeGpus;
use compass_slurm::shape::node_gpus;

use crate::error::{CliError, Result};

/// One `--cluster NAME=SLURM_CONF[:STATE_FILE]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterArg {
    pub name: String,
    pub slurm_conf: PathBuf,
    /// The select plugin's published state (`select.state_file`), for the
    /// compass cluster.
    pub state_file: Option<PathBuf>,
}

/// Parses `NAME=SLURM_CONF[:STATE_FILE]`.
pub fn parse_cluster(s: &str) -> std::result::Result<ClusterArg, String> {
    let (name, rest) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: expected NAME=SLURM_CONF[:STATE_FILE]"))?;
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "`{s}`: the cluster name must be letters, digits, - or _ (it names a directory)"
        ));
    }
    let (conf, state) = match rest.split_once(':') {
        Some((c, st)) => (c, Some(st)),
        None => (rest, None),
    };
    if conf.is_empty() {
        return Err(format!("`{s}`: SLURM_CONF is empty"));
    }
    Ok(ClusterArg {
        name: name.to_string(),
        slurm_conf: PathBuf::from(conf),
        state_file: state.filter(|p| !p.is_empty()).map(PathBuf::from),
    })
}

/// Runs Slurm clients against one cluster.
#[derive(Clone, Debug)]
pub struct Client {
    pub conf: PathBuf,
}

impl Client {
    pub fn run(&self, prog: &str, args: &[String]) -> Result<Output> {
        Command::new(prog)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .map_err(|e| CliError::Failed(format!("cannot run {prog}: {e} (is Slurm installed?)")))
    }

    /// Runs and returns stdout, or an error quoting stderr.
    pub fn text(&self, prog: &str, args: &[&str]) -> Result<String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let out = self.run(prog, &args)?;
        if !out.status.success() {
            return Err(CliError::Failed(format!(
                "{prog} {} (SLURM_CONF={}): {}",
                args.join(" "),
                self.conf.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Every node of the cluster (`sinfo`) with its GPUs (count and type,
    /// as the select plugin reads them: `compass_slurm::shape::node_gpus`),
    /// in natural name order (`n2` before `n10`). CPU-only nodes have 0.
    pub fn shape(&self) -> Result<Vec<(String, NodeGpus)>> {
        let text = self.text("sinfo", &["-h", "-N", "-o", "%N %G"])?;
        let nodes = parse_sinfo_nodes(&text);
        if nodes.is_empty() {
            return Err(CliError::Failed(format!(
                "sinfo (SLURM_CONF={}) lists no nodes",
                self.conf.display()
            )));
        }
        if nodes.iter().all(|(_, g)| g.gpus == 0) {
            return Err(CliError::Failed(format!(
                "no node of SLURM_CONF={} has GPUs: the replay needs GPU nodes",
                self.conf.display()
            )));
        }
        Ok(nodes)
    }

    /// Does `sbatch` know the SPANK options (`--min-runtime`, `--resumable`)?
    pub fn has_spank(&self) -> Result<bool> {
        let help = self.text("sbatch", &["--help"])?;
        Ok(help.contains("--min-runtime") && help.contains("--resumable"))
    }

    /// `SlurmctldLogFile` from `scontrol show config` (where the select
    /// plugin logs its migrations), if set.
    pub fn ctld_log(&self) -> Option<PathBuf> {
        let text = self.text("scontrol", &["show", "config"]).ok()?;
        text.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == "SlurmctldLogFile")
                .then(|| v.trim())
                .filter(|v| v.starts_with('/'))
                .map(PathBuf::from)
        })
    }

    /// Every job Slurm still lists (`scontrol show job -d --oneliner`).
    pub fn jobs(&self) -> Result<Vec<JobObs>> {
        let text = self.text("scontrol", &["show", "job", "-d", "--oneliner"])?;
        Ok(parse_jobs(&text))
    }
}

/// `sinfo -h -N -o '%N %G'`: each node once (sinfo lists a node once per
/// partition), with its GPUs, in natural name order.
pub fn parse_sinfo_nodes(text: &str) -> Vec<(String, NodeGpus)> {
    let mut nodes: BTreeMap<String, NodeGpus> = BTreeMap::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(n), g) = (it.next(), it.next().unwrap_or("")) else {
            continue;
        };
        nodes.insert(n.to_string(), node_gpus(g));
    }
    let mut out: Vec<(String, NodeGpus)> = nodes.into_iter().collect();
    out.sort_by_key(|(n, _)| natural_key(n));
    out
}

/// Sort key putting `n2` before `n10`.
pub fn natural_key(name: &str) -> (String, u64) {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (p, d) = name.split_at(name.len() - digits);
    (p.to_string(), d.parse().unwrap_or(0))
}

/// GPUs in a GRES string: `gpu:8`, `gpu:a100:4(S:0-1)`, `gpu:8(IDX:0-7)`,
/// comma-separated entries added up; 0 for `(null)`.
pub fn gres_gpus(gres: &str) -> u32 {
    compass_core::gres::gpus(gres).map_or(0, |g| g.total_u32())
}

/// Expands a Slurm host list: `n[1-3,7],m2` -> `n1 n2 n3 n7 m2`.
pub fn expand_hostlist(list: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let bytes = list.as_bytes();
    let mut parts = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[start..]);
    for p in parts
        .into_iter()
        .filter(|p| !p.is_empty() && *p != "(null)")
    {
        let Some((prefix, rest)) = p.split_once('[') else {
            out.push(p.to_string());
            continue;
        };
        let (inner, suffix) = rest.split_once(']').unwrap_or((rest, ""));
        for r in inner.split(',') {
            match r.split_once('-') {
                Some((a, b)) => {
                    let width = a.len();
                    if let (Ok(a), Ok(b)) = (a.parse::<u64>(), b.parse::<u64>()) {
                        for k in a..=b {
                            out.push(format!("{prefix}{k:0width$}{suffix}"));
                        }
                    }
                }
                None => out.push(format!("{prefix}{r}{suffix}")),
            }
        }
    }
    out
}

/// Seconds of a Slurm duration `[D-]HH:MM:SS` (also `MM:SS`).
pub fn slurm_secs(s: &str) -> Option<u64> {
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (d.parse::<u64>().ok()?, r),
        None => (0, s),
    };
    let f: Vec<u64> = rest
        .split(':')
        .map(|x| x.parse::<u64>().ok())
        .collect::<Option<_>>()?;
    let hms = match f.as_slice() {
        [h, m, s] => h * 3600 + m * 60 + s,
        [m, s] => m * 60 + s,
        [s] => *s,
        _ => return None,
    };
    Some(days * 86_400 + hms)
}

/// One job as `scontrol show job -d --oneliner` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobObs {
    pub id: u64,
    pub name: String,
    pub state: String,
    pub reason: String,
    pub restarts: u32,
    /// Run time of the current (or last) run, seconds.
    pub run_time_s: u64,
    /// GPUs per node of the current allocation, by node name.
    pub node_gpus: BTreeMap<String, u32>,
    /// compass-budgetd cancelled it as a preemption victim that is not
    /// resumable (its `AdminComment` carries `preempted: <reason>`).
    pub preempted_cancel: bool,
}

impl JobObs {
    /// Holding its allocation and running its script.
    pub fn running(&self) -> bool {
        matches!(self.state.as_str(), "RUNNING" | "CONFIGURING")
    }

    /// Its run is over (the script finished, or it was requeued) and
    /// Slurm still holds its allocation while the epilog runs. Slurm names
    /// the state by its `COMPLETING` flag first (`job_state_string`), so a
    /// requeued job shows `COMPLETING` until its nodes are released, with
    /// `Restarts` already counted.
    pub fn completing(&self) -> bool {
        self.state == "COMPLETING"
    }

    /// In a final state: it will not run again and holds nothing.
    pub fn finished(&self) -> bool {
        matches!(
            self.state.as_str(),
            "COMPLETED"
                | "FAILED"
                | "CANCELLED"
                | "TIMEOUT"
                | "NODE_FAIL"
                | "BOOT_FAIL"
                | "DEADLINE"
                | "OUT_OF_MEMORY"
                | "PREEMPTED"
        )
    }
}

/// Parses `scontrol show job -d --oneliner` (one job per line).
pub fn parse_jobs(text: &str) -> Vec<JobObs> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut job = JobObs::default();
        let mut detail_nodes: Option<Vec<String>> = None;
        for tok in line.split_whitespace() {
            let Some((k, v)) = tok.split_once('=') else {
                continue;
            };
            match k {
                "JobId" => job.id = v.parse().unwrap_or(0),
                "JobName" => job.name = v.to_string(),
                "JobState" => job.state = v.to_string(),
                "Reason" => job.reason = v.to_string(),
                "Restarts" => job.restarts = v.parse().unwrap_or(0),
                "RunTime" => job.run_time_s = slurm_secs(v).unwrap_or(0),
                // `compass:...;preempted: <reason with spaces>`: the first
                // word holds the marker
                "AdminComment" => job.preempted_cancel = v.contains("preempted:"),
                // the per-node detail of `-d`: `Nodes=n[1-2] CPU_IDs=.. GRES=gpu:8(IDX:0-7)`
                "Nodes" => detail_nodes = Some(expand_hostlist(v)),
                "GRES" => {
                    if let Some(nodes) = detail_nodes.take() {
                        let g = gres_gpus(v);
                        if g > 0 {
                            for n in nodes {
                                *job.node_gpus.entry(n).or_default() += g;
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if job.id != 0 {
            out.push(job);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_args() {
        let c = parse_cluster("compass=/a/slurm.conf:/a/state.json").unwrap();
        assert_eq!(c.name, "compass");
        assert_eq!(c.slurm_conf, PathBuf::from("/a/slurm.conf"));
        assert_eq!(c.state_file, Some(PathBuf::from("/a/state.json")));
        let s = parse_cluster("stock=/b/slurm.conf").unwrap();
        assert_eq!(s.state_file, None);
        assert!(parse_cluster("nope").is_err());
        assert!(parse_cluster("a/b=/x").is_err());
        assert!(parse_cluster("a=").is_err());
    }

    #[test]
    fn hostlists_gres_and_times() {
        assert_eq!(
            expand_hostlist("n[1-3,7],m2"),
            ["n1", "n2", "n3", "n7", "m2"]
        );
        assert_eq!(expand_hostlist("n10"), ["n10"]);
        assert_eq!(expand_hostlist("gpu[08-10]"), ["gpu08", "gpu09", "gpu10"]);
        assert_eq!(gres_gpus("gpu:8(IDX:0-7)"), 8);
        assert_eq!(gres_gpus("gpu:a100:2(IDX:0-1),gpu:v100:1"), 3);
        assert_eq!(gres_gpus("(null)"), 0);
        // Socket-bound and multi-type, as slurmctld reports them with
        // `Cores=` in gres.conf (the project's one parser, issue 12).
        assert_eq!(gres_gpus("gpu:a100:8(S:0-1)"), 8);
        assert_eq!(gres_gpus("gpu:a100:4(S:0),gpu:h100:4(S:1)"), 8);
        assert_eq!(slurm_secs("00:01:05"), Some(65));
        assert_eq!(slurm_secs("1-00:00:02"), Some(86_402));
        assert_eq!(slurm_secs("5:07"), Some(307));
        assert!(natural_key("n2") < natural_key("n10"));
    }

    #[test]
    fn sinfo_nodes_of_a_mixed_cluster() {
        // a node in two partitions is listed twice; CPU-only nodes say (null)
        let text = "n10 gpu:l40s:4(S:0-1)\nn9 gpu:l40s:4(S:0-1)\nn9 gpu:l40s:4(S:0-1)\nn1 gpu:a100:8(S:0-1)\nn13 gpu:2(S:0-1)\nn15 (null)\n";
        let nodes = parse_sinfo_nodes(text);
        let names: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["n1", "n9", "n10", "n13", "n15"]);
        assert_eq!(nodes[0].1, NodeGpus::new(8, Some("a100")));
        assert_eq!(nodes[1].1, NodeGpus::new(4, Some("l40s")));
        assert_eq!(nodes[3].1, NodeGpus::new(2, None));
        assert_eq!(nodes[4].1, NodeGpus::new(0, None));
    }

    #[test]
    fn scontrol_oneliner_per_node_gpus() {
        let text = "JobId=1 JobName=replay-0 Account=vcewi JobState=RUNNING Reason=None Restarts=2 RunTime=00:00:12 NodeList=n[1-2] JOB_GRES=gpu:16   Nodes=n[1-2] CPU_IDs=16 Mem=0 GRES=gpu:8(IDX:0-7) MinCPUsNode=1\n\
JobId=3 JobName=replay-2 JobState=RUNNING Reason=None Restarts=0 RunTime=00:00:02 JOB_GRES=gpu:12   Nodes=n3 CPU_IDs=16 Mem=0 GRES=gpu:8(IDX:0-7)   Nodes=n4 CPU_IDs=1 Mem=0 GRES=gpu:4(IDX:0-3) Features=(null)\n\
JobId=4 JobName=replay-3 JobState=PENDING Reason=Resources Restarts=0 RunTime=00:00:00 NodeList=(null)\n\
JobId=5 JobName=replay-4 JobState=CANCELLED Reason=None AdminComment=compass:min_runtime=0,resumable=0;preempted: job 5 cancelled (not resumable) by compass-budgetd Restarts=0 RunTime=00:00:07\n";
        let jobs = parse_jobs(text);
        assert_eq!(jobs.len(), 4);
        assert!(jobs[3].preempted_cancel && !jobs[0].preempted_cancel);
        assert_eq!(
            jobs[3].run_time_s, 7,
            "the reason's words do not end the line"
        );
        assert_eq!(jobs[0].restarts, 2);
        assert_eq!(jobs[0].run_time_s, 12);
        assert_eq!(
            jobs[0].node_gpus,
            BTreeMap::from([("n1".to_string(), 8), ("n2".to_string(), 8)])
        );
        assert_eq!(
            jobs[1].node_gpus,
            BTreeMap::from([("n3".to_string(), 8), ("n4".to_string(), 4)])
        );
        assert!(jobs[1].running() && !jobs[2].running());
        assert!(jobs[2].node_gpus.is_empty());
        assert!(parse_jobs("No jobs in the system\n").is_empty());
    }
}
