-- Creates the day partitions of finished jobs (conveyor.jobs_success,
-- jobs_failure, jobs_cancelled) from days_back days ago to days_ahead days
-- ahead of today (UTC), those that do not exist yet; returns how many it
-- created. (days_back is for imports of old history; a day's jobs already
-- in the default partition are moved into its new table.) Run by
-- the baseline migration and by every worker's maintenance, one at a time (a
-- transaction-level advisory lock; the others return 0 at once), so a day's
-- table exists well before its first job finishes.
--
-- A day's table is created on its own and then attached, which locks the
-- parent only in SHARE UPDATE EXCLUSIVE mode: outcomes keep being inserted
-- meanwhile. Attaching also locks the state's default partition to check it
-- holds no row of that day (rows written by hand, or finished before the
-- day's table existed); any such rows are moved into the new table first.
-- A lock that is not granted within lock_wait (a pg_dump reading the
-- default partition) skips that day until the next call.
CREATE OR REPLACE FUNCTION conveyor_internal.create_history_partitions(
    days_ahead integer DEFAULT 2,
    days_back integer DEFAULT 0,
    lock_wait interval DEFAULT '100 milliseconds'
) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    st text;
    day date;
    lo timestamptz;
    name text;
    created integer := 0;
    caller_lock_timeout text := current_setting('lock_timeout');
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('conveyor.history_partitions', 0)) THEN
        RETURN 0;
    END IF;
    PERFORM set_config('lock_timeout', (extract(epoch FROM lock_wait) * 1000)::bigint::text, true);
    FOR day IN SELECT generate_series(-greatest(days_back, 0), greatest(days_ahead, 0))
                      + (now() AT TIME ZONE 'UTC')::date LOOP
        lo := day::timestamp AT TIME ZONE 'UTC';
        FOREACH st IN ARRAY ARRAY['success', 'failure', 'cancelled'] LOOP
            name := 'jobs_' || st || '_' || to_char(day, 'YYYYMMDD');
            CONTINUE WHEN to_regclass(format('conveyor.%I', name)) IS NOT NULL;
            BEGIN
                EXECUTE format('CREATE TABLE conveyor.%I (LIKE conveyor.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                               name, 'jobs_' || st);
                EXECUTE format(
                    'WITH moved AS (DELETE FROM conveyor.%I WHERE finished_at >= $1 AND finished_at < $2 RETURNING *)
                     INSERT INTO conveyor.%I SELECT * FROM moved',
                    'jobs_' || st || '_default', name)
                    USING lo, lo + interval '1 day';
                EXECUTE format('ALTER TABLE conveyor.%I ATTACH PARTITION conveyor.%I FOR VALUES FROM (%L) TO (%L)',
                               'jobs_' || st, name, lo, lo + interval '1 day');
                EXECUTE format('COMMENT ON TABLE conveyor.%I IS %L', name,
                               'Jobs in state ' || st || ' that finished on ' || day || ' (UTC).');
                created := created + 1;
            EXCEPTION WHEN lock_not_available THEN
                -- Someone holds the default partition: next call.
                NULL;
            END;
        END LOOP;
    END LOOP;
    -- The caller's lock_timeout for the rest of its transaction and its
    -- commit (see conveyor_internal.rotate_ring()).
    PERFORM set_config('lock_timeout', caller_lock_timeout, true);
    RETURN created;
END
$$;

COMMENT ON FUNCTION conveyor_internal.create_history_partitions(integer, integer, interval) IS
    'Internal. Creates the missing day partitions of finished jobs from days_back days ago to days_ahead days ahead (UTC); returns how many.';
