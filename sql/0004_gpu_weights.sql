-- compass budget service, schema version 4: GPU weights (issue 12).
-- Applied by compass-budgetd at start-up.

-- The mean `[gpu_weights]` weight of the run's GPUs, fixed when the run is
-- first seen (a run is priced once, as Slurm's billing TRES is): its usage
-- is gpus x weight x time. Runs recorded before schema 4 weigh 1.0.
ALTER TABLE intervals ADD COLUMN weight REAL NOT NULL DEFAULT 1.0 CHECK (weight > 0);
