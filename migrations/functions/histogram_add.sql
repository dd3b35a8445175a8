-- Element-wise sum of two histograms of conveyor.stats.
CREATE OR REPLACE FUNCTION conveyor_internal.histogram_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i)
    FROM unnest(a, b) WITH ORDINALITY AS t(x, y, i)
$$;

COMMENT ON FUNCTION conveyor_internal.histogram_add(bigint[], bigint[]) IS
    'Internal. Element-wise sum of two conveyor.stats histograms.';
