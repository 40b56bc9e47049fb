-- compass budget service, schema version 1.
-- Applied by compass-budgetd at start-up (PRAGMA user_version tracks the version).

-- The org tree. `parent` is NULL for the single root. Shares are fractions of
-- the parent's budget; the service checks that siblings sum to at most 1.
CREATE TABLE nodes (
    name     TEXT PRIMARY KEY NOT NULL,
    parent   TEXT REFERENCES nodes(name) DEFERRABLE INITIALLY DEFERRED,
    share    REAL NOT NULL CHECK (share >= 0.0 AND share <= 1.0),
    account  TEXT UNIQUE,
    managers TEXT NOT NULL DEFAULT '[]'  -- JSON array of user names
) STRICT;

-- One row per changed node of every budget edit, written in the edit's transaction.
CREATE TABLE audit (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at     INTEGER NOT NULL,       -- Unix seconds
    who    TEXT NOT NULL,
    action TEXT NOT NULL,          -- create, update, delete, import
    node   TEXT NOT NULL,
    old    TEXT,                   -- JSON of the node before (NULL on create)
    new    TEXT,                   -- JSON of the node after (NULL on delete)
    why    TEXT NOT NULL
) STRICT;

-- The occupancy ledger: one row per job run interval, keyed by (job, start).
CREATE TABLE intervals (
    job       INTEGER NOT NULL,
    start     INTEGER NOT NULL,
    account   TEXT NOT NULL,
    gpus      INTEGER NOT NULL CHECK (gpus >= 0),
    end_time  INTEGER CHECK (end_time IS NULL OR end_time >= start),
    kind      TEXT NOT NULL CHECK (kind IN ('allocated', 'unallocated')),
    last_seen INTEGER NOT NULL,
    PRIMARY KEY (job, start)
) STRICT;
CREATE INDEX intervals_end ON intervals(end_time);

-- Demand per account and hour (GPU-seconds requested by running + pending
-- jobs), for owed-versus-delivered reports (owed = allocation capped hourly at
-- actual demand).
CREATE TABLE demand (
    hour    INTEGER NOT NULL,          -- Unix seconds / 3600
    account TEXT NOT NULL,
    gpu_s   REAL NOT NULL CHECK (gpu_s >= 0.0),
    PRIMARY KEY (hour, account)
) STRICT;
