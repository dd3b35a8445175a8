-- Dashboard, a page of a bulk cancel: conveyor.cancel() on each id of $1
-- whose row this statement can lock without waiting, in one statement; each
-- job's state afterwards (NULL: gone), and `busy` for a job another
-- transaction holds right now (a claim, an outcome batch, a lease renewal):
-- the caller cancels those one at a time (call_cancel.sql).
--
-- Never waits for a row lock: the rows are locked in id order with SKIP
-- LOCKED before any call (conveyor.cancel() then finds its row already
-- held). Waiting for them while holding the others, it could deadlock with
-- a claim or an outcome batch, which lock their rows in their plan's order
-- (docs/decisions/2026-11-25-lock-order.md). A job that exists in this
-- statement's snapshot but was not locked is busy.
WITH locked AS MATERIALIZED (
    SELECT id FROM conveyor.job_rows WHERE id = ANY($1::uuid[])
    ORDER BY id
    FOR UPDATE SKIP LOCKED
),
cancelled AS MATERIALIZED (
    SELECT id, conveyor.cancel(id) AS state FROM locked
)
SELECT t.id, c.state,
       c.id IS NULL AND EXISTS (SELECT 1 FROM conveyor.jobs j WHERE j.id = t.id) AS busy
FROM unnest($1::uuid[]) AS t (id)
LEFT JOIN cancelled c ON c.id = t.id
