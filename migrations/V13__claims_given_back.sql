-- Issue 16, after V12. A claim deleted other than by counting it down (by
-- hand, in psql) gives its jobs back instead of leaving them stored as
-- pending with no ring row, where nothing would ever run them: see
-- conveyor_internal.claims_given_back(). The outcome statement's own
-- deletions (conveyor_internal.claims_done()) skip the trigger.
CREATE TRIGGER claims_given_back
    AFTER DELETE ON conveyor.claims
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT
    WHEN (current_setting('conveyor.counting_claims_down', true) IS DISTINCT FROM statement_timestamp()::text)
    EXECUTE FUNCTION conveyor_internal.claims_given_back();

-- The job ids of a large claim (above about 125 jobs) are kept out of line
-- without trying to compress them first: random uuids do not compress, and
-- the attempt showed in profiles of claims of 500 (pglz_compress, 0.9 % of
-- all samples).
ALTER TABLE conveyor.claims ALTER COLUMN job_ids SET STORAGE EXTERNAL;
