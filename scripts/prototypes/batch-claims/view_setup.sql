-- Data for design N's view prototype (run.sh view): 1M pending jobs, 10,000 of them
-- running in 20 claims of 500, 1M finished today.
ALTER TABLE conveyor.jobs_unfinished ENABLE TRIGGER jobs_ready_delete;
DELETE FROM conveyor.jobs_unfinished;
SELECT conveyor.rebuild_ready();
TRUNCATE proto.claims;
INSERT INTO conveyor.jobs (queue, task) SELECT 'bench', 'noop' FROM generate_series(1, 1000000);
INSERT INTO conveyor.jobs (queue, task, state, attempt, started_at, finished_at, result)
  SELECT 'bench', 'noop', 'success', 1, now() - interval '1 hour', now() - make_interval(secs => g::float8 / 100), 'null'
  FROM generate_series(1, 1000000) g;
-- 10,000 running jobs in 20 claims of 500 (their ring rows gone).
WITH picked AS (SELECT job_id, row_number() OVER (ORDER BY job_id) AS n FROM conveyor.ready ORDER BY job_id LIMIT 10000),
del AS (DELETE FROM conveyor.ready r USING picked p WHERE r.job_id = p.job_id)
INSERT INTO proto.claims SELECT 1000000 + (n - 1) / 500, 'w1', 'bench', now() + interval '60 s', now(), array_agg(job_id)
FROM picked GROUP BY (n - 1) / 500;
VACUUM ANALYZE conveyor.jobs, conveyor.ready, proto.claims;
