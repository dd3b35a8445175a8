-- Materialises a spec: a job, or a workflow and its first jobs. `input` is
-- what a spec with "pass_result": true receives as its args (the previous
-- step's result, a chord's results, or an error callback's failure_args).
CREATE OR REPLACE FUNCTION conveyor_internal.spawn(spec jsonb, input jsonb) RETURNS void
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
        PERFORM conveyor_internal.insert_job_specs(
            (SELECT coalesce(jsonb_agg(s), '[]'::jsonb)
             FROM jsonb_array_elements(spec->'start') AS s WHERE s->>'kind' = 'job'),
            input);
        FOR child IN SELECT s FROM jsonb_array_elements(spec->'start') AS s
                     WHERE s->>'kind' = 'workflow' LOOP
            PERFORM conveyor_internal.spawn(child, input);
        END LOOP;
    ELSE
        PERFORM conveyor_internal.insert_job_specs(jsonb_build_array(spec), input);
    END IF;
END
$$;

COMMENT ON FUNCTION conveyor_internal.spawn(jsonb, jsonb) IS
    'Internal. Enqueues one follow-up spec (a job or a workflow) with the result of the job that finished as input.';
