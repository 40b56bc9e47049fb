//! SQLite storage: versioned schema from `sql/`, the tree with its audit
//! trail, the occupancy ledger and demand samples.
//!
//! WAL mode, foreign keys on, `synchronous=FULL`: an edit acknowledged to a
//! client has been committed and survives `kill -9`. Every budget edit runs in
//! one `IMMEDIATE` transaction together with its audit rows.

use compass_core::fairshare::{
    self, IngestOutcome, Interval, Kind, Ledger, NodeSpec, OrgTree, TreeChange, UnixSecs, Usage,
};
use compass_core::model::JobId;
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::error::{BudgetError, Result};

/// The schema files, in order. File `N` brings the database to version `N`.
pub const MIGRATIONS: &[&str] = &[
    include_str!("../../sql/0001_init.sql"),
    include_str!("../../sql/0002_enforcement.sql"),
    include_str!("../../sql/0003_enforcement_identity.sql"),
    include_str!("../../sql/0004_gpu_weights.sql"),
    include_str!("../../sql/0005_job_user.sql"),
    include_str!("../../sql/0006_cycle_history.sql"),
    include_str!("../../sql/0007_nodes_parent_index.sql"),
    include_str!("../../sql/0008_action_owners.sql"),
];

/// The newest schema version this build knows.
pub fn known_version() -> i64 {
    MIGRATIONS.len() as i64
}

pub struct Db {
    conn: Connection,
    /// The file opened and its identity (device, inode); `None` in memory.
    file: Option<(std::path::PathBuf, u64, u64)>,
}

/// One audit row.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AuditRow {
    pub id: i64,
    pub at: i64,
    pub who: String,
    pub action: String,
    pub node: String,
    pub old: Option<serde_json::Value>,
    pub new: Option<serde_json::Value>,
    pub why: String,
}

/// What a batch ingest did.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct IngestReport {
    pub inserted: usize,
    pub closed: usize,
    pub unchanged: usize,
}

fn spec_json(s: &NodeSpec) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

