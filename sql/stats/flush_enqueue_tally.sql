-- Trigger function of enqueue_tally_flush, a deferred constraint trigger on
-- conveyor_internal.enqueue_tally_flush: at commit (or at SET CONSTRAINTS
-- ... IMMEDIATE), deletes the row the transaction's first tallying
-- statement inserted, adds the counts conveyor_internal.count_enqueued()
-- tallied in the transaction-local setting `conveyor.enqueue_tally` to this
-- backend's row of conveyor.stats, in one upsert per (queue, task), in that
-- order, and empties the setting, so that a later tallying statement of the
-- same transaction (after SET CONSTRAINTS ... IMMEDIATE) inserts a row again.
CREATE OR REPLACE FUNCTION conveyor_internal.flush_enqueue_tally() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    tally text := coalesce(current_setting('conveyor.enqueue_tally', true), '');
BEGIN
    DELETE FROM conveyor_internal.enqueue_tally_flush WHERE ctid = NEW.ctid;
    IF tally = '' THEN
        RETURN NULL;
    END IF;
    INSERT INTO conveyor.stats AS s (minute, queue, task, shard, enqueued)
    SELECT date_trunc('minute', now()), c.k::jsonb->>0, c.k::jsonb->>1, -pg_backend_pid(), c.n::bigint
    FROM jsonb_each_text(tally::jsonb) AS c(k, n)
    WHERE c.n::bigint > 0
    ORDER BY 2, 3
    ON CONFLICT (minute, queue, task, shard) DO UPDATE SET enqueued = s.enqueued + EXCLUDED.enqueued;
    PERFORM set_config('conveyor.enqueue_tally', '', true);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.flush_enqueue_tally() IS
    'Internal. Deferred trigger on conveyor_internal.enqueue_tally_flush: at commit, writes the enqueue counts tallied in the setting conveyor.enqueue_tally (transactions whose statements enqueue into a (queue, task) already counted) to conveyor.stats.';
