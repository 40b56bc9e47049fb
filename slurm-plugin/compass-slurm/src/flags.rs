//! How `--min-runtime` and `--resumable[=COST]` travel with a job.
//!
//! 1. The SPANK plugin validates them at submit and stores them with
//!    `spank_job_control_setenv` as [`ENV_MIN_RUNTIME`] / [`ENV_RESUMABLE`]
//!    (and [`ENV_MIGRATION_COST`] when the job names its migration cost).
//!    slurmctld keeps them in the job's `spank_job_env` (saved in its state,
//!    so they survive requeue and restart); the select plugin reads them there.
//! 2. `etc/job_submit.lua` copies them into the job's `AdminComment` as
//!    [`format_admin_comment`], the only place the public API
//!    (`slurm_load_jobs`, `scontrol show job`) shows them: the budget service
//!    reads them with [`parse_admin_comment`].

/// SPANK job control variable: protected minimum run time, whole seconds.
pub const ENV_MIN_RUNTIME: &str = "COMPASS_MIN_RUNTIME";
/// SPANK job control variable: `1` if the job may be requeued and resumes
/// from its own checkpoint, else `0`.
pub const ENV_RESUMABLE: &str = "COMPASS_RESUMABLE";
/// SPANK job control variable: the job's own migration cost
/// (`--resumable=5m`), whole seconds; absent: the site default
/// (`select.migration_cost`).
pub const ENV_MIGRATION_COST: &str = "COMPASS_MIGRATION_COST";
/// Tag of the flags inside `AdminComment`.
pub const ADMIN_COMMENT_TAG: &str = "compass:";

/// The per-job flags.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct JobFlags {
    /// Seconds of run time protected from preemption and migration; 0 = none.
    pub min_runtime_s: u64,
    /// The job may be requeued (migrated) and resumes from its checkpoint.
    pub resumable: bool,
    /// What one migration costs this job (`--resumable=COST`), seconds;
    /// `None`: the site default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_cost_s: Option<u64>,
}

/// Reads the flags from a job's SPANK env entries (`NAME=value`, with or
/// without the `SPANK_` prefix Slurm adds in prolog environments). `None`
/// when the job carries neither variable (submitted before the plugin).
pub fn from_spank_env<'a>(entries: impl IntoIterator<Item = &'a str>) -> Option<JobFlags> {
    let mut flags = JobFlags::default();
    let mut seen = false;
    for e in entries {
        let Some((k, v)) = e.split_once('=') else {
            continue;
        };
        let k = k.strip_prefix("SPANK_").unwrap_or(k);
        if k == ENV_MIN_RUNTIME {
            if let Ok(s) = v.parse() {
                flags.min_runtime_s = s;
                seen = true;
            }
        } else if k == ENV_RESUMABLE {
            flags.resumable = v == "1";
            seen = true;
        } else if k == ENV_MIGRATION_COST {
            flags.migration_cost_s = v.parse().ok();
        }
    }
    seen.then_some(flags)
}

/// `compass:min_runtime=5400,resumable=1` (what job_submit.lua writes),
/// with `,migration_cost=300` when the job names its cost.
pub fn format_admin_comment(f: &JobFlags) -> String {
    let mut s = format!(
        "{ADMIN_COMMENT_TAG}min_runtime={},resumable={}",
        f.min_runtime_s,
        u8::from(f.resumable)
    );
    if let Some(c) = f.migration_cost_s {
        s.push_str(&format!(",migration_cost={c}"));
    }
    s
}

/// Finds the compass tag in an `AdminComment` (other text around it, separated
/// by `;` or spaces, is ignored). `None` when absent or malformed.
pub fn parse_admin_comment(comment: &str) -> Option<JobFlags> {
    let start = comment.find(ADMIN_COMMENT_TAG)? + ADMIN_COMMENT_TAG.len();
    let body = comment[start..].split([';', ' ']).next()?;
    let mut min = None;
    let mut res = None;
    let mut cost = None;
    for kv in body.split(',') {
        match kv.split_once('=')? {
            ("min_runtime", v) => min = Some(v.parse().ok()?),
            ("resumable", v) => res = Some(v == "1"),
            ("migration_cost", v) => cost = Some(v.parse().ok()?),
            _ => {}
        }
    }
    Some(JobFlags {
        min_runtime_s: min?,
        resumable: res?,
        migration_cost_s: cost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spank_env_entries() {
        let env = [
            "_SLURM_SPANK_OPTION_compass_min_runtime=4h",
            "COMPASS_MIN_RUNTIME=14400",
            "COMPASS_RESUMABLE=1",
        ];
        assert_eq!(
            from_spank_env(env),
            Some(JobFlags {
                min_runtime_s: 14_400,
                resumable: true,
                migration_cost_s: None,
            })
        );
        let env = ["SPANK_COMPASS_MIN_RUNTIME=0", "SPANK_COMPASS_RESUMABLE=0"];
        assert_eq!(
            from_spank_env(env),
            Some(JobFlags {
                min_runtime_s: 0,
                resumable: false,
                migration_cost_s: None,
            })
        );
        let env = [
            "COMPASS_MIN_RUNTIME=0",
            "COMPASS_RESUMABLE=1",
            "COMPASS_MIGRATION_COST=300",
        ];
        assert_eq!(
            from_spank_env(env).and_then(|f| f.migration_cost_s),
            Some(300)
        );
        assert_eq!(from_spank_env(["PATH=/bin", "garbage"]), None);
    }

    #[test]
    fn admin_comment_round_trip() {
        let f = JobFlags {
            min_runtime_s: 5400,
            resumable: true,
            migration_cost_s: None,
        };
        let s = format_admin_comment(&f);
        assert_eq!(s, "compass:min_runtime=5400,resumable=1");
        assert_eq!(parse_admin_comment(&s), Some(f));
        let with_cost = JobFlags {
            migration_cost_s: Some(300),
            ..f
        };
        let s2 = format_admin_comment(&with_cost);
        assert_eq!(
            s2,
            "compass:min_runtime=5400,resumable=1,migration_cost=300"
        );
        assert_eq!(parse_admin_comment(&s2), Some(with_cost));
        assert_eq!(
            parse_admin_comment(&format!("site note;{s};other")),
            Some(f)
        );
        assert_eq!(
            parse_admin_comment("compass:min_runtime=x,resumable=1"),
            None
        );
        assert_eq!(parse_admin_comment("compass:resumable=1"), None);
        assert_eq!(parse_admin_comment(""), None);
    }
}
