-- compass budget service, schema version 2: enforcement of protected and
-- preemptible time (issue 5). Applied by compass-budgetd at start-up.

-- Every action taken on Slurm, with its cause.
CREATE TABLE actions (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,          -- Unix seconds
    action     TEXT NOT NULL CHECK (action IN ('requeue', 'cancel', 'drain', 'resume')),
    job        INTEGER,                   -- the victim (requeue, cancel)
    run_start  INTEGER,                   -- start of the victim's run that was ended
    node       TEXT,                      -- drain, resume; faulty-node preemptions
    cause_job  INTEGER,                   -- the pending job that needed the room
    rule       TEXT,                      -- unallocated | over_served | faulty_node | admin
    lost_gpu_s REAL NOT NULL DEFAULT 0.0 CHECK (lost_gpu_s >= 0.0),
    ok         INTEGER NOT NULL CHECK (ok IN (0, 1)),
    detail     TEXT NOT NULL              -- the reason as logged, or the error
) STRICT;
CREATE INDEX actions_job ON actions(job);
CREATE INDEX actions_cause ON actions(cause_job);

-- Nodes an admin marked faulty (`compass node fault`): drained in Slurm,
-- emptied as their jobs' protections end; removed by `compass node repaired`.
CREATE TABLE faulty_nodes (
    node   TEXT PRIMARY KEY NOT NULL,
    reason TEXT NOT NULL,
    since  INTEGER NOT NULL,
    by     TEXT NOT NULL
) STRICT;

-- The last preemption of each job, for the no-ping-pong rule: a job never
-- preempts the job that preempted it last, and cannot preempt at all until
-- it has run its min runtime again (`owes` = 1 until then).
CREATE TABLE preemptions (
    victim INTEGER PRIMARY KEY NOT NULL,
    by_job INTEGER,                      -- NULL: preempted for a faulty node
    at     INTEGER NOT NULL,
    owes   INTEGER NOT NULL CHECK (owes IN (0, 1))
) STRICT;
