-- Trigger function of jobs_flush_enqueue_tally (on conveyor.job_rows), a
-- deferred constraint trigger: at commit (or at SET CONSTRAINTS ...
-- IMMEDIATE), adds the counts conveyor_internal.count_enqueued() tallied in
-- the transaction-local setting `conveyor.enqueue_tally` to this backend's
-- row of conveyor.stats, in one upsert per (queue, task), in that order,
-- and arms the tally again. Its events are queued by the rows of the one
-- statement that armed it; the first to fire writes the tally, the others
-- find it written and return.
CREATE OR REPLACE FUNCTION conveyor_internal.flush_enqueue_tally() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    mode text := coalesce(current_setting('conveyor.enqueue_tally', true), '');
BEGIN
    IF left(mode, 1) <> '{' THEN
        RETURN NULL;
    END IF;
    INSERT INTO conveyor.stats AS s (minute, queue, task, shard, enqueued)
    SELECT date_trunc('minute', now()), c.k::jsonb->>0, c.k::jsonb->>1, -pg_backend_pid(), c.n::bigint
    FROM jsonb_each_text(mode::jsonb) AS c(k, n)
    WHERE c.n::bigint > 0
    ORDER BY 2, 3
    ON CONFLICT (minute, queue, task, shard) DO UPDATE SET enqueued = s.enqueued + EXCLUDED.enqueued;
    PERFORM set_config('conveyor.enqueue_tally', 'arm', true);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.flush_enqueue_tally() IS
    'Internal. Deferred trigger on inserts into conveyor.jobs: at commit, writes the enqueue counts tallied in the setting conveyor.enqueue_tally (transactions of more than 8 inserting statements) to conveyor.stats.';
