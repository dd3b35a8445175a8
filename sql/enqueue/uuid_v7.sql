-- A time-ordered UUID (version 7, RFC 9562): 48 bits of Unix milliseconds,
-- then random bits. PostgreSQL 18 has uuidv7(); this works on 13 and later.
CREATE OR REPLACE FUNCTION conveyor.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

COMMENT ON FUNCTION conveyor.uuid_v7() IS
    'A new time-ordered UUID (version 7): the default job id.';
