-- Conveyor schema, version 9: fixes found by review.
--
-- 1. A member re-queued after its workflow ended (failed or cancelled) used
--    to start the workflow's next steps when it succeeded, reviving a chain
--    that had already failed. after_finish() now spawns a follow-up only if
--    the workflow it belongs to is still running; the re-queued job runs
--    alone, and the workflow keeps the outcome it had.
-- 2. Re-queuing a failed unique job whose key another active job holds now
--    leaves that job where it is, instead of failing the whole call with a
--    unique violation. Of several failed jobs with one key, one is re-queued.

CREATE OR REPLACE FUNCTION conveyor.after_finish(finished uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    j record;
    w conveyor.workflows;
    spec jsonb;
    results jsonb;
BEGIN
    PERFORM 1 FROM conveyor.workflows
    WHERE id IN (
        WITH RECURSIVE touched AS (
            SELECT workflow_id AS id FROM conveyor.jobs
            WHERE id = ANY(finished) AND workflow_id IS NOT NULL
            UNION
            SELECT p.parent_id FROM conveyor.workflows p JOIN touched t ON p.id = t.id
            WHERE p.parent_id IS NOT NULL
        )
        SELECT id FROM touched)
    ORDER BY id
    FOR UPDATE;

    FOR j IN
        SELECT id, task, state, result, last_error, workflow_id, workflow_index, on_success, on_error
        FROM conveyor.jobs
        WHERE id = ANY(finished) AND state IN ('success', 'failure', 'cancelled')
        ORDER BY id
    LOOP
        IF j.state = 'success' THEN
            FOR spec IN SELECT s FROM jsonb_array_elements(coalesce(j.on_success, '[]'::jsonb)) AS s LOOP
                -- A workflow that has ended starts no more of its steps: a
                -- member re-queued after its workflow failed runs alone.
                CONTINUE WHEN EXISTS (
                    SELECT 1 FROM conveyor.workflows x
                    WHERE x.id = coalesce(spec->>'workflow_id', spec->>'parent_id')::uuid
                      AND x.state <> 'running');
                PERFORM conveyor.spawn(spec, j.result);
            END LOOP;
            CONTINUE WHEN j.workflow_id IS NULL;
            UPDATE conveyor.workflows
            SET succeeded = succeeded + (j.workflow_index IS NOT NULL)::int
            WHERE id = j.workflow_id
            RETURNING * INTO w;
            CONTINUE WHEN w.state <> 'running';
            IF w.kind = 'chord' AND j.workflow_index IS NOT NULL AND w.succeeded = w.total THEN
                -- The last member: every other member's outcome is committed and
                -- visible to this statement. Results in member order.
                SELECT coalesce(jsonb_agg(coalesce(m.result, 'null'::jsonb) ORDER BY m.workflow_index), '[]'::jsonb)
                INTO results
                FROM conveyor.jobs m
                WHERE m.workflow_id = w.id AND m.workflow_index IS NOT NULL;
                PERFORM conveyor.spawn(w.on_complete, results);
            ELSIF (w.kind = 'group' AND w.succeeded = w.total) OR w.result_job_id = j.id THEN
                PERFORM conveyor.workflow_succeeded(w.id);
            END IF;
        ELSE
            FOR spec IN SELECT s FROM jsonb_array_elements(coalesce(j.on_error, '[]'::jsonb)) AS s LOOP
                PERFORM conveyor.spawn(spec,
                    conveyor.failure_args(j.last_error, j.id, j.task, coalesce(spec->'args', 'null'::jsonb)));
            END LOOP;
            CONTINUE WHEN j.workflow_id IS NULL;
            UPDATE conveyor.workflows
            SET failed = failed + (j.workflow_index IS NOT NULL)::int
            WHERE id = j.workflow_id;
            PERFORM conveyor.workflow_failed(j.workflow_id,
                coalesce(j.last_error, j.state), j.id, j.task);
        END IF;
    END LOOP;
END
$$;


CREATE OR REPLACE FUNCTION conveyor.requeue(ids uuid[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    WITH candidates AS (
        -- One job per active unique key (jobs_unique_active_idx), and none
        -- whose key an active job already holds.
        SELECT DISTINCT ON (k.slot) j.id
        FROM conveyor.jobs j,
             LATERAL (SELECT CASE WHEN j.unique_key IS NOT NULL AND j.unique_until IS NULL
                                  THEN j.unique_key ELSE j.id::text END AS slot) AS k
        WHERE j.id = ANY(ids) AND j.state IN ('failure', 'cancelled')
          AND NOT (j.unique_key IS NOT NULL AND j.unique_until IS NULL AND EXISTS (
                SELECT 1 FROM conveyor.jobs o
                WHERE o.unique_key = j.unique_key AND o.unique_until IS NULL
                  AND o.state IN ('scheduled', 'pending', 'started', 'retry')))
        ORDER BY k.slot, j.id
    ),
    requeued AS (
        UPDATE conveyor.jobs
        SET state = 'pending', attempt = 0, run_at = now(), finished_at = NULL,
            started_at = NULL, cancel_requested_at = NULL, result = NULL,
            retry_backoff = NULL
        WHERE id = ANY(ARRAY(SELECT id FROM candidates)) AND state IN ('failure', 'cancelled')
        RETURNING queue
    ),
    woken AS (
        SELECT pg_notify('conveyor.job_ready',
                         json_build_object('queue', q.queue, 'scheduled', false)::text)
        FROM (SELECT DISTINCT queue FROM requeued) AS q
    )
    SELECT (SELECT count(*) FROM requeued) + 0 * (SELECT count(*) FROM woken) INTO n;
    RETURN n;
END
$$;

COMMENT ON FUNCTION conveyor.requeue(uuid[]) IS
    'Re-queue failed or cancelled jobs (by id) with attempts reset; returns how many. Skips a unique job whose key an active job holds.';
