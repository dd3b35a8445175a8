-- The default uniqueness key: queue, task and arguments (jsonb's text form is
-- canonical: key order and spacing do not matter).
CREATE OR REPLACE FUNCTION conveyor.unique_key(queue text, task text, args jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT encode(sha256(convert_to(queue || E'\n' || task || E'\n' || args::text, 'UTF8')), 'hex')
$$;

COMMENT ON FUNCTION conveyor.unique_key(text, text, jsonb) IS
    'The default uniqueness key of a job: a SHA-256 of queue, task and arguments (hex).';