impl Db {
    /// Opens (creating if needed) and migrates the database.
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        let mut db = Self::init(Connection::open(path)?)?;
        db.file = file_id(path).map(|(dev, ino)| (path.to_path_buf(), dev, ino));
        Ok(db)
    }

    /// Is the path opened still the file the service writes? SQLite keeps
    /// writing to a file removed or replaced under it, and everything
    /// written since is lost at the next start (issue #11: an edit was
    /// acknowledged, then gone). `Unavailable` (HTTP 503) when it is not;
    /// every request and cycle checks it first (one `stat`).
    pub fn check_file(&self) -> Result<()> {
        let Some((path, dev, ino)) = &self.file else {
            return Ok(());
        };
        if file_id(path) != Some((*dev, *ino)) {
            return Err(BudgetError::Unavailable(format!(
                "the database file {} was removed or replaced while the service runs; nothing \
                 more is written to it (it would be lost at the next start): restore the file, or \
                 restart compass-budgetd to open the one at that path",
                path.display()
            )));
        }
        // SQLite maps the `-shm` file and writes through the mapping: once
        // the file is made immutable or append-only, the next write kills
        // the process with SIGBUS (issue #11). Refused before any write.
        let mut shm = path.clone().into_os_string();
        shm.push("-shm");
        let shm = PathBuf::from(shm);
        if write_protected(&shm) {
            return Err(BudgetError::Unavailable(format!(
                "{} is immutable or append-only (chattr +i / +a): SQLite writes to it through a \
                 memory map, which would kill the service; nothing is written until \
                 `chattr -i -a {}`",
                shm.display(),
                shm.display()
            )));
        }
        Ok(())
    }

    /// An in-memory database (tests).
    pub fn open_in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?)
    }

    fn init(conn: Connection) -> Result<Self> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        conn.execute_batch("PRAGMA foreign_keys=ON; PRAGMA synchronous=FULL;")?;
        let mut db = Db { conn, file: None };
        db.migrate()?;
        Ok(db)
    }

    /// Can the database be written now? Rewrites the schema version in its
    /// own transaction (one small write, `/healthz`): a file system that
    /// refuses writes (read-only, full, an immutable file) fails here, not
    /// only at the next edit.
    pub fn write_check(&self) -> Result<()> {
        let v = self.version()?;
        self.conn
            .execute_batch(&format!(
                "BEGIN IMMEDIATE; PRAGMA user_version={v}; COMMIT;"
            ))
            .inspect_err(|_| {
                let _ = self.conn.execute_batch("ROLLBACK");
            })?;
        Ok(())
    }

    /// The schema version stored in the database.
    pub fn version(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?)
    }

    fn migrate(&mut self) -> Result<()> {
        let found = self.version()?;
        let known = known_version();
        if found > known {
            return Err(BudgetError::SchemaTooNew { found, known });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Exclusive)?;
            tx.execute_batch(sql)?;
            tx.execute_batch(&format!("PRAGMA user_version={}", i + 1))?;
            tx.commit()?;
            tracing::info!(version = i + 1, "applied schema migration");
        }
        Ok(())
    }

    /// Every node of the tree (may be empty on a fresh database).
    pub fn load_specs(&self) -> Result<Vec<NodeSpec>> {
        load_specs(&self.conn)
    }

    /// The validated tree, or `None` if no node exists yet; a stored tree
    /// that fails validation is [`BudgetError::InvalidStoredTree`] (which
    /// says how to repair it).
    pub fn load_tree(&self) -> Result<Option<OrgTree>> {
        let specs = self.load_specs()?;
        if specs.is_empty() {
            return Ok(None);
        }
        OrgTree::build(&specs)
            .map(Some)
            .map_err(|e| BudgetError::InvalidStoredTree(e.to_string()))
    }

    /// Applies one budget edit atomically: `edit` turns the current specs into
    /// the new ones (or refuses); the result must validate as a tree (or be
    /// empty); changed rows and one audit row per changed node are written
    /// in the same transaction. Returns the changes (empty: nothing written).
    pub fn edit_tree<F>(
        &mut self,
        who: &str,
        action: &str,
        why: &str,
        now: UnixSecs,
        edit: F,
    ) -> Result<Vec<TreeChange>>
    where
        F: FnOnce(&[NodeSpec]) -> Result<Vec<NodeSpec>>,
    {
        self.edit_tree_or_dry_run(who, action, why, now, false, edit)
    }

    /// [`Db::edit_tree`], or with `dry_run` every check of it (reason,
    /// permissions inside `edit`, a valid tree) and the changes it would
    /// make, with nothing written.
    pub fn edit_tree_or_dry_run<F>(
        &mut self,
        who: &str,
        action: &str,
        why: &str,
        now: UnixSecs,
        dry_run: bool,
        edit: F,
    ) -> Result<Vec<TreeChange>>
    where
        F: FnOnce(&[NodeSpec]) -> Result<Vec<NodeSpec>>,
    {
        if why.trim().is_empty() {
            return Err(BudgetError::field(
                "why",
                "every budget edit needs a reason",
            ));
        }
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let old = load_specs(&tx)?;
        let mut new = edit(&old)?;
        lowercase_accounts(&mut new);
        if !new.is_empty() {
            OrgTree::build(&new)?;
        }
        let changes = fairshare::diff(&old, &new);
        if dry_run {
            // The transaction rolls back when dropped: nothing is written.
            return Ok(changes);
        }
        // Accounts are UNIQUE and checked per statement: release the accounts
        // of every modified or removed node first, so that an edit may move
        // an account between nodes (the new tree was validated above).
        for c in &changes {
            if let TreeChange::Modify { old: n, .. } | TreeChange::Remove { node: n } = c {
                tx.execute(
                    "UPDATE nodes SET account = NULL WHERE name = ?1",
                    params![n.name],
                )?;
            }
        }
        for c in &changes {
            let (node, old_j, new_j) = match c {
                TreeChange::Add { node } => {
                    insert_node(&tx, node)?;
                    (node.name.clone(), None, Some(spec_json(node)))
                }
                TreeChange::Remove { node } => {
                    tx.execute("DELETE FROM nodes WHERE name = ?1", params![node.name])?;
                    (node.name.clone(), Some(spec_json(node)), None)
                }
                TreeChange::Modify { old, new } => {
                    tx.execute(
                        "UPDATE nodes SET parent = ?2, share = ?3, account = ?4, managers = ?5 WHERE name = ?1",
                        params![
                            new.name,
                            new.parent,
                            new.share,
                            new.account,
                            serde_json::to_string(&new.managers).unwrap_or_default()
                        ],
                    )?;
                    (new.name.clone(), Some(spec_json(old)), Some(spec_json(new)))
                }
            };
            tx.execute(
                "INSERT INTO audit (at, who, action, node, old, new, why) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![now, who, action, node, old_j, new_j, why],
            )?;
        }
        tx.commit()?;
        Ok(changes)
    }

    /// The newest audit rows first.
    pub fn audit(&self, limit: usize) -> Result<Vec<AuditRow>> {
        let mut st = self.conn.prepare(
            "SELECT id, at, who, action, node, old, new, why FROM audit ORDER BY id DESC LIMIT ?1",
        )?;
        let rows = st.query_map(params![limit as i64], |r| {
            let parse = |s: Option<String>| s.and_then(|s| serde_json::from_str(&s).ok());
            Ok(AuditRow {
                id: r.get(0)?,
                at: r.get(1)?,
                who: r.get(2)?,
                action: r.get(3)?,
                node: r.get(4)?,
                old: parse(r.get(5)?),
                new: parse(r.get(6)?),
                why: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Merges observed intervals into the ledger in one transaction, with the
    /// core's idempotent rules ([`Ledger::ingest`]). `seen_at` is recorded as
    /// the last time each interval was observed.
    pub fn ingest(&mut self, observed: &[Interval], seen_at: UnixSecs) -> Result<IngestReport> {
        self.ingest_with(observed, seen_at, false)
    }

    /// [`Db::ingest`] for what Slurm reports each cycle: the first
    /// observation of a run fixes its account, GPUs and kind. A job that is
    /// completing on several nodes reports fewer GPUs as its nodes finish;
    /// that must close the interval, not fail the cycle.
    pub fn ingest_observed(
        &mut self,
        observed: &[Interval],
        seen_at: UnixSecs,
    ) -> Result<IngestReport> {
        self.ingest_with(observed, seen_at, true)
    }

    fn ingest_with(
        &mut self,
        observed: &[Interval],
        seen_at: UnixSecs,
        first_wins: bool,
    ) -> Result<IngestReport> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut rep = IngestReport::default();
        for obs in observed {
            let cur = get_interval(&tx, obs.job, obs.start)?;
            let mut fixed;
            let obs = match &cur {
                Some(c)
                    if first_wins
                        && (c.account != obs.account
                            || c.gpus != obs.gpus
                            || c.kind != obs.kind) =>
                {
                    tracing::debug!(
                        job = obs.job.0,
                        start = obs.start,
                        gpus = obs.gpus,
                        ledger_gpus = c.gpus,
                        "run reported with other account/GPUs/kind; keeping its first observation"
                    );
                    fixed = obs.clone();
                    fixed.account = c.account.clone();
                    fixed.gpus = c.gpus;
                    fixed.kind = c.kind;
                    &fixed
                }
                _ => obs,
            };
            let mut one = Ledger::new();
            if let Some(c) = cur {
                one.ingest(c)?;
            }
            match one.ingest(obs.clone())? {
                IngestOutcome::Inserted => {
                    tx.execute(
                        "INSERT INTO intervals (job, start, account, gpus, end_time, kind, last_seen, weight) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                        params![obs.job.0 as i64, obs.start, obs.account, obs.gpus, obs.end, obs.kind.as_str(), seen_at, obs.weight],
                    )?;
                    rep.inserted += 1;
                }
                IngestOutcome::Closed => {
                    let end = one.get(&obs.key()).and_then(|i| i.end);
                    tx.execute(
                        "UPDATE intervals SET end_time = ?3, last_seen = MAX(last_seen, ?4) WHERE job = ?1 AND start = ?2",
                        params![obs.job.0 as i64, obs.start, end, seen_at],
                    )?;
                    rep.closed += 1;
                }
                IngestOutcome::Unchanged => {
                    tx.execute(
                        "UPDATE intervals SET last_seen = MAX(last_seen, ?3) WHERE job = ?1 AND start = ?2",
                        params![obs.job.0 as i64, obs.start, seen_at],
                    )?;
                    rep.unchanged += 1;
                }
            }
        }
        tx.commit()?;
        Ok(rep)
    }

    /// Closes open intervals that Slurm no longer reports as running, at the
    /// last time they were seen (the job ended somewhere in between; this
    /// never over-charges), or at `now` if that is earlier: after the clock
    /// stepped forward and back, `last_seen` lies in the future, and no run
    /// is charged past the present. Returns how many were closed.
    pub fn close_vanished(
        &mut self,
        still_running: &[(JobId, UnixSecs)],
        now: UnixSecs,
    ) -> Result<usize> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let open: Vec<(i64, i64)> = {
            let mut st = tx.prepare("SELECT job, start FROM intervals WHERE end_time IS NULL")?;
            let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect::<std::result::Result<_, _>>()?
        };
        let running: std::collections::HashSet<(i64, i64)> = still_running
            .iter()
            .map(|(j, s)| (j.0 as i64, *s))
            .collect();
        let mut n = 0;
        for key in open {
            if !running.contains(&key) {
                n += tx.execute(
                    "UPDATE intervals SET end_time = MAX(start, MIN(last_seen, ?3)) WHERE job = ?1 AND start = ?2",
                    params![key.0, key.1, now],
                )?;
            }
        }
        tx.commit()?;
        Ok(n)
    }

    /// The intervals that overlap `[from, to)`, as a core ledger.
    pub fn ledger_between(&self, from: UnixSecs, to: UnixSecs) -> Result<Ledger> {
        let mut st = self.conn.prepare(
            "SELECT job, start, account, gpus, end_time, kind, weight FROM intervals WHERE start < ?2 AND (end_time IS NULL OR end_time > ?1)",
        )?;
        let rows = st.query_map(params![from, to], row_interval)?;
        let mut l = Ledger::new();
        for r in rows {
            l.ingest(r?)?;
        }
        Ok(l)
    }

    /// Weighted GPU-seconds per account and kind in `[from, to)`, summed in SQL
    /// (same result as `ledger_between(from, to)?.usage(from, to)`, without
    /// loading the intervals).
    pub fn usage_between(&self, from: UnixSecs, to: UnixSecs) -> Result<HashMap<String, Usage>> {
        let mut st = self.conn.prepare(
            "SELECT account, kind, SUM(gpus * weight * (MIN(COALESCE(end_time, ?2), ?2) - MAX(start, ?1)))
             FROM intervals
             WHERE start < ?2 AND (end_time IS NULL OR end_time > ?1)
             GROUP BY account, kind",
        )?;
        let rows = st.query_map(params![from, to], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, f64>(2)?,
            ))
        })?;
        let mut out: HashMap<String, Usage> = HashMap::new();
        for row in rows {
            let (acct, kind, gpu_s) = row?;
            if gpu_s > 0.0 {
                let u = out.entry(acct).or_default();
                if kind == "allocated" {
                    u.charged_gpu_s += gpu_s;
                } else {
                    u.free_gpu_s += gpu_s;
                }
            }
        }
        Ok(out)
    }

    /// Deletes intervals that ended, and demand hours, before `cutoff`.
    /// Returns the number of intervals deleted.
    pub fn prune_before(&mut self, cutoff: UnixSecs) -> Result<usize> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx.execute(
            "DELETE FROM intervals WHERE end_time IS NOT NULL AND end_time < ?1",
            params![cutoff],
        )?;
        tx.execute(
            "DELETE FROM demand WHERE hour < ?1",
            params![cutoff.div_euclid(3600)],
        )?;
        tx.commit()?;
        Ok(n)
    }

    /// The latest run interval of a job, if any.
    pub fn latest_interval(&self, job: JobId) -> Result<Option<Interval>> {
        Ok(self
            .conn
            .query_row(
                "SELECT job, start, account, gpus, end_time, kind, weight FROM intervals WHERE job = ?1 ORDER BY start DESC LIMIT 1",
                params![job.0 as i64],
                row_interval,
            )
            .optional()?)
    }

    /// Records the Slurm user of runs already in the ledger (from the same
    /// snapshot as [`Db::ingest_observed`]): `(job, run start, user)`. The
    /// first user recorded for a run is kept.
    pub fn record_job_users(&mut self, runs: &[(JobId, UnixSecs, String)]) -> Result<usize> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut n = 0;
        {
            let mut st = tx.prepare(
                "UPDATE intervals SET user = ?3 WHERE job = ?1 AND start = ?2 AND user IS NULL",
            )?;
            for (job, start, user) in runs.iter().filter(|r| !r.2.is_empty()) {
                n += st.execute(params![job.0 as i64, start, user])?;
            }
        }
        tx.commit()?;
        Ok(n)
    }

    /// The user of a job's latest run, if the ledger knows it (`None` for
    /// runs recorded before schema 5, or ingested through the API).
    pub fn job_user(&self, job: JobId) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT user FROM intervals WHERE job = ?1 ORDER BY start DESC LIMIT 1",
                params![job.0 as i64],
                |r| r.get::<_, Option<String>>(0),
            )
            .optional()?
            .flatten())
    }

    /// Every run of `job` in the ledger with its user (`None`: not
    /// recorded), oldest first. slurmctld reuses job ids after a cold
    /// start: these may be runs of several jobs.
    pub fn runs_of(&self, job: JobId) -> Result<Vec<(Interval, Option<String>)>> {
        let mut st = self.conn.prepare(
            "SELECT job, start, account, gpus, end_time, kind, weight, user FROM intervals
             WHERE job = ?1 ORDER BY start",
        )?;
        let rows = st.query_map(params![job.0 as i64], |r| {
            Ok((row_interval(r)?, r.get::<_, Option<String>>(7)?))
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// The accounts (lower case) of every run of `user` in the ledger.
    pub fn accounts_of_user(&self, user: &str) -> Result<Vec<String>> {
        let mut st = self
            .conn
            .prepare("SELECT DISTINCT lower(account) FROM intervals WHERE user = ?1")?;
        let rows = st.query_map(params![user], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// A user's ended runs that ended at or after `since`, newest first.
    pub fn ended_runs_of(
        &self,
        user: &str,
        since: UnixSecs,
        limit: usize,
    ) -> Result<Vec<Interval>> {
        let mut st = self.conn.prepare(
            "SELECT job, start, account, gpus, end_time, kind, weight FROM intervals
             WHERE user = ?1 AND end_time IS NOT NULL AND end_time >= ?2
             ORDER BY end_time DESC, job DESC LIMIT ?3",
        )?;
        let rows = st.query_map(params![user, since, limit as i64], row_interval)?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Number of intervals stored.
    pub fn interval_count(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("SELECT COUNT(*) FROM intervals", [], |r| r.get(0))?)
    }

    /// Adds demand (GPU-seconds) for accounts in the hour containing `at`.
    pub fn add_demand(&mut self, at: UnixSecs, per_account: &[(String, f64)]) -> Result<()> {
        let tx = self.conn.transaction()?;
        for (acct, gpu_s) in per_account {
            tx.execute(
                "INSERT INTO demand (hour, account, gpu_s) VALUES (?1, ?2, ?3)
                 ON CONFLICT(hour, account) DO UPDATE SET gpu_s = gpu_s + excluded.gpu_s",
                params![at.div_euclid(3600), acct, gpu_s],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Demand rows `(hour, account, gpu_s)` for hours in `[from, to)`.
    pub fn demand_between(&self, from: UnixSecs, to: UnixSecs) -> Result<Vec<(i64, String, f64)>> {
        let mut st = self
            .conn
            .prepare("SELECT hour, account, gpu_s FROM demand WHERE hour >= ?1 AND hour < ?2")?;
        let rows = st.query_map(params![from.div_euclid(3600), to.div_euclid(3600)], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Integrity check used by the durability test: `PRAGMA integrity_check`.
    pub fn integrity_ok(&self) -> Result<bool> {
        let s: String = self
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        Ok(s == "ok")
    }
}

/// One enforcement action (table `actions`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ActionRow {
    #[serde(default)]
    pub id: i64,
    pub at: i64,
    /// `requeue`, `cancel`, `drain` or `resume`.
    pub action: String,
    pub job: Option<u64>,
    /// Start of the victim's run that the action ended.
    pub run_start: Option<i64>,
    pub node: Option<String>,
    /// The pending job that needed the room.
    pub cause_job: Option<u64>,
    /// `unallocated`, `over_served`, `faulty_node` or `admin`.
    pub rule: Option<String>,
    pub lost_gpu_s: f64,
    pub ok: bool,
    pub detail: String,
    /// The victim's submit time when the action was taken (with `job`, the
    /// job's identity: slurmctld reuses ids after a cold start).
    #[serde(default)]
    pub submit: Option<i64>,
    /// Decided and logged only (`[protection] enforce = "dry-run"`).
    #[serde(default)]
    pub dry_run: bool,
    /// The victim's owner when the action was taken (schema 8; `None` for
    /// older actions): who may read it under `PrivateData=jobs`
    /// ([`crate::api::visible_actions`]). Not part of the API's rows.
    #[serde(skip_serializing, default)]
    pub user: Option<String>,
    /// The owner of the job it made room for, likewise.
    #[serde(skip_serializing, default)]
    pub cause_user: Option<String>,
}

impl ActionRow {
    /// An action on a node (`drain`, `resume`): no job, no GPU time lost.
    pub fn on_node(
        at: i64,
        action: &str,
        node: &str,
        rule: &str,
        ok: bool,
        detail: String,
    ) -> Self {
        ActionRow {
            id: 0,
            at,
            action: action.into(),
            job: None,
            run_start: None,
            node: Some(node.to_string()),
            cause_job: None,
            rule: Some(rule.into()),
            lost_gpu_s: 0.0,
            ok,
            detail,
            submit: None,
            dry_run: false,
            user: None,
            cause_user: None,
        }
    }
}

/// A node an admin marked faulty.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FaultyNode {
    pub node: String,
    pub reason: String,
    pub since: i64,
    pub by: String,
}

/// The last preemption of a job (no-ping-pong rule).
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
pub struct PreemptRecord {
    pub by_job: Option<u64>,
    pub at: i64,
    /// Not yet run its min runtime since.
    pub owes: bool,
    /// The victim's submit time before the requeue (0: unknown, a record
    /// from schema 2).
    pub victim_submit: i64,
    /// The preemptor's submit time.
    pub by_submit: Option<i64>,
}

/// Room freed by preemption for a pending job (table `room_given`).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RoomGiven {
    pub job: u64,
    pub submit: i64,
    /// The last preemption made for it.
    pub at: i64,
    /// Its request then.
    pub request: String,
    /// The cluster's usable nodes then.
    pub nodes: String,
    /// When the start grace passed without the job starting.
    pub fruitless_at: Option<i64>,
    pub dry_run: bool,
}

fn row_action(r: &rusqlite::Row<'_>) -> rusqlite::Result<ActionRow> {
    Ok(ActionRow {
        id: r.get(0)?,
        at: r.get(1)?,
        action: r.get(2)?,
        job: r.get::<_, Option<i64>>(3)?.map(|j| j as u64),
        run_start: r.get(4)?,
        node: r.get(5)?,
        cause_job: r.get::<_, Option<i64>>(6)?.map(|j| j as u64),
        rule: r.get(7)?,
        lost_gpu_s: r.get(8)?,
        ok: r.get::<_, i64>(9)? != 0,
        detail: r.get(10)?,
        submit: r.get(11)?,
        dry_run: r.get::<_, i64>(12)? != 0,
        user: r.get(13)?,
        cause_user: r.get(14)?,
    })
}

const ACTION_COLS: &str =
    "id, at, action, job, run_start, node, cause_job, rule, lost_gpu_s, ok, detail, submit, dry_run, user, cause_user";

impl Db {
    /// Appends an action to the log; returns its id.
    pub fn log_action(&mut self, a: &ActionRow) -> Result<i64> {
        self.conn.execute(
            "INSERT INTO actions (at, action, job, run_start, node, cause_job, rule, lost_gpu_s, ok, detail, submit, dry_run, user, cause_user)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            params![
                a.at,
                a.action,
                a.job.map(|j| j as i64),
                a.run_start,
                a.node,
                a.cause_job.map(|j| j as i64),
                a.rule,
                a.lost_gpu_s.max(0.0),
                i64::from(a.ok),
                a.detail,
                a.submit,
                i64::from(a.dry_run),
                a.user,
                a.cause_user
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Actions, newest first: all, or those whose victim or cause is `job`.
    pub fn actions(&self, job: Option<u64>, limit: usize) -> Result<Vec<ActionRow>> {
        let (sql, j) = match job {
            Some(j) => (
                format!("SELECT {ACTION_COLS} FROM actions WHERE job = ?1 OR cause_job = ?1 ORDER BY id DESC LIMIT ?2"),
                j as i64,
            ),
            None => (
                format!("SELECT {ACTION_COLS} FROM actions WHERE ?1 = ?1 ORDER BY id DESC LIMIT ?2"),
                0,
            ),
        };
        let mut st = self.conn.prepare(&sql)?;
        let rows = st.query_map(params![j, limit as i64], row_action)?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Was the run of `job` that started at `run_start` already requeued or
    /// cancelled successfully? (Never act twice on one run.)
    /// With `dry_run`, a dry-run action counts too (the dry run's view).
    pub fn run_ended_by_us(&self, job: u64, run_start: i64, dry_run: bool) -> Result<bool> {
        Ok(self
            .conn
            .query_row(
                "SELECT 1 FROM actions WHERE job = ?1 AND run_start = ?2 AND ok = 1 AND dry_run <= ?3 AND action IN ('requeue', 'cancel') LIMIT 1",
                params![job as i64, run_start, i64::from(dry_run)],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// When Slurm began refusing to requeue this run (`job` started at
    /// `run_start`), if it refuses still: the first refusal of the latest
    /// streak ([`refusal_streak_start`]). A refusal long ago followed by no
    /// attempt is no streak (issue #11: a refusal an hour old made the next
    /// requeue of the same run a cancel at once).
    pub fn requeue_refused_since(
        &self,
        job: u64,
        run_start: i64,
        now: i64,
        gap: i64,
    ) -> Result<Option<i64>> {
        let mut st = self.conn.prepare_cached(
            "SELECT at FROM actions WHERE job = ?1 AND run_start = ?2 AND ok = 0 AND dry_run = 0 AND action = 'requeue' ORDER BY at DESC",
        )?;
        let times = st
            .query_map(params![job as i64, run_start], |r| r.get::<_, i64>(0))?
            .collect::<rusqlite::Result<Vec<i64>>>()?;
        Ok(refusal_streak_start(&times, now, gap))
    }

    /// Marks a node faulty (replacing an earlier record of it).
    pub fn set_faulty(&mut self, f: &FaultyNode) -> Result<()> {
        self.conn.execute(
            "INSERT INTO faulty_nodes (node, reason, since, by) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT(node) DO UPDATE SET reason = excluded.reason, since = excluded.since, by = excluded.by",
            params![f.node, f.reason, f.since, f.by],
        )?;
        Ok(())
    }

    /// Clears a node's faulty record; `false` if it had none.
    pub fn clear_faulty(&mut self, node: &str) -> Result<bool> {
        Ok(self
            .conn
            .execute("DELETE FROM faulty_nodes WHERE node = ?1", params![node])?
            > 0)
    }

    /// Every faulty node, by name.
    pub fn faulty(&self) -> Result<Vec<FaultyNode>> {
        let mut st = self
            .conn
            .prepare("SELECT node, reason, since, by FROM faulty_nodes ORDER BY node")?;
        let rows = st.query_map([], |r| {
            Ok(FaultyNode {
                node: r.get(0)?,
                reason: r.get(1)?,
                since: r.get(2)?,
                by: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// Records that `victim` (submitted at `victim_submit`) was preempted
    /// for `by` (job, submit time) at `at`; it owes its min runtime from now
    /// on. Replaces the record of an earlier job with the same id.
    pub fn record_preemption(
        &mut self,
        victim: (u64, i64),
        by: Option<(u64, i64)>,
        at: i64,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO preemptions (victim, victim_submit, by_job, by_submit, at, owes) VALUES (?1, ?2, ?3, ?4, ?5, 1)
             ON CONFLICT(victim) DO UPDATE SET victim_submit = excluded.victim_submit, by_job = excluded.by_job,
             by_submit = excluded.by_submit, at = excluded.at, owes = 1",
            params![
                victim.0 as i64,
                victim.1,
                by.map(|b| b.0 as i64),
                by.map(|b| b.1),
                at
            ],
        )?;
        Ok(())
    }

    /// The last preemption of every job that was preempted.
    pub fn preemptions(&self) -> Result<HashMap<u64, PreemptRecord>> {
        let mut st = self.conn.prepare(
            "SELECT victim, by_job, at, owes, victim_submit, by_submit FROM preemptions",
        )?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)? as u64,
                PreemptRecord {
                    by_job: r.get::<_, Option<i64>>(1)?.map(|j| j as u64),
                    at: r.get(2)?,
                    owes: r.get::<_, i64>(3)? != 0,
                    victim_submit: r.get(4)?,
                    by_submit: r.get(5)?,
                },
            ))
        })?;
        Ok(rows.collect::<std::result::Result<_, _>>()?)
    }

    /// `victim` has run its min runtime since its last preemption.
    pub fn settle_preemption(&mut self, victim: u64) -> Result<()> {
        self.conn.execute(
            "UPDATE preemptions SET owes = 0 WHERE victim = ?1",
            params![victim as i64],
        )?;
        Ok(())
    }

    /// Room given by preemption to each pending job that has not started
    /// since.
    pub fn rooms_given(&self) -> Result<HashMap<u64, RoomGiven>> {
        let mut st = self.conn.prepare(
            "SELECT job, submit, at, request, nodes, fruitless_at, dry_run FROM room_given",
        )?;
        let rows = st.query_map([], |r| {
            Ok(RoomGiven {
                job: r.get::<_, i64>(0)? as u64,
                submit: r.get(1)?,
                at: r.get(2)?,
                request: r.get(3)?,
                nodes: r.get(4)?,
                fruitless_at: r.get(5)?,
                dry_run: r.get::<_, i64>(6)? != 0,
            })
        })?;
        rows.map(|r| Ok(r.map(|g| (g.job, g))?)).collect()
    }

    /// Records that room was freed for `g.job` (replacing an older record).
    pub fn record_room_given(&mut self, g: &RoomGiven) -> Result<()> {
        self.conn.execute(
            "INSERT OR REPLACE INTO room_given (job, submit, at, request, nodes, fruitless_at, dry_run)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                g.job as i64,
                g.submit,
                g.at,
                g.request,
                g.nodes,
                g.fruitless_at,
                i64::from(g.dry_run)
            ],
        )?;
        Ok(())
    }

    /// Marks the room given to `job` fruitless at `at`.
    pub fn room_fruitless(&mut self, job: u64, at: i64) -> Result<()> {
        self.conn.execute(
            "UPDATE room_given SET fruitless_at = ?2 WHERE job = ?1",
            params![job as i64, at],
        )?;
        Ok(())
    }

    /// Appends `note` to the actions taken at `at` for the pending job
    /// `cause` (what `compass why` shows for the victim and the cause).
    pub fn note_on_actions_for(&mut self, cause: u64, at: i64, note: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE actions SET detail = detail || '; ' || ?3 WHERE cause_job = ?1 AND at = ?2",
            params![cause as i64, at, note],
        )?;
        Ok(())
    }

    /// Forgets the room given to `job` (it started, or may preempt again).
    pub fn forget_room(&mut self, job: u64) -> Result<()> {
        self.conn
            .execute("DELETE FROM room_given WHERE job = ?1", params![job as i64])?;
        Ok(())
    }

    /// Deletes actions, settled preemption records and cycle-history
    /// samples older than `cutoff`.
    pub fn prune_actions_before(&mut self, cutoff: i64) -> Result<()> {
        self.conn
            .execute("DELETE FROM actions WHERE at < ?1", params![cutoff])?;
        self.conn
            .execute("DELETE FROM cycle_history WHERE at < ?1", params![cutoff])?;
        self.conn.execute(
            "DELETE FROM preemptions WHERE at < ?1 AND owes = 0",
            params![cutoff],
        )?;
        Ok(())
    }
}

/// One cycle's cluster-wide figures (a row of `cycle_history`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CycleSample {
    /// The cycle's time (Unix seconds; a point of the history: its bucket's start).
    pub at: i64,
    /// GPUs of running jobs (weighted as charged).
    pub gpus_allocated: f64,
    /// The cluster's GPUs (weighted).
    pub capacity_gpus: f64,
    pub pending_jobs: f64,
    /// Wait so far of the longest-waiting pending job (`None`: no job waits).
    pub longest_wait_s: Option<f64>,
    /// Median wait of the jobs started since the previous cycle.
    pub median_wait_s: Option<f64>,
    /// The select plugin's N*SIF (`None`: no state file configured or readable).
    pub n_sif: Option<f64>,
    pub partial_nodes: Option<f64>,
}

/// Most points [`Db::history`] returns over any window.
pub const HISTORY_MAX_POINTS: i64 = 500;

impl Db {
    /// Records one cycle's sample; a later sample of the same minute
    /// replaces it (at most one row per minute).
    pub fn record_cycle_sample(&mut self, s: &CycleSample) -> Result<()> {
        self.conn.execute(
            "INSERT OR REPLACE INTO cycle_history (minute, at, gpus_allocated, capacity_gpus,
                 pending_jobs, longest_wait_s, median_wait_s, n_sif, partial_nodes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                s.at.div_euclid(60),
                s.at,
                s.gpus_allocated,
                s.capacity_gpus,
                s.pending_jobs.round() as i64,
                s.longest_wait_s.map(|w| w.round() as i64),
                s.median_wait_s,
                s.n_sif,
                s.partial_nodes.map(|p| p.round() as i64),
            ],
        )?;
        Ok(())
    }

    /// The time of the newest cycle-history sample not later than `now`:
    /// the last cycle of the service before it (re)started, as far as the
    /// database knows. Samples after `now` (written while the clock was
    /// ahead) are left out.
    pub fn last_cycle_at(&self, now: UnixSecs) -> Result<Option<i64>> {
        Ok(self.conn.query_row(
            "SELECT MAX(at) FROM cycle_history WHERE at <= ?1",
            params![now],
            |r| r.get(0),
        )?)
    }

    /// Rows of the cycle history (tests).
    #[cfg(test)]
    pub(crate) fn cycle_history_rows(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("SELECT COUNT(*) FROM cycle_history", [], |r| r.get(0))?)
    }

    /// The history over `[from, to)`, oldest first, in buckets of whole
    /// minutes, at least `(to - from) / (HISTORY_MAX_POINTS - 1)` seconds
    /// long and aligned on multiples of their size since 1970 (the same
    /// buckets from one call to the next), so at most
    /// [`HISTORY_MAX_POINTS`] points whatever the window; and the bucket
    /// size. A point is its bucket's averages (the longest wait: its
    /// maximum; NULL samples left out), `at` its bucket's start (not
    /// before `from`); buckets without samples are left out.
    pub fn history(&self, from: i64, to: i64) -> Result<(Vec<CycleSample>, i64)> {
        let span = (to - from).max(1);
        let per = (span + HISTORY_MAX_POINTS - 2) / (HISTORY_MAX_POINTS - 1);
        let bucket = ((per + 59) / 60).max(1) * 60;
        let mut st = self.conn.prepare(
            "SELECT at / ?3 AS k, AVG(gpus_allocated), AVG(capacity_gpus), AVG(pending_jobs),
                    MAX(longest_wait_s), AVG(median_wait_s), AVG(n_sif), AVG(partial_nodes)
             FROM cycle_history WHERE at >= ?1 AND at < ?2
             GROUP BY k ORDER BY k",
        )?;
        let rows = st
            .query_map(params![from, to, bucket], |r| {
                Ok(CycleSample {
                    at: (r.get::<_, i64>(0)? * bucket).max(from),
                    gpus_allocated: r.get(1)?,
                    capacity_gpus: r.get(2)?,
                    pending_jobs: r.get(3)?,
                    longest_wait_s: r.get::<_, Option<i64>>(4)?.map(|w| w as f64),
                    median_wait_s: r.get(5)?,
                    n_sif: r.get(6)?,
                    partial_nodes: r.get(7)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        Ok((rows, bucket))
    }
}

/// The first of the latest streak of refusals `times` (any order), each
/// within `gap` seconds of the one after it and the last within `gap` of
/// `now`; `None` when the last is older (the refusals stopped: the
/// service did not try again, the run was not needed as a victim). A
/// success ends the run, so no success can sit between two refusals.
pub fn refusal_streak_start(times: &[i64], now: i64, gap: i64) -> Option<i64> {
    let mut t: Vec<i64> = times.to_vec();
    t.sort_unstable_by(|a, b| b.cmp(a));
    let mut first = *t.first().filter(|&&last| now.saturating_sub(last) <= gap)?;
    for &earlier in &t[1..] {
        if first.saturating_sub(earlier) > gap {
            break;
        }
        first = earlier;
    }
    Some(first)
}

/// Slurm stores account names in lower case (`sbatch -A NLP-A` runs as
/// `nlp-a`): so does the tree, or such jobs would charge nobody. Every
/// tree written goes through this, and an import compares and checks its
/// nodes after it (issue #11: a dry run reported, and a manager was refused
/// for, a change of case the import itself never made).
pub fn lowercase_accounts(nodes: &mut [NodeSpec]) {
    for s in nodes {
        if let Some(a) = s.account.as_mut() {
            a.make_ascii_lowercase();
        }
    }
}

/// Is the file at `path` immutable or append-only (`chattr +i`, `+a`)?
/// `false` when it does not exist, or its file system has no such flags.
/// Three system calls: open, `FS_IOC_GETFLAGS`, close.
fn write_protected(path: &Path) -> bool {
    use std::os::fd::AsRawFd;
    /// `FS_IMMUTABLE_FL | FS_APPEND_FL` (linux/fs.h).
    const PROTECTED: libc::c_int = 0x10 | 0x20;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut flags: libc::c_int = 0;
    // SAFETY: a valid open descriptor, and `flags` outlives the call; the
    // kernel writes an int into it (ioctl_iflags(2)).
    let r = unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) };
    r == 0 && flags & PROTECTED != 0
}

/// The device and inode of `path`, if it names a file.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino()))
}

/// Did SQLite fail because of its storage (the file system refused a read
/// or write, the disk is full, the file is locked, unreadable or not a
/// database)? The API answers such a failure 503 (a dependency failed),
/// not 500.
pub fn storage_failed(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode as C;
    matches!(
        e.sqlite_error_code(),
        Some(
            C::SystemIoFailure
                | C::DiskFull
                | C::ReadOnly
                | C::CannotOpen
                | C::DatabaseBusy
                | C::DatabaseLocked
                | C::NotADatabase
                | C::DatabaseCorrupt
        )
    )
}

fn row_interval(r: &rusqlite::Row<'_>) -> rusqlite::Result<Interval> {
    let kind: String = r.get(5)?;
    Ok(Interval {
        job: JobId(r.get::<_, i64>(0)? as u64),
        start: r.get(1)?,
        account: r.get(2)?,
        gpus: r.get(3)?,
        end: r.get(4)?,
        kind: if kind == "allocated" {
            Kind::Allocated
        } else {
            Kind::Unallocated
        },
        weight: r.get(6)?,
    })
}

fn get_interval(conn: &Connection, job: JobId, start: UnixSecs) -> Result<Option<Interval>> {
    Ok(conn
        .query_row(
            "SELECT job, start, account, gpus, end_time, kind, weight FROM intervals WHERE job = ?1 AND start = ?2",
            params![job.0 as i64, start],
            row_interval,
        )
        .optional()?)
}

fn load_specs(conn: &Connection) -> Result<Vec<NodeSpec>> {
    let mut st =
        conn.prepare("SELECT name, parent, share, account, managers FROM nodes ORDER BY name")?;
    let rows = st.query_map([], |r| {
        let managers: String = r.get(4)?;
        Ok(NodeSpec {
            name: r.get(0)?,
            parent: r.get(1)?,
            share: r.get(2)?,
            account: r.get(3)?,
            managers: serde_json::from_str(&managers).unwrap_or_default(),
        })
    })?;
    Ok(rows.collect::<std::result::Result<_, _>>()?)
}

fn insert_node(conn: &Connection, s: &NodeSpec) -> Result<()> {
    conn.execute(
        "INSERT INTO nodes (name, parent, share, account, managers) VALUES (?1, ?2, ?3, ?4, ?5)",
        params![
            s.name,
            s.parent,
            s.share,
            s.account,
            serde_json::to_string(&s.managers).unwrap_or_default()
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_node_removed_from_the_tree_finds_its_children_by_index() {
        // The foreign key's check of each removed node reads `parent`
        // (issue #11: without an index, replacing a tree of 10,000 nodes
        // read the whole table per node). SQLite's plan says so.
        let db = super::Db::open_in_memory().unwrap();
        let plan: String = db
            .conn
            .query_row(
                "EXPLAIN QUERY PLAN SELECT 1 FROM nodes WHERE parent = 'x'",
                [],
                |r| r.get(3),
            )
            .unwrap();
        assert!(
            plan.contains("USING COVERING INDEX nodes_parent")
                || plan.contains("USING INDEX nodes_parent"),
            "{plan}"
        );
    }

    #[test]
    fn storage_failures_are_told_from_other_sqlite_errors() {
        use rusqlite::ffi;
        let e = |code| rusqlite::Error::SqliteFailure(ffi::Error::new(code), None);
        for code in [
            ffi::SQLITE_IOERR,
            ffi::SQLITE_IOERR_WRITE,
            ffi::SQLITE_FULL,
            ffi::SQLITE_READONLY,
            ffi::SQLITE_CANTOPEN,
            ffi::SQLITE_BUSY,
            ffi::SQLITE_NOTADB,
        ] {
            assert!(super::storage_failed(&e(code)), "{code}");
        }
        for code in [
            ffi::SQLITE_CONSTRAINT,
            ffi::SQLITE_MISMATCH,
            ffi::SQLITE_ERROR,
        ] {
            assert!(!super::storage_failed(&e(code)), "{code}");
        }
        assert!(!super::storage_failed(
            &rusqlite::Error::QueryReturnedNoRows
        ));
    }

    #[test]
    fn a_refusal_streak_is_refusals_in_a_row_up_to_now() {
        use super::refusal_streak_start as streak;
        // Every cycle (10 s) for a minute: the streak began at the first.
        let run: Vec<i64> = (0..7).map(|k| 1000 + 10 * k).collect();
        assert_eq!(streak(&run, 1065, 20), Some(1000));
        // The same refusals, an hour later: no streak (issue #11: an old
        // refusal made the next requeue a cancel at once).
        assert_eq!(streak(&run, 4660, 20), None);
        // An old refusal, then a new streak: it began at the new one.
        assert_eq!(streak(&[1000, 4600, 4610], 4615, 20), Some(4600));
        assert_eq!(streak(&[4610, 1000, 4600], 4615, 20), Some(4600));
        // A gap of exactly `gap` keeps the streak; one more second ends it.
        assert_eq!(streak(&[1000, 1020], 1040, 20), Some(1000));
        assert_eq!(streak(&[1000, 1021], 1041, 20), Some(1021));
        assert_eq!(streak(&[], 1000, 20), None);
    }

    use super::*;

    fn spec(name: &str, parent: Option<&str>, share: f64, account: Option<&str>) -> NodeSpec {
        NodeSpec {
            name: name.into(),
            parent: parent.map(Into::into),
            share,
            managers: vec![],
            account: account.map(Into::into),
        }
    }

    fn seeded() -> Db {
        let mut db = Db::open_in_memory().unwrap();
        db.edit_tree("root", "import", "seed", 1, |_| {
            Ok(vec![
                spec("org", None, 1.0, None),
                spec("a", Some("org"), 0.7, Some("acct-a")),
                spec("b", Some("org"), 0.3, Some("acct-b")),
            ])
        })
        .unwrap();
        db
    }

    #[test]
    fn edit_writes_rows_and_audit_atomically() {
        let mut db = seeded();
        assert_eq!(db.audit(10).unwrap().len(), 3);
        // A refused edit changes nothing and writes no audit row.
        let e = db
            .edit_tree("root", "update", "too much", 2, |old| {
                let mut v = old.to_vec();
                v.iter_mut().find(|s| s.name == "b").unwrap().share = 0.4;
                Ok(v)
            })
            .unwrap_err();
        assert!(e.to_string().contains("more than 1"), "{e}");
        assert_eq!(db.audit(10).unwrap().len(), 3);
        let changes = db
            .edit_tree("pat", "update", "rebalance", 3, |old| {
                let mut v = old.to_vec();
                v.iter_mut().find(|s| s.name == "a").unwrap().share = 0.6;
                Ok(v)
            })
            .unwrap();
        assert_eq!(changes.len(), 1);
        let a = &db.audit(1).unwrap()[0];
        assert_eq!(
            (a.who.as_str(), a.node.as_str(), a.why.as_str(), a.at),
            ("pat", "a", "rebalance", 3)
        );
        assert_eq!(a.old.as_ref().unwrap()["share"], 0.7);
        assert_eq!(a.new.as_ref().unwrap()["share"], 0.6);
        let t = db.load_tree().unwrap().unwrap();
        assert!((t.node(t.find("a").unwrap()).abs_share - 0.6).abs() < 1e-12);
        assert!(db
            .edit_tree("pat", "update", " ", 3, |o| Ok(o.to_vec()))
            .is_err());
    }

    #[test]
    fn accounts_are_stored_in_lower_case_like_slurm() {
        let mut db = seeded();
        let changes = db
            .edit_tree("root", "import", "mixed case", 2, |old| {
                let mut v = old.to_vec();
                v.iter_mut().find(|s| s.name == "a").unwrap().account = Some("Acct-A".into());
                v.push(spec("c", Some("org"), 0.0, Some("vcEwI")));
                Ok(v)
            })
            .unwrap();
        assert_eq!(changes.len(), 1, "only the new leaf: {changes:?}");
        let t = db.load_tree().unwrap().unwrap();
        assert_eq!(t.leaf_for_account("vcewi").unwrap(), t.find("c").unwrap());
        assert_eq!(t.leaf_for_account("acct-a").unwrap(), t.find("a").unwrap());
        // two accounts equal but for case are one account
        let e = db
            .edit_tree("root", "import", "clash", 3, |old| {
                let mut v = old.to_vec();
                v.push(spec("d", Some("org"), 0.0, Some("ACCT-B")));
                Ok(v)
            })
            .unwrap_err();
        assert!(e.to_string().contains("acct-b"), "{e}");
    }

    #[test]
    fn accounts_can_move_between_nodes_in_one_edit() {
        let mut db = seeded();
        db.edit_tree("root", "import", "swap", 2, |old| {
            let mut v = old.to_vec();
            for s in &mut v {
                s.account = match s.account.as_deref() {
                    Some("acct-a") => Some("acct-b".into()),
                    Some("acct-b") => Some("acct-a".into()),
                    x => x.map(Into::into),
                };
            }
            // And a removed leaf hands its account to a new one.
            v.retain(|s| s.name != "b");
            v.push(spec("c", Some("org"), 0.3, Some("acct-a")));
            Ok(v)
        })
        .unwrap();
        let t = db.load_tree().unwrap().unwrap();
        assert_eq!(t.node(t.leaf_for_account("acct-b").unwrap()).name, "a");
        assert_eq!(t.node(t.leaf_for_account("acct-a").unwrap()).name, "c");
    }

    /// Schema 5 on a real file at schema 4: its runs keep a NULL user
    /// (admins only) unless the service sees them again; new runs get
    /// theirs, the first one recorded wins.
    #[test]
    fn schema_5_upgrade_leaves_old_runs_without_a_user() {
        let dir = std::env::temp_dir().join(format!("compass-budget-db5-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("b.db");
        {
            let c = Connection::open(&path).unwrap();
            for (i, sql) in MIGRATIONS[..4].iter().enumerate() {
                c.execute_batch(sql).unwrap();
                c.execute_batch(&format!("PRAGMA user_version={}", i + 1))
                    .unwrap();
            }
            c.execute_batch(
                "INSERT INTO intervals (job, start, account, gpus, end_time, kind, last_seen)
                 VALUES (7, 100, 'acct-a', 1, 200, 'allocated', 200),
                        (8, 100, 'acct-a', 1, NULL, 'allocated', 200)",
            )
            .unwrap();
        }
        let mut db = Db::open(&path).unwrap();
        assert_eq!(db.version().unwrap(), known_version());
        assert_eq!(db.job_user(JobId(7)).unwrap(), None);
        // Job 8 still runs after the upgrade: it gets its user; a second
        // report does not change it; job 7 (ended) stays without one.
        let n = db
            .record_job_users(&[(JobId(8), 100, "alice".into()), (JobId(9), 5, "x".into())])
            .unwrap();
        assert_eq!(n, 1, "only rows in the ledger");
        db.record_job_users(&[(JobId(8), 100, "mallory".into())])
            .unwrap();
        assert_eq!(db.job_user(JobId(8)).unwrap().as_deref(), Some("alice"));
        assert_eq!(db.accounts_of_user("alice").unwrap(), ["acct-a"]);
        assert!(db.ended_runs_of("alice", 0, 10).unwrap().is_empty());
        drop(db);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refuses_newer_schema() {
        let dir = std::env::temp_dir().join(format!("compass-budget-db-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("b.db");
        {
            let db = Db::open(&path).unwrap();
            assert_eq!(db.version().unwrap(), known_version());
            db.conn.execute_batch("PRAGMA user_version = 99").unwrap();
        }
        let e = Db::open(&path).err().unwrap();
        assert!(
            matches!(e, BudgetError::SchemaTooNew { found: 99, .. }),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ingest_is_idempotent_in_storage() {
        let mut db = seeded();
        let iv = Interval {
            job: JobId(7),
            account: "acct-a".into(),
            gpus: 2,
            start: 100,
            end: None,
            kind: Kind::Allocated,
            weight: 1.0,
        };
        assert_eq!(
            db.ingest(std::slice::from_ref(&iv), 150).unwrap().inserted,
            1
        );
        assert_eq!(
            db.ingest(std::slice::from_ref(&iv), 160).unwrap().unchanged,
            1
        );
        assert_eq!(db.interval_count().unwrap(), 1);
        // It vanished from Slurm: closed at last_seen (160).
        assert_eq!(db.close_vanished(&[], 170).unwrap(), 1);
        let l = db.ledger_between(0, 1000).unwrap();
        assert_eq!(l.usage(0, 1000)["acct-a"].charged_gpu_s, 2.0 * 60.0);
        // A later replay of the running state does not reopen it.
        db.ingest(&[iv], 170).unwrap();
        assert_eq!(
            db.ledger_between(0, 1000).unwrap().usage(0, 1000)["acct-a"].charged_gpu_s,
            120.0
        );
    }

    #[test]
    fn slurm_ingest_keeps_the_first_observation_of_a_run() {
        let mut db = seeded();
        let mut iv = Interval {
            job: JobId(3),
            account: "acct-a".into(),
            gpus: 16,
            start: 100,
            end: None,
            kind: Kind::Allocated,
            weight: 1.0,
        };
        db.ingest_observed(std::slice::from_ref(&iv), 110).unwrap();
        // Completing on one of its two nodes: Slurm now says 8 GPUs.
        iv.gpus = 8;
        iv.end = Some(200);
        assert!(
            db.ingest(std::slice::from_ref(&iv), 200).is_err(),
            "strict for the API"
        );
        assert_eq!(db.ingest_observed(&[iv], 200).unwrap().closed, 1);
        let l = db.latest_interval(JobId(3)).unwrap().unwrap();
        assert_eq!((l.gpus, l.end), (16, Some(200)));
    }

    #[test]
    fn sql_usage_matches_the_core_ledger() {
        let mut db = seeded();
        let mut ivs = Vec::new();
        for i in 0..60i64 {
            ivs.push(Interval {
                job: JobId(i as u64),
                account: ["acct-a", "acct-b", "x"][(i % 3) as usize].into(),
                gpus: 1 + (i % 8) as u32,
                start: i * 37 % 1000,
                end: (i % 4 != 0).then_some(i * 37 % 1000 + i * 13),
                kind: if i % 5 == 0 {
                    Kind::Unallocated
                } else {
                    Kind::Allocated
                },
                // Weighted runs (`[gpu_weights]`): SQL and the core agree.
                weight: [1.0, 2.0, 0.5][(i % 7 % 3) as usize],
            });
        }
        db.ingest(&ivs, 0).unwrap();
        for (from, to) in [(0, 2000), (100, 400), (500, 501), (990, 5000)] {
            let core = db.ledger_between(from, to).unwrap().usage(from, to);
            let sql = db.usage_between(from, to).unwrap();
            assert_eq!(core, sql, "window {from}..{to}");
        }
    }

    #[test]
    fn demand_accumulates_per_hour() {
        let mut db = seeded();
        db.add_demand(3600, &[("acct-a".into(), 10.0)]).unwrap();
        db.add_demand(3700, &[("acct-a".into(), 5.0)]).unwrap();
        assert_eq!(
            db.demand_between(0, 7200).unwrap(),
            vec![(1, "acct-a".to_string(), 15.0)]
        );
    }
}
