-- enqueue_unique() said "inserted" when the caller-given id already existed.
-- It now looks for that id first and reports it as a duplicate.
-- id_may_exist: the caller chose the id, or an earlier try may have
-- inserted it: look for it among all jobs (finished ones live in other
-- partitions than new ones, and a lookup by id reads them all).
CREATE OR REPLACE FUNCTION conveyor_internal.enqueue_unique(
    spec jsonb, key text, ttl interval, id_may_exist boolean)
RETURNS TABLE (id uuid, state text, inserted boolean)
LANGUAGE plpgsql AS $$
DECLARE
    new_id uuid := (spec->>'id')::uuid;
    k text := coalesce(key, conveyor.unique_key(coalesce(spec->>'queue', 'default'),
                                                spec->>'task', coalesce(spec->'args', '{}'::jsonb)));
    holder uuid;
BEGIN
    IF id_may_exist THEN
        RETURN QUERY SELECT j.id, j.state, false FROM conveyor.jobs j WHERE j.id = new_id;
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    IF ttl IS NULL THEN
        LOOP
            PERFORM conveyor_internal.insert_job_specs(
                jsonb_build_array(spec || jsonb_build_object('unique_key', k)), NULL);
            RETURN QUERY SELECT j.id, j.state, true FROM conveyor.active_jobs j WHERE j.id = new_id;
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
    PERFORM conveyor_internal.insert_job_specs(jsonb_build_array(
        spec || jsonb_build_object('unique_key', k, 'unique_until', now() + ttl)), NULL);
    RETURN QUERY SELECT j.id, j.state, true FROM conveyor.active_jobs j WHERE j.id = new_id;
END
$$;

COMMENT ON FUNCTION conveyor_internal.enqueue_unique(jsonb, text, interval, boolean) IS
    'Enqueue a job spec unless another job holds its uniqueness key; returns the job that does.';
