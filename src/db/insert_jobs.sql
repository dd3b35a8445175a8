-- Insert a batch of jobs in one statement (one element per job in each array).
-- A job whose id already exists is not inserted: its current state is
-- returned with inserted = false (idempotent submit). The insert trigger sends
-- one job_ready notification per queue, delivered at commit; unless $14 is
-- true (an autocommit statement of the library's): then the caller notifies
-- right after the commit (see migration V8).
WITH defer AS MATERIALIZED (
    SELECT set_config('conveyor.defer_notify', CASE WHEN $14::bool THEN 'on' ELSE 'off' END, true)
),
input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[],
                $6::int[], $7::timestamptz[], $8::float8[], $9::int[],
                $10::float8[], $11::float8[], $12::jsonb[], $13::jsonb[])
         WITH ORDINALITY
         AS t(id, queue, task, args, headers, priority, run_at, delay_secs,
              max_retries, backoff_base_secs, timeout_secs, on_success, on_error, ord)
),
prepared AS (
    SELECT i.*, coalesce(i.run_at,
                      statement_timestamp() + make_interval(secs => coalesce(i.delay_secs, 0))) AS due
    FROM input i
),
inserted AS (
    INSERT INTO conveyor.jobs
        (id, queue, task, args, headers, state, priority, run_at,
         max_retries, retry_backoff_base, timeout, on_success, on_error)
    SELECT id, queue, task, args, headers,
           CASE WHEN due > statement_timestamp() THEN 'scheduled' ELSE 'pending' END,
           priority, due, max_retries,
           make_interval(secs => backoff_base_secs),
           CASE WHEN timeout_secs IS NOT NULL THEN make_interval(secs => timeout_secs) END,
           on_success, on_error
    FROM prepared, defer
    ORDER BY ord
    ON CONFLICT ON CONSTRAINT jobs_pkey DO NOTHING
    RETURNING id, state
)
-- An existing job's state is looked up by primary key, and only for ids that
-- were not inserted (a join here let a cached generic plan scan the table).
SELECT i.id,
       coalesce(n.state, (SELECT j.state FROM conveyor.jobs j WHERE j.id = i.id)) AS state,
       n.id IS NOT NULL AS inserted
FROM input i
LEFT JOIN inserted n ON n.id = i.id
ORDER BY i.ord
