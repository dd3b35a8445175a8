-- Conveyor schema, version 6: fixes found in review.
--
-- cancel() locked nothing, so a job changing state between its two checks
-- (a completer recording a retry, the rescuer) made the request vanish. It
-- now locks the row first and decides on the state it sees.
CREATE OR REPLACE FUNCTION conveyor.cancel(job uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    j conveyor.jobs;
BEGIN
    SELECT * INTO j FROM conveyor.jobs WHERE id = job FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF j.state IN ('pending', 'scheduled', 'retry') THEN
        UPDATE conveyor.jobs
        SET state = 'cancelled', finished_at = now(), cancel_requested_at = now(),
            last_error = 'cancelled'
        WHERE id = job
        RETURNING * INTO j;
        PERFORM pg_notify('conveyor.job_finished', j.id::text);
        IF j.workflow_id IS NOT NULL OR j.on_success IS NOT NULL OR j.on_error IS NOT NULL THEN
            PERFORM conveyor.after_finish(ARRAY[j.id]);
        END IF;
    ELSIF j.state = 'started' THEN
        UPDATE conveyor.jobs SET cancel_requested_at = coalesce(cancel_requested_at, now())
        WHERE id = job;
        PERFORM pg_notify('conveyor.job_cancel', j.id::text);
    END IF;
    RETURN j.state;
END
$$;

-- enqueue_unique() said "inserted" when the caller-given id already existed.
-- It now looks for that id first and reports it as a duplicate.
CREATE OR REPLACE FUNCTION conveyor.enqueue_unique(spec jsonb, key text, ttl interval)
RETURNS TABLE (id uuid, state text, inserted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    new_id uuid := (spec->>'id')::uuid;
    k text := coalesce(key, conveyor.unique_key(coalesce(spec->>'queue', 'default'),
                                                spec->>'task', coalesce(spec->'args', '{}'::jsonb)));
    holder uuid;
BEGIN
    RETURN QUERY SELECT j.id, j.state, false FROM conveyor.jobs j WHERE j.id = new_id;
    IF FOUND THEN
        RETURN;
    END IF;
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
