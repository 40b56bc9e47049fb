-- compass budget service, schema version 3: enforcement that never loops
-- and keeps its word (issue 11). Applied by compass-budgetd at start-up.

-- Actions: the victim's submit time as Slurm reported it when the action was
-- taken (with the job id, the job's identity: slurmctld reuses ids after a
-- cold start), and whether it was only a dry run (`enforce = "dry-run"`:
-- decided and logged, nothing sent to Slurm).
ALTER TABLE actions ADD COLUMN submit INTEGER;
ALTER TABLE actions ADD COLUMN dry_run INTEGER NOT NULL DEFAULT 0 CHECK (dry_run IN (0, 1));

-- The no-ping-pong record applies only to the job it was made for: the
-- victim's submit time before the requeue (Slurm sets a requeued job's
-- submit time to the time of the requeue, so the victim is also recognised
-- by a submit time no later than `at` + a few seconds), and the preemptor's
-- submit time. 0 / NULL: rows from schema 2 (identity unknown).
ALTER TABLE preemptions ADD COLUMN victim_submit INTEGER NOT NULL DEFAULT 0;
ALTER TABLE preemptions ADD COLUMN by_submit INTEGER;

-- Room freed by preemption for a pending job (the cause): the job must start
-- within `[protection] start_grace_s`; if it does not, the preemption was
-- fruitless and the job preempts no one again until its request or the
-- cluster's nodes change, or `fruitless_retry_after_s` passes.
CREATE TABLE room_given (
    job          INTEGER PRIMARY KEY NOT NULL,
    submit       INTEGER NOT NULL,   -- the job's submit time (its identity with `job`)
    at           INTEGER NOT NULL,   -- the last preemption made for it
    request      TEXT NOT NULL,      -- its request then (account, GPUs, instances, min runtime)
    nodes        TEXT NOT NULL,      -- the cluster's usable nodes then
    fruitless_at INTEGER,            -- NULL while it may still start
    dry_run      INTEGER NOT NULL DEFAULT 0 CHECK (dry_run IN (0, 1))
) STRICT;
