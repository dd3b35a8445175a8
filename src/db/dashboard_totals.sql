-- Whole-table numbers for the dashboard's header, without counting the
-- table: an estimate of its rows (the larger of pg_class.reltuples, kept by
-- (auto)vacuum and analyze, and the statistics system's live-row count,
-- which follows inserts and deletes within a second or so), and the finished
-- jobs kept in each final state, counted through jobs_finished_idx but only
-- up to $1 rows each (shown as "N+" past it).
SELECT (SELECT greatest(c.reltuples::bigint, s.n_live_tup, 0)
        FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
        WHERE c.oid = to_regclass('conveyor.jobs')) AS estimated_jobs,
       (SELECT count(*) FROM (SELECT FROM conveyor.jobs
            WHERE state = 'success' AND finished_at IS NOT NULL LIMIT $1) s) AS success,
       (SELECT count(*) FROM (SELECT FROM conveyor.jobs
            WHERE state = 'failure' AND finished_at IS NOT NULL LIMIT $1) s) AS failure,
       (SELECT count(*) FROM (SELECT FROM conveyor.jobs
            WHERE state = 'cancelled' AND finished_at IS NOT NULL LIMIT $1) s) AS cancelled
