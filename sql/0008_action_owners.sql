-- compass budget service, schema version 8: the owners of an action's jobs
-- (issue 11). Under `PrivateData=jobs` an action is shown to the owner of
-- its victim or of the job it made room for; slurmctld reuses job ids after
-- a cold start, so the owner is recorded with the action instead of looked
-- up by id later (a reused id's new owner saw the old job's actions).
-- Actions logged before schema 8 stay NULL: shown by the owner of the id
-- today, as before. Applied by compass-budgetd at start-up.

ALTER TABLE actions ADD COLUMN user TEXT;
ALTER TABLE actions ADD COLUMN cause_user TEXT;
