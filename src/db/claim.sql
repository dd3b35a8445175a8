-- Claim up to $3 runnable jobs of one queue for worker $5, in one statement.
-- Runnable jobs are found in the ready ring (conveyor.ready, migration V3),
-- not in conveyor.jobs: its slots are emptied by TRUNCATE, so the claim
-- never walks more dead index entries than a few slots hold, whatever
-- snapshot another session keeps open. It reads one bank of slots (V16):
-- this statement is written out per bank, its slots named below
-- (db::ring), and the worker sends the one of the current bank
-- (conveyor.ready_bank, announced on the channel conveyor.ring). The picked ring rows are locked
-- (SKIP LOCKED: concurrent claims take different jobs), deleted by their
-- physical address, and the jobs they name are updated by primary key. A
-- ring row whose job is no longer pending (cancelled while this claim held
-- the row) is deleted and its job left alone.
-- The placeholder below is one DELETE per slot, `DELETE FROM conveyor.ready_<k>
-- WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked WHERE slot = <k>))`, named
-- taken_<k> and unioned as `taken` (written out by db::Queries, one per
-- slot): a TID scan of each slot with its own addresses. A DELETE through
-- the parent table must pair each address with its slot, and the planner,
-- knowing nothing of how many rows a claim takes, joins them row by row
-- (10 to 15 us per job, twice the rest of the claim).
-- The SELECT sits in a CTE on purpose: it is an optimisation fence, so the
-- planner cannot lock more rows than the LIMIT. Only tasks the worker has
-- handlers for are claimed; run_at <= now() guards hand-inserted rows that
-- are 'pending' with a future run_at. A paused queue gives nothing.
-- $6 is the queue's global concurrency limit and $7 the room left in its
-- rate window (NULL: none): the caller then runs this right after locking the
-- queue's row (conveyor.queues) in the same transaction, so the count of
-- jobs with a live lease below (conveyor_internal.live_leases) is current.
-- (Rows are matched with = ANY(array): a cached generic plan then still
-- looks them up by primary key instead of hash-joining the whole table.)
WITH room AS (
    SELECT greatest(0, least(
               $3::bigint,
               coalesce($7::int, $3::bigint),
               CASE WHEN $6::int IS NULL THEN $3::bigint
                    ELSE $6::int - conveyor_internal.live_leases($1) END)) AS n
),
picked AS (
    SELECT slot, ctid FROM conveyor.ready
    WHERE slot BETWEEN {bank_slots}
      AND queue = $1 AND task = ANY($2) AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM conveyor.queues
                      WHERE name = $1 AND paused_at IS NOT NULL)
    ORDER BY -(priority::bigint), run_at, job_id
    LIMIT (SELECT n FROM room)
    FOR UPDATE SKIP LOCKED
),
{delete_picked},
-- One conveyor.claims row, with a fresh fencing token (one nextval per
-- statement), makes the jobs taken started; their own rows are not written
-- (pending on disk; migration V12). Jobs whose row is no longer pending
-- (cancelled while this claim held the ring row) are left out.
token AS (
    SELECT nextval('conveyor.lease_tokens') AS t
),
claimed AS (
    SELECT j.id, j.queue, j.task, j.args, j.headers, 'started'::text AS state, j.priority, j.run_at,
           -- (Saturating: a hand-written attempt of 2^31 - 1 must not fail the claim.)
           least(j.attempt, 2147483646) + 1 AS attempt,
           j.max_retries, j.retry_backoff_base, j.retry_backoff, j.timeout,
           now() + make_interval(secs => $4) AS lease_expires_at, $5::text AS worker_id,
           j.result, j.last_error, j.errors, j.created_at, now() AS started_at, j.finished_at,
           j.workflow_id, j.workflow_index, j.on_success, j.on_error,
           (SELECT t FROM token) AS lease_token
    FROM conveyor.jobs_unfinished j
    WHERE j.id = ANY(ARRAY(SELECT job_id FROM taken)) AND j.state = 'pending'
),
held AS (
    INSERT INTO conveyor.claims (lease_token, queue, worker_id, started_at, lease_expires_at, job_ids, jobs_left)
    SELECT (SELECT t FROM token), $1, $5, now(), now() + make_interval(secs => $4), array_agg(id), count(*)
    FROM claimed
    HAVING count(*) > 0
)
SELECT {job_columns}
FROM claimed j
