-- Counts down claims (conveyor.claims) by the jobs a statement took out of
-- them: tokens[i] no longer holds counts[i] of its jobs (they finished, were
-- retried, or were settled as started rows of their own). A claim whose
-- count reaches 0 holds nothing and is deleted. Called by the outcome
-- statement (complete.sql) and conveyor_internal.settle_claims(); returns
-- the claims touched. A claim deleted any other way gives its jobs back
-- (conveyor_internal.claims_given_back()).
CREATE OR REPLACE FUNCTION conveyor_internal.claims_done(tokens bigint[], counts integer[])
RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    IF tokens IS NULL THEN
        RETURN 0;
    END IF;
    -- Deletions of this statement are counted ones: the claims_given_back
    -- trigger (on conveyor.claims) leaves them alone.
    PERFORM set_config('conveyor.counting_claims_down', statement_timestamp()::text, true);
    FOR i IN 1 .. cardinality(tokens) LOOP
        -- One write per claim: the row's last jobs delete it.
        DELETE FROM conveyor.claims WHERE lease_token = tokens[i] AND jobs_left <= counts[i];
        IF NOT FOUND THEN
            UPDATE conveyor.claims SET jobs_left = greatest(jobs_left - counts[i], 0)
            WHERE lease_token = tokens[i];
        END IF;
    END LOOP;
    RETURN cardinality(tokens);
END
$$;

COMMENT ON FUNCTION conveyor_internal.claims_done(bigint[], integer[]) IS
    'Internal. Counts claims down by jobs they no longer hold; deletes a claim that holds none.';
