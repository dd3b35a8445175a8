-- Within the current transaction, the insert trigger leaves job_ready to
-- the caller, who sends it after the commit (see migration V8).
SELECT set_config('conveyor.defer_notify', 'on', true)
