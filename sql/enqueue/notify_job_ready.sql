-- Trigger function of jobs_notify_job_ready (inserts naming conveyor.jobs)
-- and jobs_unfinished_notify_job_ready (naming conveyor.jobs_unfinished):
-- wakes idle workers once per inserting statement and queue. The payload is {"queue": ..., "scheduled":
-- ...}; "scheduled" tells workers to look up the next run_at. PostgreSQL folds
-- identical notifications of one transaction into one, so a transaction that
-- enqueues many jobs sends at most two per queue, delivered at commit.
--
-- A transaction that calls NOTIFY holds a database-wide lock from just before
-- its commit until the commit is flushed to disk, so notifying transactions
-- commit one at a time. The library's own autocommit enqueues therefore set
-- the transaction-local setting `conveyor.defer_notify` to 'on' and send the
-- notification themselves right after the commit, from a statement that
-- writes nothing (and so waits for no flush). Inserts made any other way
-- (a user's transaction, psql, conveyor.enqueue(), workflows) still notify
-- at commit, from this trigger.
CREATE OR REPLACE FUNCTION conveyor_internal.notify_job_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('conveyor.defer_notify', true) = 'on' THEN
        RETURN NULL;
    END IF;
    PERFORM pg_notify(TG_TABLE_SCHEMA || '.job_ready',
                      json_build_object('queue', q.queue, 'scheduled', q.scheduled)::text)
    FROM (SELECT DISTINCT queue, state <> 'pending' AS scheduled FROM new_jobs
          -- (A finished or started row written by hand wakes nobody.)
          WHERE state IN ('pending', 'scheduled', 'retry')) AS q;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.notify_job_ready() IS
    'Internal. Statement trigger on inserts into conveyor.jobs: NOTIFY <schema>.job_ready once per queue at commit, so idle workers wake; skipped when the transaction set conveyor.defer_notify (the library then notifies after its commit).';
