-- Where the day partitions of finished jobs in state job_state begin: the
-- lower bound of the oldest (NULL when there is none). Finished jobs below
-- it (in the default partition) are pruned row by row; those from it on, by
-- dropping their day's table (conveyor_internal.drop_history_partitions).
CREATE OR REPLACE FUNCTION conveyor_internal.history_days_start(job_state text) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT min(substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \(''([^'']+)''\)')::timestamptz)
    FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = to_regclass(format('conveyor.%I', 'jobs_' || job_state))
$$;

COMMENT ON FUNCTION conveyor_internal.history_days_start(text) IS
    'Internal. The lower bound of the oldest day partition of finished jobs in a state (NULL if none).';
