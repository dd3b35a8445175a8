-- Counts of `ms` per bucket of conveyor.stats_buckets_ms() (19 buckets;
-- NULLs are not counted). Used by conveyor_internal.count_outcomes().
CREATE OR REPLACE FUNCTION conveyor_internal.histogram(ms float8[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_agg(coalesce(c.n, 0) ORDER BY b.i)
    FROM generate_series(1, 19) AS b(i)
    LEFT JOIN (SELECT width_bucket(m, conveyor.stats_buckets_ms()) + 1 AS i, count(*) AS n
               FROM unnest(ms) AS m WHERE m IS NOT NULL GROUP BY 1) AS c ON c.i = b.i
$$;

COMMENT ON FUNCTION conveyor_internal.histogram(float8[]) IS
    'Internal. Counts of the given milliseconds per conveyor.stats histogram bucket (19 buckets).';
