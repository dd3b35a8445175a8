-- Trigger function of jobs_count_enqueued and
-- jobs_unfinished_count_enqueued (on conveyor.job_rows, jobs_unfinished):
-- adds the unfinished jobs an INSERT or COPY stored to the `enqueued` count
-- of the per-minute rollups (conveyor.stats), one upsert per statement and
-- (queue, task), in that order. The row is this backend's own (shard =
-- minus its pid): an enqueue inside a long transaction holds it until
-- commit, and no other backend ever waits for it. It has no histograms
-- (NULL), which keeps the row, and the WAL each enqueue statement writes
-- for it, small. Counts new jobs and jobs conveyor.requeue() brings back,
-- so that enqueued minus ended (succeeded, failed, cancelled) is the
-- unfinished jobs; a finished job written by hand is not counted.
--
-- A transaction that inserts jobs in many statements (conveyor.enqueue()
-- called once per row of a SELECT or by a FOR EACH ROW trigger, a loop)
-- would update that one row once per statement. No version of it can be
-- pruned before the transaction ends, so the k-th upsert walked k versions
-- (16,000 enqueues in one statement: 427 heap pages for the one row, 266
-- pages read by the last upsert). So only the first 8
-- counting statements of a transaction upsert; then the transaction
-- "tallies": the counts add up in the transaction-local setting
-- `conveyor.enqueue_tally`, and conveyor_internal.flush_enqueue_tally()
-- writes them in one upsert at commit (a deferred trigger, armed by the
-- rows of the first statement that tallies). The setting's states:
--   '' or unset  no counting statement yet in this transaction
--   '1' .. '7'   that many statements counted with an upsert
--   'arm'        the next statement that inserts rows arms the flush
--   '{...}'      tallying, the flush armed: {"[queue, task]": count, ...}
-- A setting, like the deferred trigger's events, is undone with the
-- subtransaction or transaction that made it, so the counts stay those of
-- the rows that commit.
CREATE OR REPLACE FUNCTION conveyor_internal.count_enqueued() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    mode text := coalesce(current_setting('conveyor.enqueue_tally', true), '');
    tally jsonb;
BEGIN
    IF mode = '' OR mode ~ '^[0-9]+$' THEN
        INSERT INTO conveyor.stats AS s (minute, queue, task, shard, enqueued)
        SELECT date_trunc('minute', now()), n.queue, n.task, -pg_backend_pid(), count(*)
        FROM new_jobs n
        WHERE n.state IN ('pending', 'scheduled', 'started', 'retry')
        GROUP BY n.queue, n.task
        ORDER BY n.queue, n.task
        ON CONFLICT (minute, queue, task, shard) DO UPDATE SET enqueued = s.enqueued + EXCLUDED.enqueued;
        PERFORM set_config('conveyor.enqueue_tally',
                           CASE WHEN coalesce(nullif(mode, '')::int, 0) >= 7 THEN 'arm'
                                ELSE (coalesce(nullif(mode, '')::int, 0) + 1)::text END,
                           true);
        RETURN NULL;
    END IF;
    IF mode = 'arm' THEN
        -- The flush is armed by this statement's rows (its WHEN clause saw
        -- 'arm' as each was inserted); with none, the next statement arms it.
        IF NOT EXISTS (SELECT 1 FROM new_jobs) THEN
            RETURN NULL;
        END IF;
        tally := '{}'::jsonb;
    ELSE
        tally := mode::jsonb;
    END IF;
    SELECT tally || coalesce(jsonb_object_agg(c.k, coalesce((tally->>c.k)::bigint, 0) + c.n), '{}'::jsonb)
    INTO tally
    FROM (SELECT jsonb_build_array(n.queue, n.task)::text AS k, count(*) AS n
          FROM new_jobs n
          WHERE n.state IN ('pending', 'scheduled', 'started', 'retry')
          GROUP BY n.queue, n.task) AS c;
    PERFORM set_config('conveyor.enqueue_tally', tally::text, true);
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION conveyor_internal.count_enqueued() IS
    'Internal. Statement trigger on inserts into conveyor.jobs and jobs_unfinished: counts the unfinished jobs inserted in conveyor.stats.enqueued (after 8 counting statements in one transaction, tallied in the setting conveyor.enqueue_tally and written at commit by flush_enqueue_tally).';
