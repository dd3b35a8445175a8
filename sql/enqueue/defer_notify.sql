-- Within the current transaction, the insert trigger leaves job_ready to
-- the caller, who sends it after the commit (see
-- conveyor_internal.notify_job_ready()).
SELECT set_config('conveyor.defer_notify', 'on', true)
