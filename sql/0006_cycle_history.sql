-- compass budget service, schema version 6: the cycle history (issue 14),
-- what the dashboard's occupancy, wait and fragmentation charts draw.
-- Applied by compass-budgetd at start-up.

-- One row per minute (`minute` = Unix seconds / 60): the last cycle of
-- that minute replaces the earlier ones. Pruned with the actions
-- (`retain_days`). Cluster-wide figures only, no per-user data.
CREATE TABLE cycle_history (
    minute INTEGER PRIMARY KEY,
    at INTEGER NOT NULL,              -- the cycle's time, Unix seconds
    gpus_allocated REAL NOT NULL,     -- GPUs of running jobs (weighted)
    capacity_gpus REAL NOT NULL,      -- the cluster's GPUs (weighted)
    pending_jobs INTEGER NOT NULL,
    longest_wait_s INTEGER,           -- the longest-waiting pending job; NULL: none
    median_wait_s REAL,               -- of jobs started since the last cycle; NULL: none
    n_sif REAL,                       -- select plugin's N*SIF; NULL: no state file
    partial_nodes INTEGER             -- select plugin's partial nodes; NULL: no state file
);
