-- Design N's conveyor.jobs as a view (docs/decisions/2026-11-25-batch-claims.md), over the
-- proto database of run.sh: stored rows as they are, except that a job pending on disk
-- and listed by a live claim (token above the one it was made runnable with) reads started.
DROP VIEW IF EXISTS proto.jobs_v;
CREATE VIEW proto.jobs_v AS
SELECT id, queue, task, args, headers, state, priority, run_at, attempt, max_retries, retry_backoff_base, retry_backoff, timeout, lease_expires_at, worker_id, result, last_error, errors, created_at, started_at, finished_at, workflow_id, workflow_index, on_success, on_error, cancel_requested_at, unique_key, unique_until, lease_token FROM conveyor.jobs_success
UNION ALL
SELECT id, queue, task, args, headers, state, priority, run_at, attempt, max_retries, retry_backoff_base, retry_backoff, timeout, lease_expires_at, worker_id, result, last_error, errors, created_at, started_at, finished_at, workflow_id, workflow_index, on_success, on_error, cancel_requested_at, unique_key, unique_until, lease_token FROM conveyor.jobs_failure
UNION ALL
SELECT id, queue, task, args, headers, state, priority, run_at, attempt, max_retries, retry_backoff_base, retry_backoff, timeout, lease_expires_at, worker_id, result, last_error, errors, created_at, started_at, finished_at, workflow_id, workflow_index, on_success, on_error, cancel_requested_at, unique_key, unique_until, lease_token FROM conveyor.jobs_cancelled
UNION ALL
SELECT id, queue, task, args, headers, state, priority, run_at, attempt, max_retries, retry_backoff_base, retry_backoff, timeout, lease_expires_at, worker_id, result, last_error, errors, created_at, started_at, finished_at, workflow_id, workflow_index, on_success, on_error, cancel_requested_at, unique_key, unique_until, lease_token FROM conveyor.jobs_unfinished j WHERE j.state <> 'pending'
UNION ALL
SELECT j.id, j.queue, j.task, j.args, j.headers, 'started'::text, j.priority, j.run_at, (j.attempt + 1)::conveyor.non_negative_int, j.max_retries, j.retry_backoff_base, j.retry_backoff, j.timeout, c.expires_at::conveyor.finite_timestamptz, c.worker_id, j.result, j.last_error, j.errors, j.created_at, c.started_at::conveyor.finite_timestamptz, j.finished_at, j.workflow_id, j.workflow_index, j.on_success, j.on_error, j.cancel_requested_at, j.unique_key, j.unique_until, c.lease_token
FROM (SELECT unnest(job_ids) AS job_id, lease_token, worker_id, expires_at, started_at FROM proto.claims) c
JOIN conveyor.jobs_unfinished j ON j.id = c.job_id AND j.state = 'pending' AND c.lease_token > coalesce(j.lease_token, 0)
UNION ALL
SELECT id, queue, task, args, headers, 'pending'::text, priority, run_at, attempt, max_retries, retry_backoff_base, retry_backoff, timeout, lease_expires_at, worker_id, result, last_error, errors, created_at, started_at, finished_at, workflow_id, workflow_index, on_success, on_error, cancel_requested_at, unique_key, unique_until, lease_token
FROM conveyor.jobs_unfinished j
WHERE j.state = 'pending'
  AND NOT EXISTS (SELECT 1 FROM (SELECT unnest(job_ids) AS job_id, lease_token FROM proto.claims) c
                  WHERE c.job_id = j.id AND c.lease_token > coalesce(j.lease_token, 0));
