-- Trigger function of jobs_count_enqueued and jobs_unfinished_count_enqueued
-- (statement triggers on inserts): adds the unfinished jobs an INSERT or
-- COPY stored to the `enqueued` count of the per-minute rollups
-- (conveyor.stats), one upsert per (queue, task), in that order. The row is
-- this backend's own (shard = minus its pid): an enqueue inside a long
-- transaction holds it until commit, and no other backend ever waits for
-- it. It has no histograms (NULL), which keeps the row, and the WAL each
-- enqueue statement writes for it, small. Counts new jobs and jobs
-- conveyor.requeue() brings back, so that enqueued minus ended (succeeded,
-- failed, cancelled) is the unfinished jobs; a finished job written by hand
-- is not counted.
--
-- A transaction that inserts jobs in many statements (conveyor.enqueue()
-- called once per row of a SELECT or by a FOR EACH ROW trigger, a loop)
-- would update that one row once per statement, and the k-th upsert would
-- walk the k versions the transaction left (none can be pruned before it
-- ends). So the upsert updates a row only if an earlier transaction wrote
-- it (`age(xmin) > 0`: the row's version is not this transaction's nor one
-- of its subtransactions'). A (queue, task) whose row this transaction
-- already wrote is tallied instead, in the transaction-local setting
-- `conveyor.enqueue_tally` ({"[queue, task]": count, ...}); the first
-- tallying statement inserts a row into conveyor_internal.enqueue_tally_flush,
-- whose deferred trigger writes the tally at commit
-- (conveyor_internal.flush_enqueue_tally()). A setting, like the row and its
-- deferred event, is undone with the subtransaction or transaction that
-- made it, so the counts stay those of the rows that commit.
--
-- A transaction of one enqueue statement pays for one grouping query and
-- one upsert, nothing else: no setting is read or written and no trigger
-- runs per job row (docs/decisions/2026-11-29-enqueue-tally-armed-once.md).
CREATE OR REPLACE FUNCTION conveyor_internal.count_enqueued() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    g record;
    tally jsonb;
    k text;
BEGIN
    FOR g IN SELECT n.queue, n.task, count(*) AS n
             FROM new_jobs n
             WHERE n.state IN ('pending', 'scheduled', 'started', 'retry')
             GROUP BY n.queue, n.task
             ORDER BY n.queue, n.task
    LOOP
        INSERT INTO conveyor.stats AS s (minute, queue, task, shard, enqueued)
        VALUES (date_trunc('minute', now()), g.queue, g.task, -pg_backend_pid(), g.n)
        ON CONFLICT (minute, queue, task, shard) DO UPDATE SET enqueued = s.enqueued + EXCLUDED.enqueued
        WHERE age(s.xmin) > 0;
        CONTINUE WHEN FOUND;
        IF tally IS NULL THEN
            tally := nullif(current_setting('conveyor.enqueue_tally', true), '')::jsonb;
            IF tally IS NULL THEN
                INSERT INTO conveyor_internal.enqueue_tally_flush (backend_pid)
                VALUES (pg_backend_pid());
                tally := '{}';
            END IF;
        END IF;
        k := jsonb_build_array(g.queue, g.task)::text;
        tally := tally || jsonb_build_object(k, coalesce((tally->>k)::bigint, 0) + g.n);
    END LOOP;
    IF tally IS NOT NULL THEN
        PERFORM set_config('conveyor.enqueue_tally', tally::text, true);
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.count_enqueued() IS
    'Internal. Statement trigger on inserts into conveyor.jobs and jobs_unfinished: counts the unfinished jobs inserted in conveyor.stats.enqueued (a (queue, task) whose row this transaction already wrote is tallied in the setting conveyor.enqueue_tally and written at commit by flush_enqueue_tally).';
