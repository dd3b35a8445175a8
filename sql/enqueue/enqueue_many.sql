-- Enqueue many jobs in one statement (an import, a FOR EACH STATEMENT
-- trigger with a transition table): one INSERT, so the insert triggers run
-- once for all of them (one ring insert, one rollup upsert, one NOTIFY per
-- queue), where conveyor.enqueue() per row runs them once per row.
-- `jobs` is a JSON array of objects, one per job, with the fields of
-- conveyor.enqueue()'s parameters; a field left out, or JSON null, takes
-- conveyor.enqueue()'s default (args and headers: {}):
--   task (string, required), args (any JSON), queue (string),
--   priority (integer), run_at (timestamptz text; absent: now),
--   max_retries (integer), retry_backoff_base and timeout (interval text,
--   such as "2.5 seconds", or a number of seconds), headers (object),
--   id (uuid text; absent: a new UUIDv7),
--   unique (true: the job is unique until it finishes, by the default key
--   conveyor.unique_key(queue, task, args)), unique_key (string: unique
--   until it finishes, by this key).
-- A job whose id exists already (finished or not), or whose unique key an
-- unfinished job holds (or an earlier element of the array), is skipped, as
-- conveyor.enqueue() leaves an existing id and the Rust client a unique
-- duplicate. Returns the ids of the jobs inserted, in the array's order.
-- Any element that is not such an object (no task, a field of the wrong
-- JSON type, a field not listed) fails the whole call before anything is
-- inserted, naming the element (1-based) and what is wrong with it.
CREATE OR REPLACE FUNCTION conveyor.enqueue_many(jobs jsonb) RETURNS SETOF uuid
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    IF jobs IS NULL OR jobs = 'null'::jsonb THEN
        RETURN;
    END IF;
    IF jsonb_typeof(jobs) <> 'array' THEN
        RAISE EXCEPTION 'conveyor.enqueue_many: jobs must be a JSON array of job objects, not a JSON %',
                        jsonb_typeof(jobs)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT v.ord, v.why INTO bad
    FROM (SELECT x.ord,
                 CASE
                     WHEN jsonb_typeof(x.e) <> 'object' THEN
                         'is a JSON ' || jsonb_typeof(x.e) || ', not an object'
                     WHEN jsonb_typeof(x.e->'task') IS DISTINCT FROM 'string' THEN
                         'has no task (a string)'
                     WHEN x.e - '{task,args,queue,priority,run_at,max_retries,retry_backoff_base,timeout,headers,id,unique,unique_key}'::text[]
                          <> '{}'::jsonb THEN
                         'has unknown fields: ' || (
                             SELECT string_agg(k, ', ' ORDER BY k)
                             FROM jsonb_object_keys(x.e - '{task,args,queue,priority,run_at,max_retries,retry_backoff_base,timeout,headers,id,unique,unique_key}'::text[]) AS k)
                     WHEN coalesce(jsonb_typeof(x.e->'queue'), 'null') NOT IN ('string', 'null') THEN
                         'has a queue that is not a string'
                     WHEN coalesce(jsonb_typeof(x.e->'priority'), 'null') NOT IN ('number', 'null') THEN
                         'has a priority that is not a number'
                     WHEN coalesce(jsonb_typeof(x.e->'max_retries'), 'null') NOT IN ('number', 'null') THEN
                         'has a max_retries that is not a number'
                     WHEN coalesce(jsonb_typeof(x.e->'run_at'), 'null') NOT IN ('string', 'null') THEN
                         'has a run_at that is not a string'
                     WHEN coalesce(jsonb_typeof(x.e->'retry_backoff_base'), 'null') NOT IN ('string', 'number', 'null') THEN
                         'has a retry_backoff_base that is neither an interval string nor a number of seconds'
                     WHEN coalesce(jsonb_typeof(x.e->'timeout'), 'null') NOT IN ('string', 'number', 'null') THEN
                         'has a timeout that is neither an interval string nor a number of seconds'
                     WHEN coalesce(jsonb_typeof(x.e->'headers'), 'null') NOT IN ('object', 'null') THEN
                         'has headers that are not an object'
                     WHEN coalesce(jsonb_typeof(x.e->'id'), 'null') NOT IN ('string', 'null') THEN
                         'has an id that is not a string'
                     WHEN coalesce(jsonb_typeof(x.e->'unique'), 'null') NOT IN ('boolean', 'null') THEN
                         'has a unique that is not true or false'
                     WHEN coalesce(jsonb_typeof(x.e->'unique_key'), 'null') NOT IN ('string', 'null') THEN
                         'has a unique_key that is not a string'
                 END AS why
          FROM jsonb_array_elements(jobs) WITH ORDINALITY AS x(e, ord)) AS v
    WHERE v.why IS NOT NULL
    ORDER BY v.ord
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'conveyor.enqueue_many: job % of % %', bad.ord, jsonb_array_length(jobs), bad.why
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Each job is an object: {"task": ..., "args": ..., "queue": ..., "priority": ..., "run_at": ..., "max_retries": ..., "retry_backoff_base": ..., "timeout": ..., "headers": ..., "id": ..., "unique": ..., "unique_key": ...}; only task is required.';
    END IF;
    RETURN QUERY
    WITH inserted AS (
        INSERT INTO conveyor.job_rows AS j
            (id, queue, task, args, headers, state, priority, run_at, max_retries,
             retry_backoff_base, timeout, unique_key)
        SELECT coalesce((s.e->>'id')::uuid, conveyor.uuid_v7()),
               s.queue,
               s.e->>'task',
               s.args,
               coalesce(nullif(s.e->'headers', 'null'::jsonb), '{}'::jsonb),
               conveyor_internal.initial_state(d.due),
               coalesce((s.e->>'priority')::int, 0),
               d.due,
               coalesce((s.e->>'max_retries')::int, 25),
               CASE WHEN jsonb_typeof(s.e->'retry_backoff_base') = 'number'
                    THEN make_interval(secs => (s.e->>'retry_backoff_base')::float8)
                    ELSE coalesce((s.e->>'retry_backoff_base')::interval, interval '1 second') END,
               CASE WHEN jsonb_typeof(s.e->'timeout') = 'number'
                    THEN make_interval(secs => (s.e->>'timeout')::float8)
                    ELSE (s.e->>'timeout')::interval END,
               coalesce(s.e->>'unique_key',
                        CASE WHEN (s.e->>'unique')::boolean
                             THEN conveyor.unique_key(s.queue, s.e->>'task', s.args) END)
        FROM (SELECT x.e,
                     coalesce(x.e->>'queue', 'default') AS queue,
                     coalesce(nullif(x.e->'args', 'null'::jsonb), '{}'::jsonb) AS args
              FROM jsonb_array_elements(jobs) AS x(e)) AS s,
             LATERAL (SELECT conveyor_internal.due_at((s.e->>'run_at')::timestamptz, NULL) AS due) AS d
        -- A finished job keeps its id too, in a partition the insert's
        -- conflict check does not see (the day tables).
        WHERE s.e->>'id' IS NULL
           OR NOT EXISTS (SELECT 1 FROM conveyor.job_rows o WHERE o.id = (s.e->>'id')::uuid)
        ON CONFLICT DO NOTHING
        RETURNING j.id)
    SELECT inserted.id FROM inserted;
END
$$;

COMMENT ON FUNCTION conveyor.enqueue_many(jsonb) IS
    'Enqueue many jobs in one statement: a JSON array of {"task": ..., "args": ..., ...} objects (conveyor.enqueue()''s parameters and defaults; "unique": true or "unique_key" for a job unique until it finishes). Returns the ids inserted, in order; an existing id or a held unique key is skipped. For imports and FOR EACH STATEMENT triggers.';
