-- Element-wise sum of two histograms of conveyor.stats (a NULL side or
-- element counts as zeros; NULL when both are NULL or empty). plpgsql, not
-- sql: a SQL function that reads FROM is planned again in every statement
-- that calls it, and the outcome's rollup calls this at every batch.
CREATE OR REPLACE FUNCTION conveyor_internal.histogram_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    n integer := greatest(coalesce(cardinality(a), 0), coalesce(cardinality(b), 0));
    sum bigint[] := '{}';
BEGIN
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    FOR i IN 1 .. n LOOP
        sum[i] := coalesce(a[i], 0) + coalesce(b[i], 0);
    END LOOP;
    RETURN sum;
END
$$;

COMMENT ON FUNCTION conveyor_internal.histogram_add(bigint[], bigint[]) IS
    'Internal. Element-wise sum of two conveyor.stats histograms.';
