-- Planner settings for a metrics scrape's transaction (metrics.rs), before
-- metrics_queues.sql and metrics_sample.sql. With no statistics (nothing
-- is assumed to run ANALYZE), the planner may pick a bitmap scan and a sort,
-- which read a queue's whole range, or a sequential scan, instead of
-- walking an index in order and stopping at the cap: these leave it only
-- the bounded plans. And the costs it estimates are high enough to
-- JIT-compile the statement, which takes about a second (the statement a
-- few milliseconds).
SET LOCAL jit = off;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SET LOCAL enable_sort = off;
SET LOCAL enable_hashjoin = off;
SET LOCAL enable_mergejoin = off;
