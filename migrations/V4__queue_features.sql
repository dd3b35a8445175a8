-- Conveyor schema, version 4: unique jobs, queue settings (pause, global
-- concurrency limit), periodic schedules, and an index for retention.

-- Unique jobs. "Until finished": at most one unfinished job per key, held by
-- a partial unique index. "For a TTL": a key row in conveyor.unique_keys that
-- a new job may take over only once it expired.
ALTER TABLE conveyor.jobs
    ADD COLUMN unique_key   text,
    ADD COLUMN unique_until timestamptz;

COMMENT ON COLUMN conveyor.jobs.unique_key IS
    'Uniqueness key: no other unfinished job (or, with unique_until, no other job until then) has it.';
COMMENT ON COLUMN conveyor.jobs.unique_until IS
    'For a TTL-scoped unique job: when its key may be used again. NULL: unique until finished.';

CREATE UNIQUE INDEX jobs_unique_active_idx ON conveyor.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND unique_until IS NULL
      AND state IN ('scheduled', 'pending', 'started', 'retry');

CREATE TABLE conveyor.unique_keys (
    key        text        NOT NULL,
    job_id     uuid        NOT NULL,
    expires_at timestamptz NOT NULL,
    CONSTRAINT unique_keys_pkey PRIMARY KEY (key)
);

COMMENT ON TABLE conveyor.unique_keys IS
    'Keys of TTL-scoped unique jobs: the job that holds each key, and until when.';

-- Queue settings shared by every worker. A queue without a row has none.
CREATE TABLE conveyor.queues (
    name              text        NOT NULL,
    paused_at         timestamptz,
    concurrency_limit integer,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queues_pkey PRIMARY KEY (name),
    CONSTRAINT queues_concurrency_limit_check CHECK (concurrency_limit IS NULL OR concurrency_limit > 0)
);

COMMENT ON TABLE conveyor.queues IS 'Per-queue settings: paused, and the global concurrency limit.';
COMMENT ON COLUMN conveyor.queues.paused_at IS 'Set while the queue is paused: no worker claims from it; running jobs finish.';
COMMENT ON COLUMN conveyor.queues.concurrency_limit IS 'At most this many jobs of the queue started at once, across all workers.';

-- Periodic schedules: the last slot enqueued for each, so a new leader knows
-- what it missed.
CREATE TABLE conveyor.periodic (
    name       text        NOT NULL,
    last_slot  timestamptz NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT periodic_pkey PRIMARY KEY (name)
);

COMMENT ON TABLE conveyor.periodic IS 'Periodic schedules: the latest slot enqueued for each.';

-- Retention: the pruner walks finished jobs by state and age.
CREATE INDEX jobs_finished_idx ON conveyor.jobs (state, finished_at)
    WHERE finished_at IS NOT NULL;

-- Job specs now carry unique keys; any conflict (id or unique key) skips the row.
CREATE OR REPLACE FUNCTION conveyor.spawn_jobs(specs jsonb, input jsonb) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO conveyor.jobs
        (id, queue, task, args, headers, state, priority, run_at, max_retries,
         retry_backoff_base, timeout, workflow_id, workflow_index, on_success, on_error,
         unique_key, unique_until)
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
           nullif(s->'on_error', '[]'::jsonb),
           s->>'unique_key',
           (s->>'unique_until')::timestamptz
    FROM jsonb_array_elements(specs) AS s,
         LATERAL (SELECT coalesce((s->>'run_at')::timestamptz,
                                  statement_timestamp()
                                  + make_interval(secs => coalesce((s->>'delay_secs')::float8, 0)))
                  AS due) AS d
    ON CONFLICT DO NOTHING
$$;

