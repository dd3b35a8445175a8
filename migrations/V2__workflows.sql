-- Conveyor schema, version 2: workflows (chain, group, chord) and
-- success / error callbacks.
--
-- A workflow is built in Rust as a tree of "specs" (JSON) with every job and
-- workflow id chosen up front, and materialised by conveyor.spawn(). Follow-up
-- work (the next chain step, callbacks, a chord's callback) is inserted by
-- conveyor.after_finish(), which the worker calls in the same transaction
-- that records a job's final outcome. Group counters are updated there too,
-- under a row lock, so a chord callback is enqueued exactly once.

CREATE TABLE conveyor.workflows (
    id            uuid        NOT NULL,
    kind          text        NOT NULL,
    state         text        NOT NULL DEFAULT 'running',
    parent_id     uuid,
    total         integer     NOT NULL,
    succeeded     integer     NOT NULL DEFAULT 0,
    failed        integer     NOT NULL DEFAULT 0,
    result_job_id uuid,
    on_complete   jsonb,
    on_error      jsonb       NOT NULL DEFAULT '[]'::jsonb,
    error         text,
    failed_job_id uuid,
    created_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,

    CONSTRAINT workflows_pkey PRIMARY KEY (id),
    CONSTRAINT workflows_parent_fkey FOREIGN KEY (parent_id) REFERENCES conveyor.workflows (id)
        ON DELETE CASCADE,
    CONSTRAINT workflows_kind_check CHECK (kind IN ('chain', 'group', 'chord')),
    CONSTRAINT workflows_state_check CHECK (state IN ('running', 'success', 'failure')),
    CONSTRAINT workflows_counts_check CHECK (total >= 0 AND succeeded >= 0 AND failed >= 0),
    CONSTRAINT workflows_finished_check CHECK ((state <> 'running') = (finished_at IS NOT NULL))
);

CREATE INDEX workflows_parent_idx ON conveyor.workflows (parent_id) WHERE parent_id IS NOT NULL;

COMMENT ON TABLE conveyor.workflows IS
    'One row per chain, group or chord: its progress counters, state and callbacks.';
COMMENT ON COLUMN conveyor.workflows.kind IS 'chain | group | chord.';
COMMENT ON COLUMN conveyor.workflows.state IS 'running | success | failure.';
COMMENT ON COLUMN conveyor.workflows.parent_id IS 'The enclosing workflow (a chord that is a step of a chain).';
COMMENT ON COLUMN conveyor.workflows.total IS 'Members (group, chord) or steps (chain).';
COMMENT ON COLUMN conveyor.workflows.succeeded IS 'Members or steps that succeeded (each counted once, retries included).';
COMMENT ON COLUMN conveyor.workflows.failed IS 'Members or steps that failed for good.';
COMMENT ON COLUMN conveyor.workflows.result_job_id IS 'The job whose result is the workflow''s: a chain''s last step, a chord''s callback (its id is known before it exists).';
COMMENT ON COLUMN conveyor.workflows.on_complete IS 'Chord: the callback spec, enqueued once with every member''s result.';
COMMENT ON COLUMN conveyor.workflows.on_error IS 'Specs enqueued once if the workflow fails, with the failing job''s error.';
COMMENT ON COLUMN conveyor.workflows.error IS 'Error of the job that made the workflow fail.';
COMMENT ON COLUMN conveyor.workflows.failed_job_id IS 'The job that made the workflow fail.';

ALTER TABLE conveyor.jobs
    ADD COLUMN workflow_id    uuid,
    ADD COLUMN workflow_index integer,
    ADD COLUMN on_success     jsonb,
    ADD COLUMN on_error       jsonb;

COMMENT ON COLUMN conveyor.jobs.workflow_id IS 'The chain, group or chord this job belongs to (conveyor.workflows.id).';
COMMENT ON COLUMN conveyor.jobs.workflow_index IS 'Position: member index in a group/chord, step index in a chain; NULL for a chord callback.';
COMMENT ON COLUMN conveyor.jobs.on_success IS 'Specs of jobs or workflows to enqueue when this job succeeds (next chain step, success callbacks).';
COMMENT ON COLUMN conveyor.jobs.on_error IS 'Specs of jobs to enqueue when this job fails for good (error callbacks).';

CREATE INDEX jobs_workflow_idx ON conveyor.jobs (workflow_id, workflow_index)
    WHERE workflow_id IS NOT NULL;

-- What an error callback receives: the error first (machinery's convention),
-- then which job failed, then the callback's own arguments.
CREATE FUNCTION conveyor.failure_args(error text, job_id uuid, task text, own_args jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('error', error, 'job_id', job_id, 'task', task, 'args', own_args)
$$;

-- Materialises a spec: a job, or a workflow and its first jobs. `input` is
-- what a spec with "pass_result": true receives as its args (the previous
-- step's result, a chord's results, or an error callback's failure_args).
CREATE FUNCTION conveyor.spawn(spec jsonb, input jsonb) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    child jsonb;
BEGIN
    IF spec->>'kind' = 'workflow' THEN
        INSERT INTO conveyor.workflows (id, kind, parent_id, total, result_job_id, on_complete, on_error)
        VALUES ((spec->>'id')::uuid, spec->>'workflow', (spec->>'parent_id')::uuid,
                (spec->>'total')::int, (spec->>'result_job_id')::uuid,
                spec->'on_complete', coalesce(spec->'on_error', '[]'::jsonb));
        -- Plain jobs start in one statement; nested workflows one by one.
        PERFORM conveyor.spawn_jobs(
            (SELECT coalesce(jsonb_agg(s), '[]'::jsonb)
             FROM jsonb_array_elements(spec->'start') AS s WHERE s->>'kind' = 'job'),
            input);
        FOR child IN SELECT s FROM jsonb_array_elements(spec->'start') AS s
                     WHERE s->>'kind' = 'workflow' LOOP
            PERFORM conveyor.spawn(child, input);
        END LOOP;
    ELSE
        PERFORM conveyor.spawn_jobs(jsonb_build_array(spec), input);
    END IF;
END
$$;

-- Inserts job specs (all of kind "job") in one statement.
CREATE FUNCTION conveyor.spawn_jobs(specs jsonb, input jsonb) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO conveyor.jobs
        (id, queue, task, args, headers, state, priority, run_at, max_retries,
         retry_backoff_base, timeout, workflow_id, workflow_index, on_success, on_error)
    SELECT (s->>'id')::uuid,
           coalesce(s->>'queue', 'default'),
           s->>'task',
           CASE WHEN (s->>'pass_result')::boolean THEN coalesce(input, 'null'::jsonb)
                ELSE coalesce(s->'args', '{}'::jsonb) END,
           coalesce(s->'headers', '{}'::jsonb),
           CASE WHEN due > statement_timestamp() THEN 'scheduled' ELSE 'pending' END,
           coalesce((s->>'priority')::int, 0),
           due,
           coalesce((s->>'max_retries')::int, 25),
           make_interval(secs => coalesce((s->>'retry_backoff_base_secs')::float8, 1)),
           CASE WHEN s ? 'timeout_secs' AND s->'timeout_secs' <> 'null'::jsonb
                THEN make_interval(secs => (s->>'timeout_secs')::float8) END,
           (s->>'workflow_id')::uuid,
           (s->>'workflow_index')::int,
           nullif(s->'on_success', '[]'::jsonb),
           nullif(s->'on_error', '[]'::jsonb)
    FROM jsonb_array_elements(specs) AS s,
         LATERAL (SELECT coalesce((s->>'run_at')::timestamptz,
                                  statement_timestamp()
                                  + make_interval(secs => coalesce((s->>'delay_secs')::float8, 0)))
                  AS due) AS d
    ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING
$$;

-- Marks a workflow succeeded (once) and counts it as a step of its parent;
-- a parent whose result is this workflow's result succeeds with it.
CREATE FUNCTION conveyor.workflow_succeeded(workflow uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w conveyor.workflows;
    parent conveyor.workflows;
BEGIN
    UPDATE conveyor.workflows SET state = 'success', finished_at = now()
    WHERE id = workflow AND state = 'running'
    RETURNING * INTO w;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_notify('conveyor.job_finished', w.id::text);
    IF w.parent_id IS NOT NULL THEN
        UPDATE conveyor.workflows SET succeeded = succeeded + 1
        WHERE id = w.parent_id
        RETURNING * INTO parent;
        IF parent.state = 'running' AND parent.result_job_id = w.result_job_id THEN
            PERFORM conveyor.workflow_succeeded(parent.id);
        END IF;
    END IF;
END
$$;

-- Marks a workflow failed (once), enqueues its error callbacks, and fails the
-- workflows that enclose it.
CREATE FUNCTION conveyor.workflow_failed(workflow uuid, error text, job_id uuid, task text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    w conveyor.workflows;
    spec jsonb;
BEGIN
    UPDATE conveyor.workflows
    SET state = 'failure', finished_at = now(),
        error = workflow_failed.error, failed_job_id = workflow_failed.job_id
    WHERE id = workflow AND state = 'running'
    RETURNING * INTO w;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_notify('conveyor.job_finished', w.id::text);
    FOR spec IN SELECT s FROM jsonb_array_elements(w.on_error) AS s LOOP
        PERFORM conveyor.spawn(spec,
            conveyor.failure_args(error, job_id, task, coalesce(spec->'args', 'null'::jsonb)));
    END LOOP;
    IF w.parent_id IS NOT NULL THEN
        UPDATE conveyor.workflows SET failed = failed + 1 WHERE id = w.parent_id;
        PERFORM conveyor.workflow_failed(w.parent_id, error, job_id, task);
    END IF;
END
$$;

-- Follow-up work for jobs that just reached a final state, called in the
-- transaction that recorded their outcomes (only for jobs with a workflow or
-- callbacks). Workflow rows are locked first, in id order, so concurrent
-- completers cannot deadlock; each statement below then sees every outcome
-- committed before the lock was granted, which is what makes "the last
-- member's transaction enqueues the chord callback" exact.
CREATE FUNCTION conveyor.after_finish(finished uuid[]) RETURNS void
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

COMMENT ON FUNCTION conveyor.after_finish(uuid[]) IS
    'Enqueues follow-ups (next steps, callbacks, chord callbacks) and updates workflow counters for jobs that just finished.';
