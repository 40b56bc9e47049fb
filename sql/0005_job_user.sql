-- compass budget service, schema version 5: the job's user in the ledger
-- (issue 14). Applied by compass-budgetd at start-up.

-- The Slurm user who owns the run, as slurmctld reports it, so that under
-- `PrivateData=jobs` the owner can still read a job after it has ended.
-- Runs recorded before schema 5 stay NULL (seen only by admins and
-- operators) unless the service still sees the run after the upgrade.
ALTER TABLE intervals ADD COLUMN user TEXT;
CREATE INDEX intervals_user ON intervals(user, end_time);