-- The default uniqueness key: queue, task and arguments (jsonb's text form is
-- canonical: key order and spacing do not matter).
CREATE FUNCTION conveyor.unique_key(queue text, task text, args jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT encode(sha256(convert_to(queue || E'\n' || task || E'\n' || args::text, 'UTF8')), 'hex')
$$;

-- Enqueues one job spec under a uniqueness key (NULL: the default key).
-- ttl NULL: unique while unfinished; else unique for that long after enqueue.
-- Returns the new job, or the existing one holding the key (inserted = false).
CREATE FUNCTION conveyor.enqueue_unique(spec jsonb, key text, ttl interval)
RETURNS TABLE (id uuid, state text, inserted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    new_id uuid := (spec->>'id')::uuid;
    k text := coalesce(key, conveyor.unique_key(coalesce(spec->>'queue', 'default'),
                                                spec->>'task', coalesce(spec->'args', '{}'::jsonb)));
    holder uuid;
BEGIN
    IF ttl IS NULL THEN
        LOOP
            PERFORM conveyor.spawn_jobs(
                jsonb_build_array(spec || jsonb_build_object('unique_key', k)), NULL);
            RETURN QUERY SELECT j.id, j.state, true FROM conveyor.jobs j WHERE j.id = new_id;
            IF FOUND THEN
                RETURN;
            END IF;
            -- Conflict: a new statement sees the holder once its transaction committed.
            RETURN QUERY SELECT j.id, j.state, false FROM conveyor.jobs j
                WHERE j.unique_key = k AND j.unique_until IS NULL
                  AND j.state IN ('scheduled', 'pending', 'started', 'retry');
            IF FOUND THEN
                RETURN;
            END IF;
            -- The holder finished in between: try again.
        END LOOP;
    END IF;
    INSERT INTO conveyor.unique_keys AS u (key, job_id, expires_at)
    VALUES (k, new_id, now() + ttl)
    ON CONFLICT ON CONSTRAINT unique_keys_pkey DO UPDATE
        SET job_id = excluded.job_id, expires_at = excluded.expires_at
        WHERE u.expires_at <= now()
    RETURNING u.job_id INTO holder;
    IF holder IS NULL THEN
        SELECT u.job_id INTO holder FROM conveyor.unique_keys u WHERE u.key = k;
        RETURN QUERY SELECT holder, (SELECT j.state FROM conveyor.jobs j WHERE j.id = holder), false;
        RETURN;
    END IF;
    PERFORM conveyor.spawn_jobs(jsonb_build_array(
        spec || jsonb_build_object('unique_key', k, 'unique_until', now() + ttl)), NULL);
    RETURN QUERY SELECT j.id, j.state, true FROM conveyor.jobs j WHERE j.id = new_id;
END
$$;

COMMENT ON FUNCTION conveyor.enqueue_unique(jsonb, text, interval) IS
    'Enqueue a job spec unless another job holds its uniqueness key; returns the job that does.';

-- Pause, resume and limit queues for every worker at once.
CREATE FUNCTION conveyor.pause_queue(queue text) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO conveyor.queues (name, paused_at) VALUES (queue, now())
    ON CONFLICT (name) DO UPDATE SET paused_at = coalesce(conveyor.queues.paused_at, now()),
                                     updated_at = now();
$$;

CREATE FUNCTION conveyor.resume_queue(queue text) RETURNS void
LANGUAGE sql AS $$
    UPDATE conveyor.queues SET paused_at = NULL, updated_at = now() WHERE name = queue;
    -- Wake idle workers of the queue now, not at their next safety tick.
    SELECT pg_notify('conveyor.job_ready', json_build_object('queue', queue, 'scheduled', true)::text);
$$;

CREATE FUNCTION conveyor.set_queue_limit(queue text, concurrency_limit integer) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO conveyor.queues (name, concurrency_limit) VALUES (queue, concurrency_limit)
    ON CONFLICT (name) DO UPDATE SET concurrency_limit = excluded.concurrency_limit,
                                     updated_at = now();
    SELECT pg_notify('conveyor.queue_changed', queue);
$$;
