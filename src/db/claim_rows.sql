-- The claim's rows (claim.sql and claim_floors.sql include this file in place of
-- their claim_rows placeholder): one conveyor.claims row, with a fresh fencing token (one nextval per
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
