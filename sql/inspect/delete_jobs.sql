-- Delete jobs by id, except running ones (cancel those first): how many were
-- deleted, and the ids of those another transaction held right now (a
-- claim, an outcome batch), which the caller deletes one at a time
-- (delete_job.sql).
--
-- Never waits for a row lock: the rows are locked in id order with SKIP
-- LOCKED, and the DELETE only takes rows locked there (the array is read to
-- its end before its scan). Waiting for them while holding the others, it
-- could deadlock with a claim, which locks its rows in its plan's order
-- (docs/decisions/2026-11-25-lock-order.md). A job not running in this
-- statement's snapshot but not locked is busy.
--
-- The caller settles these jobs' claims first, in the same transaction
-- (conveyor_internal.settle_claims): the stored rows then say
-- which jobs run.
WITH locked AS MATERIALIZED (
    SELECT id FROM conveyor.job_rows WHERE id = ANY($1::uuid[]) AND state <> 'started'
    ORDER BY id
    FOR UPDATE SKIP LOCKED
),
deleted AS (
    DELETE FROM conveyor.job_rows
    WHERE id = ANY(ARRAY(SELECT id FROM locked)) AND state <> 'started'
    RETURNING 1
)
SELECT (SELECT count(*) FROM deleted) AS deleted,
       ARRAY(SELECT j.id FROM conveyor.jobs j
             WHERE j.id = ANY($1::uuid[]) AND j.state <> 'started'
               AND j.id NOT IN (SELECT id FROM locked)) AS busy
