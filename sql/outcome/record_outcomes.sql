-- Record the outcomes of a batch of attempts in one statement. Each row is
-- fenced on its claim's token: the job's row is either started under that
-- token (a lease of its own) or still pending on disk with a lower token,
-- held by the claim (conveyor.claims). A worker whose lease
-- was lost cannot overwrite a newer claim, even one re-queued since (every
-- write that makes a job runnable again gives it a token at least the old
-- claim's, and tokens are never reused, unlike the attempt count). Returned for the
-- caller to send after the commit (outside this transaction): the finished
-- ids, for one job_finished notification, and job_ready payloads for queues
-- with retries or freed concurrency. Jobs that have follow-up work
-- (workflow, callbacks) are returned so the caller can run
-- conveyor_internal.after_finish() in the same transaction.
--
-- A job that ended leaves conveyor.jobs_unfinished and goes into its final
-- state's table, today's partition of jobs_success, jobs_failure or
-- jobs_cancelled: one DELETE, whose fence depends only on the
-- input, and one INSERT per table. A job to be retried stays where it is,
-- updated in place, unless its cancellation was asked for meanwhile: then
-- it is not retried but ends cancelled, moved like the others. Which of the
-- two is decided on the row as it is now: the jobs to retry are locked first
-- (FOR UPDATE reads the latest version, so a cancel that committed while
-- this statement ran is seen); jobs that end need no lock (their fate
-- depends on the input only, and a DELETE rechecks its fence on the latest
-- version).
--
-- A batch of successes alone (a busy worker's usual batch) takes a
-- statement of its own with the same fence and move and none of the other
-- parts: 0.60 against 0.76 ms for a batch of one and 1.39 against 1.58 ms
-- for 65, measured alone (medians of four alternated runs, 2026-11-25).
--
-- A function so that its plan is made once per connection and kept
-- (plpgsql caches it; force_generic_plan): planned at every call, this
-- statement spent about as long in the planner as in the executor. Nested
-- loops are off inside it: a generic plan, not knowing the arrays' sizes,
-- could otherwise nest a scan of the outcomes in a loop over the jobs and
-- compare every row with every row (500 ms for a batch of 1,000 once); with
-- them off every join is a hash join, linear in the batch.
CREATE OR REPLACE FUNCTION conveyor_internal.record_outcomes(
    outcome_ids uuid[], outcome_tokens bigint[], outcome_states text[], outcome_results jsonb[],
    outcome_errors text[], outcome_retry_in_secs float8[], outcome_wait_ms float8[])
RETURNS TABLE (updated uuid[], follow_ups uuid[], finished_ids text, wake text[], counted bigint,
               claims integer)
LANGUAGE plpgsql
SET enable_nestloop = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
    IF outcome_states <@ ARRAY['success'] THEN
        -- Successes only, a busy worker's usual batch: the same fence and
        -- move in a statement without the parts for retries, failures and
        -- cancellations. PostgreSQL sets up every node of a plan at every
        -- call, used or not: in a profile of batches of one, setting up
        -- the plan (five write nodes, their aggregates) was 45 % of the call.
        RETURN QUERY
        WITH outcome AS (
            SELECT *
            FROM unnest(outcome_ids::uuid[], outcome_tokens::bigint[], outcome_results::jsonb[], outcome_wait_ms::float8[])
                 AS t(id, lease_token, result, wait_ms)
        ),
        claim AS (
            SELECT c.lease_token, c.started_at
            FROM conveyor.claims c
            WHERE c.lease_token = ANY(ARRAY(SELECT DISTINCT lease_token FROM outcome))
        ),
        ended AS (
            DELETE FROM conveyor.jobs_unfinished j
            USING outcome o LEFT JOIN claim c ON c.lease_token = o.lease_token
            WHERE j.id = ANY(outcome_ids::uuid[]) AND j.id = o.id
              AND ((j.state = 'started' AND j.lease_token = o.lease_token)
                   OR (j.state = 'pending' AND o.lease_token > coalesce(j.lease_token, 0)))
              AND (SELECT set_config('conveyor.ending_claimed_jobs', statement_timestamp()::text, true)) IS NOT NULL
            RETURNING j.id, j.queue, j.task, j.args, j.headers, 'success'::text AS state, j.priority, j.run_at,
                CASE WHEN j.state = 'pending' THEN least(j.attempt, 2147483646) + 1 ELSE j.attempt END AS attempt,
                j.max_retries, j.retry_backoff_base, j.retry_backoff, j.timeout,
                NULL::timestamptz AS lease_expires_at, NULL::text AS worker_id,
                o.result, j.last_error, j.errors, j.created_at,
                CASE WHEN j.state = 'pending' THEN coalesce(c.started_at, now()) ELSE j.started_at END AS started_at,
                now() AS finished_at,
                j.workflow_id, j.workflow_index, j.on_success, j.on_error, j.cancel_requested_at,
                j.unique_key, j.unique_until, o.lease_token,
                j.state = 'pending' AS in_claim, o.wait_ms
        ),
        into_success AS (
            INSERT INTO conveyor.jobs_success SELECT id, queue, task, args, headers, state, priority, run_at, attempt, max_retries,
                retry_backoff_base, retry_backoff, timeout, lease_expires_at, worker_id, result, last_error,
                errors, created_at, started_at, finished_at, workflow_id, workflow_index, on_success,
                on_error, cancel_requested_at, unique_key, unique_until, lease_token
                FROM ended
        ),
        claims_left AS (
            SELECT conveyor_internal.claims_done(array_agg(lease_token), array_agg(n)) AS claims
            FROM (SELECT lease_token, count(DISTINCT id)::int AS n FROM ended WHERE in_claim
                  GROUP BY lease_token) AS d
        ),
        counted AS (
            SELECT conveyor_internal.count_outcomes(
                       array_agg(queue), array_agg(task), array_agg(state), array_agg(wait_ms),
                       array_agg(extract(epoch FROM now() - started_at)::float8 * 1000))
            FROM ended
        ),
        freed AS (
            SELECT json_build_object('queue', q.queue, 'scheduled', false)::text AS payload
            FROM (SELECT DISTINCT queue FROM ended) AS q
            WHERE EXISTS (SELECT 1 FROM conveyor.queues c
                          WHERE c.name = q.queue AND c.concurrency_limit IS NOT NULL)
        )
        SELECT (SELECT coalesce(array_agg(id), '{}') FROM ended),
               (SELECT coalesce(array_agg(id), '{}') FROM ended
                WHERE workflow_id IS NOT NULL OR on_success IS NOT NULL OR on_error IS NOT NULL),
               (SELECT string_agg(id::text, ',') FROM ended),
               (SELECT coalesce(array_agg(payload), '{}') FROM freed),
               (SELECT count(*) FROM counted),
               (SELECT claims FROM claims_left);
        RETURN;
    END IF;
    -- Any other batch: every kind of outcome.
    RETURN QUERY
    WITH outcome AS (
        SELECT *
        FROM unnest(outcome_ids::uuid[], outcome_tokens::bigint[], outcome_states::text[], outcome_results::jsonb[], outcome_errors::text[], outcome_retry_in_secs::float8[],
                    outcome_wait_ms::float8[])
             AS t(id, lease_token, state, result, error, retry_in_secs, wait_ms)
    ),
    -- The claims of the batch (usually one or two rows): started_at and the
    -- worker of jobs held in their claim's row.
    claim AS (
        SELECT c.lease_token, c.started_at, c.worker_id
        FROM conveyor.claims c
        WHERE c.lease_token = ANY(ARRAY(SELECT DISTINCT lease_token FROM outcome))
    ),
    to_retry AS (
        -- Driven by the retried ids alone (usually none): joined to the whole
        -- batch, the planner nested a scan of `outcome` in a loop over every
        -- started job (70 ms for a batch of 600).
        SELECT j.id, j.cancel_requested_at IS NOT NULL AS cancel, j.state = 'pending' AS in_claim
        FROM conveyor.jobs_unfinished j
        JOIN outcome o ON o.id = j.id AND o.state = 'retry'
        WHERE j.id = ANY(ARRAY(SELECT id FROM outcome WHERE state = 'retry'))
          AND ((j.state = 'started' AND j.lease_token = o.lease_token)
               OR (j.state = 'pending' AND o.lease_token > coalesce(j.lease_token, 0)))
        FOR UPDATE OF j
    ),
    ended AS (
        DELETE FROM conveyor.jobs_unfinished j
        USING outcome o LEFT JOIN claim c ON c.lease_token = o.lease_token
        WHERE j.id = ANY(outcome_ids::uuid[]) AND j.id = o.id
          AND ((j.state = 'started' AND j.lease_token = o.lease_token)
               OR (j.state = 'pending' AND o.lease_token > coalesce(j.lease_token, 0)))
          AND (o.state <> 'retry' OR j.id = ANY(ARRAY(SELECT id FROM to_retry WHERE cancel)))
          -- Jobs held in their claim's row have no ring row: the ring trigger
          -- (jobs_ready_delete) skips this statement's deletions.
          AND (SELECT set_config('conveyor.ending_claimed_jobs', statement_timestamp()::text, true)) IS NOT NULL
        RETURNING j.id, j.queue, j.task, j.args, j.headers,
            CASE WHEN o.state = 'retry' THEN 'cancelled' ELSE o.state END AS state,
            j.priority, j.run_at,
            CASE WHEN j.state = 'pending' THEN least(j.attempt, 2147483646) + 1 ELSE j.attempt END AS attempt,
            j.max_retries, j.retry_backoff_base,
            CASE WHEN o.state = 'retry' THEN make_interval(secs => o.retry_in_secs)
                 ELSE j.retry_backoff END AS retry_backoff,
            j.timeout,
            NULL::timestamptz AS lease_expires_at,
            NULL::text AS worker_id,
            CASE WHEN o.state = 'success' THEN o.result ELSE j.result END AS result,
            coalesce(o.error, j.last_error) AS last_error,
            CASE WHEN o.error IS NULL THEN j.errors
                 ELSE j.errors || jsonb_build_array(jsonb_build_object(
                     'attempt', CASE WHEN j.state = 'pending' THEN least(j.attempt, 2147483646) + 1
                                     ELSE j.attempt END,
                     'at', now(), 'error', o.error,
                     'worker_id', CASE WHEN j.state = 'pending' THEN c.worker_id ELSE j.worker_id END))
            END AS errors,
            j.created_at,
            CASE WHEN j.state = 'pending' THEN coalesce(c.started_at, now()) ELSE j.started_at END AS started_at,
            now() AS finished_at,
            j.workflow_id, j.workflow_index, j.on_success, j.on_error, j.cancel_requested_at,
            j.unique_key, j.unique_until, o.lease_token,
            -- (Not a column of the tables: whether the claim's row held the job.)
            j.state = 'pending' AS in_claim
    ),
    -- One insert per table (the first columns of `ended` are conveyor.jobs's,
    -- in order). Data-modifying CTEs run to completion whether read or not.
    into_success AS (
        INSERT INTO conveyor.jobs_success SELECT id, queue, task, args, headers, state, priority, run_at, attempt, max_retries,
            retry_backoff_base, retry_backoff, timeout, lease_expires_at, worker_id, result, last_error,
            errors, created_at, started_at, finished_at, workflow_id, workflow_index, on_success,
            on_error, cancel_requested_at, unique_key, unique_until, lease_token
            FROM ended WHERE state = 'success'
    ),
    into_failure AS (
        INSERT INTO conveyor.jobs_failure SELECT id, queue, task, args, headers, state, priority, run_at, attempt, max_retries,
            retry_backoff_base, retry_backoff, timeout, lease_expires_at, worker_id, result, last_error,
            errors, created_at, started_at, finished_at, workflow_id, workflow_index, on_success,
            on_error, cancel_requested_at, unique_key, unique_until, lease_token
            FROM ended WHERE state = 'failure'
    ),
    into_cancelled AS (
        INSERT INTO conveyor.jobs_cancelled SELECT id, queue, task, args, headers, state, priority, run_at, attempt, max_retries,
            retry_backoff_base, retry_backoff, timeout, lease_expires_at, worker_id, result, last_error,
            errors, created_at, started_at, finished_at, workflow_id, workflow_index, on_success,
            on_error, cancel_requested_at, unique_key, unique_until, lease_token
            FROM ended WHERE state = 'cancelled'
    ),
    retried AS (
        UPDATE conveyor.jobs_unfinished j SET
            state = 'retry',
            last_error = coalesce(o.error, j.last_error),
            errors = CASE WHEN o.error IS NULL THEN j.errors
                     ELSE j.errors || jsonb_build_array(jsonb_build_object(
                         'attempt', CASE WHEN j.state = 'pending' THEN least(j.attempt, 2147483646) + 1
                                         ELSE j.attempt END,
                         'at', now(), 'error', o.error,
                         'worker_id', CASE WHEN j.state = 'pending' THEN c.worker_id ELSE j.worker_id END))
                     END,
            -- A job held in its claim's row gets what the claim gave it.
            attempt = CASE WHEN j.state = 'pending' THEN least(j.attempt, 2147483646) + 1 ELSE j.attempt END,
            started_at = CASE WHEN j.state = 'pending' THEN coalesce(c.started_at, now()) ELSE j.started_at END,
            -- The claim's token stays: that claim no longer holds the job.
            lease_token = o.lease_token,
            run_at = now() + make_interval(secs => o.retry_in_secs),
            retry_backoff = make_interval(secs => o.retry_in_secs),
            lease_expires_at = NULL,
            worker_id = NULL
        FROM outcome o LEFT JOIN claim c ON c.lease_token = o.lease_token
        WHERE j.id = ANY(ARRAY(SELECT id FROM to_retry WHERE NOT cancel)) AND j.id = o.id
        RETURNING j.id, j.queue, j.task, j.state, j.started_at, j.workflow_id, j.on_success, j.on_error,
            o.lease_token
    ),
    claims_left AS (
        -- The claims' rows count the jobs they still hold: down by those this
        -- statement ended or retried (the row is deleted at 0). Each job
        -- once, however often the batch names it: counted down too far, a
        -- claim would be deleted while it still holds jobs stored as
        -- pending, which no claim and no ring row would then bring back.
        SELECT conveyor_internal.claims_done(array_agg(lease_token), array_agg(n)) AS claims
        FROM (SELECT lease_token, count(DISTINCT id)::int AS n
              FROM (SELECT id, lease_token FROM ended WHERE in_claim
                    UNION ALL
                    SELECT r.id, r.lease_token FROM retried r
                    WHERE r.id IN (SELECT id FROM to_retry WHERE in_claim)) AS h
              GROUP BY lease_token) AS d
    ),
    updated AS (
        SELECT id, queue, task, state, started_at,
               (workflow_id IS NOT NULL OR on_success IS NOT NULL OR on_error IS NOT NULL) AS follow_up
        FROM ended
        UNION ALL
        SELECT id, queue, task, state, started_at,
               (workflow_id IS NOT NULL OR on_success IS NOT NULL OR on_error IS NOT NULL)
        FROM retried
    ),
    counted AS (
        -- The per-minute rollups (conveyor.stats): what committed, with the
        -- attempts' queue wait (from the worker, which read run_at at the claim)
        -- and run time.
        SELECT conveyor_internal.count_outcomes(
                   array_agg(u.queue), array_agg(u.task), array_agg(u.state), array_agg(o.wait_ms),
                   array_agg(extract(epoch FROM now() - u.started_at)::float8 * 1000))
        FROM updated u JOIN outcome o ON o.id = u.id
    ),
    freed AS (
        -- Queues with a global concurrency limit: a finished job frees room that
        -- idle workers should claim now.
        SELECT json_build_object('queue', q.queue, 'scheduled', false)::text AS payload
        FROM (SELECT DISTINCT queue FROM updated WHERE state <> 'retry') AS q
        WHERE EXISTS (SELECT 1 FROM conveyor.queues c
                      WHERE c.name = q.queue AND c.concurrency_limit IS NOT NULL)
    ),
    retrying AS (
        SELECT json_build_object('queue', q.queue, 'scheduled', true)::text AS payload
        FROM (SELECT DISTINCT queue FROM updated WHERE state = 'retry') AS q
    )
    SELECT (SELECT coalesce(array_agg(id), '{}') FROM updated) AS updated,
           -- Finished jobs of workflows or with callbacks: conveyor_internal.after_finish() takes them next.
           (SELECT coalesce(array_agg(id), '{}') FROM updated WHERE follow_up AND state <> 'retry') AS follow_ups,
           -- For the caller to announce after commit (job_finished, job_ready).
           (SELECT string_agg(id::text, ',') FROM updated WHERE state <> 'retry') AS finished_ids,
           (SELECT coalesce(array_agg(payload), '{}')
            FROM (SELECT payload FROM freed UNION ALL SELECT payload FROM retrying) AS w) AS wake,
           (SELECT count(*) FROM counted) AS counted,
           (SELECT claims FROM claims_left) AS claims;
END
$fn$;

COMMENT ON FUNCTION conveyor_internal.record_outcomes(uuid[], bigint[], text[], jsonb[], text[], float8[], float8[]) IS
    'Internal. Records a batch of outcomes under their claims'' fence (the completer''s one statement per batch).';
