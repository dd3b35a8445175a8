-- Trigger function of claims_given_back (on conveyor.claims): a claim deleted
-- other than by counting it down (conveyor_internal.claims_done(), which
-- marks its statement) leaves the jobs it held stored as pending with no
-- ring row, where no worker would ever claim them: a `DELETE FROM
-- conveyor.claims` typed in psql, say. Those jobs are given back, as a
-- release gives them back: a fresh token above the claim's, a ring row and a
-- wake-up for their queues, their attempt not spent. A worker still running
-- one of them has lost its lease: its outcome is not recorded (the token
-- fences it out) and the job runs again. Jobs the claim no longer held are
-- left alone: finished (gone), settled as started rows of their own, or
-- given back already (a token above the claim's). TRUNCATE fires no such
-- trigger: after it, run conveyor.rebuild_ready().
CREATE OR REPLACE FUNCTION conveyor_internal.claims_given_back() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    woken integer;
BEGIN
    WITH held AS (
        SELECT j.id
        FROM gone g
        JOIN conveyor.jobs_unfinished j ON j.id = ANY(g.job_ids)
        WHERE j.state = 'pending' AND coalesce(j.lease_token, 0) < g.lease_token
        FOR UPDATE OF j
    ),
    back AS (
        UPDATE conveyor.jobs_unfinished j
        SET lease_token = nextval('conveyor.lease_tokens')
        WHERE j.id IN (SELECT id FROM held)
        RETURNING j.id, j.queue, j.task, j.priority, j.run_at
    ),
    ring AS (
        INSERT INTO conveyor.ready (slot, queue, priority, run_at, job_id, task)
        SELECT (SELECT conveyor_internal.ready_slot()), queue, priority, run_at, id, task FROM back
    )
    SELECT count(pg_notify(TG_TABLE_SCHEMA || '.job_ready',
                           json_build_object('queue', q.queue, 'scheduled', false)::text))
    INTO woken
    FROM (SELECT DISTINCT queue FROM back) AS q;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.claims_given_back() IS
    'Internal. Statement trigger on conveyor.claims: jobs held by a claim deleted by hand are given back (fresh token, ring row).';
