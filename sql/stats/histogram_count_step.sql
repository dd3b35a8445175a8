-- A histogram of conveyor.stats counted as an aggregate:
-- conveyor_internal.histogram_count(bucket, n) adds n to element `bucket`
-- (1 to 19, conveyor.stats_buckets_ms()) of 19 zeros, skipping a NULL
-- bucket. One aggregate per histogram: written as 19 filtered counts, the
-- rollup's plan set up 38 aggregates at every outcome batch (0.02-0.03 ms
-- of the 0.14 ms count_outcomes() took for a batch of one, 2026-11-25).
CREATE OR REPLACE FUNCTION conveyor_internal.histogram_count_step(counts bigint[], bucket integer, n bigint)
RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF bucket BETWEEN 1 AND 19 AND n IS NOT NULL THEN
        counts[bucket] := counts[bucket] + n;
    END IF;
    RETURN counts;
END
$$;

COMMENT ON FUNCTION conveyor_internal.histogram_count_step(bigint[], integer, bigint) IS
    'Internal. Step of the aggregate conveyor_internal.histogram_count(bucket, n).';

CREATE OR REPLACE AGGREGATE conveyor_internal.histogram_count(integer, bigint) (
    SFUNC = conveyor_internal.histogram_count_step,
    STYPE = bigint[],
    INITCOND = '{0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0}'
);

COMMENT ON AGGREGATE conveyor_internal.histogram_count(integer, bigint) IS
    'Internal. A conveyor.stats histogram (19 counts) from (bucket, count) pairs; NULL buckets are skipped.';
