-- The claim statement for bank `bank` of the ready ring: the body of
-- conveyor_internal.claim_ready(), which conveyor_internal.define_ready_slot()
-- writes for the current bank (and tests EXPLAIN for any bank). Claims up
-- to $3 runnable jobs of queue $1 for worker $5, in one statement.
--
-- Runnable jobs are found in the ready ring (conveyor.ready), not in
-- conveyor.jobs: its slots are emptied by TRUNCATE, so the claim never
-- walks more dead index entries than a few slots hold, whatever snapshot
-- another session keeps open. It reads one bank of slots
-- (conveyor.ready_bank), named as constants, so that the plan reads and
-- writes that bank's tables only. The picked ring rows are locked (SKIP
-- LOCKED: concurrent claims take different jobs), deleted by their physical
-- address, and the jobs they name are read by primary key. A ring row whose
-- job is no longer pending (cancelled while this claim held the row) is
-- deleted and its job left alone.
--
-- The deletion is one DELETE per slot, `DELETE FROM conveyor.ready_<k> WHERE
-- ctid = ANY(ARRAY(SELECT ctid FROM picked WHERE slot = <k>))`, named
-- taken_<k> and unioned as `taken`: a TID scan of each slot with its own
-- addresses. A DELETE through the parent table must pair each address with
-- its slot, and the planner, knowing nothing of how many rows a claim takes,
-- joins them row by row (10 to 15 us per job, twice the rest of the claim).
--
-- The SELECT sits in a CTE on purpose: it is an optimisation fence, so the
-- planner cannot lock more rows than the LIMIT. Only tasks the worker has
-- handlers for are claimed; run_at <= now() guards hand-inserted rows that
-- are 'pending' with a future run_at. A paused queue gives nothing. $6 is
-- the queue's global concurrency limit and $7 the room left in its rate
-- window (NULL: none): the caller then runs this right after locking the
-- queue's row (conveyor.queues) in the same transaction, so the count of
-- jobs with a live lease (conveyor_internal.live_leases) is current. Rows
-- are matched with = ANY(array): a cached generic plan then still looks
-- them up by primary key instead of hash-joining the whole table.
--
-- One conveyor.claims row, with a fresh fencing token (one nextval per
-- statement), makes the jobs taken started, from this statement's start
-- (statement_timestamp(): a claim that waited for its turn began its
-- transaction earlier; the rescuer's floor relies on leases counted from
-- the statement, conveyor_internal.settle_expired_claims()); their own rows are not written
-- (pending on disk; conveyor.claims). Jobs whose row is no longer pending
-- are left out. (The attempt saturates: a hand-written attempt of 2^31 - 1
-- must not fail the claim.) The columns returned are those of sql/inspect/job_columns.sql,
-- as base types (what conveyor_internal.claim_ready() declares).
CREATE OR REPLACE FUNCTION conveyor_internal.claim_statement(bank integer) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
SELECT format($claim$WITH room AS (
    SELECT greatest(0, least(
               $3::bigint,
               coalesce($7::int, $3::bigint),
               CASE WHEN $6::int IS NULL THEN $3::bigint
                    ELSE $6::int - conveyor_internal.live_leases($1) END)) AS n
),
picked AS (
    SELECT slot, ctid FROM conveyor.ready
    WHERE slot BETWEEN %1$s AND %2$s
      AND queue = $1 AND task = ANY($2) AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM conveyor.queues
                      WHERE name = $1 AND paused_at IS NOT NULL)
    ORDER BY -(priority::bigint), run_at, job_id
    LIMIT (SELECT n FROM room)
    FOR UPDATE SKIP LOCKED
),
%3$s,
taken AS (%4$s),
token AS (
    SELECT nextval('conveyor.lease_tokens') AS t
),
claimed AS (
    SELECT j.id, j.queue, j.task, j.args, j.headers, 'started'::text AS state, j.priority, j.run_at,
           least(j.attempt, 2147483646) + 1 AS attempt,
           j.max_retries, j.retry_backoff_base, j.retry_backoff, j.timeout,
           statement_timestamp() + make_interval(secs => $4) AS lease_expires_at, $5::text AS worker_id,
           j.result, j.last_error, j.errors, j.created_at, statement_timestamp() AS started_at, j.finished_at,
           j.workflow_id, j.workflow_index, j.on_success, j.on_error,
           (SELECT t FROM token) AS lease_token
    FROM conveyor.jobs_unfinished j
    WHERE j.id = ANY(ARRAY(SELECT job_id FROM taken)) AND j.state = 'pending'
),
held AS (
    INSERT INTO conveyor.claims (lease_token, queue, worker_id, started_at, lease_expires_at, job_ids, jobs_left)
    SELECT (SELECT t FROM token), $1, $5, statement_timestamp(),
           statement_timestamp() + make_interval(secs => $4), array_agg(id), count(*)
    FROM claimed
    HAVING count(*) > 0
)
SELECT j.id, j.queue::text, j.task::text, j.args, j.headers::jsonb, j.state, j.priority,
       j.run_at::timestamptz, j.attempt::integer, j.max_retries::integer,
       extract(epoch FROM j.retry_backoff_base)::float8,
       extract(epoch FROM j.retry_backoff)::float8,
       extract(epoch FROM j.timeout)::float8,
       j.lease_expires_at::timestamptz, j.worker_id, j.result, j.last_error, j.errors::jsonb,
       j.created_at::timestamptz, j.started_at::timestamptz, j.finished_at,
       j.workflow_id, j.workflow_index, j.on_success, j.on_error, j.lease_token
FROM claimed j$claim$,
    bank * {ring_slots},
    bank * {ring_slots} + {ring_slots} - 1,
    (SELECT string_agg(format('taken_%1$s AS (DELETE FROM conveyor.ready_%1$s WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked WHERE slot = %1$s)) RETURNING job_id)', k), E',\n' ORDER BY k)
     FROM generate_series(bank * {ring_slots}, bank * {ring_slots} + {ring_slots} - 1) AS k),
    (SELECT string_agg(format('SELECT job_id FROM taken_%s', k), ' UNION ALL ' ORDER BY k)
     FROM generate_series(bank * {ring_slots}, bank * {ring_slots} + {ring_slots} - 1) AS k))
$fn$;

COMMENT ON FUNCTION conveyor_internal.claim_statement(integer) IS
    'Internal. The text of the claim statement for ring bank `bank` (parameters $1-$7 as conveyor_internal.claim_ready() takes them); define_ready_slot() makes it the body of claim_ready() for the current bank.';
