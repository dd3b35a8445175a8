-- Whole-table numbers for the dashboard's header, without counting the
-- table: an estimate of its rows (the larger of pg_class.reltuples, kept by
-- (auto)vacuum and analyze, and the statistics system's live-row count,
-- which follows inserts and deletes within a second or so), and the finished
-- jobs kept in each final state, counted through its day tables' index on finished_at, but only
-- up to $1 rows each (shown as "N+" past it).
SELECT (SELECT coalesce(sum(greatest(c.reltuples::bigint, s.n_live_tup, 0)), 0)::bigint
        -- Summed over the stored rows' partitions (conveyor.job_rows).
        FROM pg_partition_tree('conveyor.job_rows') t
        JOIN pg_class c ON c.oid = t.relid
        LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
        WHERE t.isleaf) AS estimated_jobs,
       (SELECT count(*) FROM (SELECT FROM conveyor.job_rows
            WHERE state = 'success' AND finished_at IS NOT NULL LIMIT $1) s) AS success,
       (SELECT count(*) FROM (SELECT FROM conveyor.job_rows
            WHERE state = 'failure' AND finished_at IS NOT NULL LIMIT $1) s) AS failure,
       (SELECT count(*) FROM (SELECT FROM conveyor.job_rows
            WHERE state = 'cancelled' AND finished_at IS NOT NULL LIMIT $1) s) AS cancelled
