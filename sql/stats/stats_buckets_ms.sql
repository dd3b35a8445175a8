-- The lower bounds, in milliseconds, of the 19 buckets of the histograms in
-- conveyor.stats (wait_ms, run_ms): bucket 1 is below 1 ms, bucket i (2 to
-- 19) is from element i - 1 of this array up to the next element, and
-- bucket 19 is one hour and more.
CREATE OR REPLACE FUNCTION conveyor.stats_buckets_ms() RETURNS float8[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000, 900000, 3600000}'::float8[]
$$;

COMMENT ON FUNCTION conveyor.stats_buckets_ms() IS
    'Lower bounds (ms) of buckets 2 to 19 of the conveyor.stats histograms; bucket 1 is below 1 ms.';
