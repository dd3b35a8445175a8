-- Inserts jobs from specs (JSON objects built by the Rust client, or by
-- conveyor.enqueue()): the one insert behind every way in from SQL:
-- conveyor.enqueue(), enqueue_unique() (unique jobs), spawn() (workflow
-- members, chain steps, callbacks). A spec names every field; this function
-- adds no defaults of its own (conveyor.enqueue()'s parameters and the Rust
-- builder carry them), so a missing field fails on the column's NOT NULL
-- constraint instead of being guessed. `input` is the args of a spec with
-- "pass_result": true (a previous step's result, a chord's results, a
-- failure). A spec whose id or unique key is taken is skipped: the caller
-- looks for the job that holds it.
--
-- PL/pgSQL, not SQL: PostgreSQL plans a SQL function's statement again at
-- every call, and keeps a PL/pgSQL function's plan for the session. The
-- planning was half of conveyor.enqueue() per row (3,000 calls in one
-- statement: 3.1 s as SQL, 1.7 s as PL/pgSQL, on a shared machine;
-- docs/decisions/2026-11-28-bulk-enqueue-from-sql.md).
CREATE OR REPLACE FUNCTION conveyor_internal.insert_job_specs(specs jsonb, input jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO conveyor.job_rows
        (id, queue, task, args, headers, state, priority, run_at, max_retries,
         retry_backoff_base, timeout, workflow_id, workflow_index, on_success, on_error,
         unique_key, unique_until)
    SELECT (s->>'id')::uuid,
           s->>'queue',
           s->>'task',
           CASE WHEN (s->>'pass_result')::boolean THEN coalesce(input, 'null'::jsonb)
                ELSE s->'args' END,
           s->'headers',
           conveyor_internal.initial_state(d.due),
           (s->>'priority')::int,
           d.due,
           (s->>'max_retries')::int,
           make_interval(secs => (s->>'retry_backoff_base_secs')::float8),
           CASE WHEN s->'timeout_secs' <> 'null'::jsonb
                THEN make_interval(secs => (s->>'timeout_secs')::float8) END,
           (s->>'workflow_id')::uuid,
           (s->>'workflow_index')::int,
           nullif(s->'on_success', '[]'::jsonb),
           nullif(s->'on_error', '[]'::jsonb),
           s->>'unique_key',
           (s->>'unique_until')::timestamptz
    FROM jsonb_array_elements(specs) AS s,
         LATERAL (SELECT conveyor_internal.due_at((s->>'run_at')::timestamptz,
                                                  (s->>'delay_secs')::float8) AS due) AS d
    ON CONFLICT DO NOTHING;
END
$$;

COMMENT ON FUNCTION conveyor_internal.insert_job_specs(jsonb, jsonb) IS
    'Internal. Inserts an array of job specs (every SQL way in: enqueue, unique jobs, workflows, callbacks); a spec whose id or unique key exists is skipped.';
