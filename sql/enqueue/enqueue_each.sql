-- Enqueue one job of `task` for each element of `args`, in one statement:
-- the shape of a FOR EACH STATEMENT trigger that enqueues a job per
-- inserted row (array_agg over its transition table). One INSERT, so the
-- insert triggers run once for all of them (one ring insert, one rollup
-- upsert, one NOTIFY). The other parameters, and their defaults, are
-- conveyor.enqueue()'s, and apply to every job; a NULL element of `args`
-- enqueues a job with {} as conveyor.enqueue() does. Returns the new jobs'
-- ids, in the order of `args`. For jobs that differ in more than their
-- arguments, or that carry ids or unique keys: conveyor.enqueue_many().
CREATE OR REPLACE FUNCTION conveyor.enqueue_each(
    task        text,
    args        jsonb[],
    queue       text        DEFAULT 'default',
    priority    integer     DEFAULT 0,
    run_at      timestamptz DEFAULT NULL,
    max_retries integer     DEFAULT 25,
    retry_backoff_base interval DEFAULT '1 second',
    timeout     interval    DEFAULT NULL,
    headers     jsonb       DEFAULT '{}'::jsonb
) RETURNS SETOF uuid
LANGUAGE plpgsql AS $$
BEGIN
    IF enqueue_each.task IS NULL OR enqueue_each.queue IS NULL OR enqueue_each.priority IS NULL
       OR enqueue_each.max_retries IS NULL OR enqueue_each.retry_backoff_base IS NULL THEN
        RAISE EXCEPTION 'conveyor.enqueue_each: % must not be NULL',
                        CASE WHEN enqueue_each.task IS NULL THEN 'task'
                             WHEN enqueue_each.queue IS NULL THEN 'queue'
                             WHEN enqueue_each.priority IS NULL THEN 'priority'
                             WHEN enqueue_each.max_retries IS NULL THEN 'max_retries'
                             ELSE 'retry_backoff_base' END
            USING ERRCODE = 'not_null_violation';
    END IF;
    RETURN QUERY
    WITH inserted AS (
        INSERT INTO conveyor.job_rows AS j
            (id, queue, task, args, headers, state, priority, run_at, max_retries,
             retry_backoff_base, timeout)
        SELECT conveyor.uuid_v7(), enqueue_each.queue, enqueue_each.task,
               coalesce(a.args, '{}'::jsonb), coalesce(enqueue_each.headers, '{}'::jsonb),
               conveyor_internal.initial_state(d.due), enqueue_each.priority, d.due,
               enqueue_each.max_retries, enqueue_each.retry_backoff_base, enqueue_each.timeout
        FROM unnest(enqueue_each.args) AS a(args),
             LATERAL (SELECT conveyor_internal.due_at(enqueue_each.run_at, NULL) AS due) AS d
        RETURNING j.id)
    SELECT inserted.id FROM inserted;
END
$$;

COMMENT ON FUNCTION conveyor.enqueue_each(text, jsonb[], text, integer, timestamptz, integer, interval, interval, jsonb) IS
    'Enqueue one job of task per element of args (conveyor.enqueue()''s other parameters and defaults, shared by all) in one statement; returns the ids in order. For FOR EACH STATEMENT triggers: conveyor.enqueue_each(''t'', array_agg(...)) FROM new_rows.';
