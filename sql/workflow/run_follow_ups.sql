-- The follow-ups of jobs that just finished, all or nothing (after_finish
-- calls it for a batch, then job by job if the batch fails): the next chain
-- step, success or error callbacks, group and chord counters, a chord's
-- callback (enqueued exactly once: the counter is updated under the
-- workflow's row lock), and the enclosing workflows' outcomes. A follow-up
-- is spawned only while the workflow it belongs to is still running: a
-- member re-queued after its workflow ended runs alone, and the workflow
-- keeps the outcome it had.
--
-- The jobs of `finished` ended in the caller's transaction, so they sit in
-- the day tables of now(): looking only there spares a probe
-- of every day kept. A chord's members all finished after it was created.
CREATE OR REPLACE FUNCTION conveyor_internal.run_follow_ups(finished uuid[]) RETURNS void
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
              AND state IN ('success', 'failure', 'cancelled')
              AND finished_at >= now() - interval '1 hour'
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
          AND finished_at >= now() - interval '1 hour'
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
                PERFORM conveyor_internal.spawn(spec, j.result);
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
                WHERE m.workflow_id = w.id AND m.workflow_index IS NOT NULL
                  AND (m.finished_at IS NULL OR m.finished_at >= w.created_at);
                PERFORM conveyor_internal.spawn(w.on_complete, results);
            ELSIF (w.kind = 'group' AND w.succeeded = w.total) OR w.result_job_id = j.id THEN
                PERFORM conveyor_internal.workflow_succeeded(w.id);
            END IF;
        ELSE
            FOR spec IN SELECT s FROM jsonb_array_elements(coalesce(j.on_error, '[]'::jsonb)) AS s LOOP
                PERFORM conveyor_internal.spawn(spec,
                    conveyor_internal.failure_args(j.last_error, j.id, j.task, coalesce(spec->'args', 'null'::jsonb)));
            END LOOP;
            CONTINUE WHEN j.workflow_id IS NULL;
            UPDATE conveyor.workflows
            SET failed = failed + (j.workflow_index IS NOT NULL)::int
            WHERE id = j.workflow_id;
            PERFORM conveyor_internal.workflow_failed(j.workflow_id,
                coalesce(j.last_error, j.state), j.id, j.task);
        END IF;
    END LOOP;
END
$$;

COMMENT ON FUNCTION conveyor_internal.run_follow_ups(uuid[]) IS
    'Internal: follow-ups and workflow counters of finished jobs, all or nothing (see conveyor_internal.after_finish).';
