j.id, j.queue, j.task, j.args, j.headers, j.state, j.priority, j.run_at,
j.attempt, j.max_retries,
extract(epoch FROM j.retry_backoff_base)::float8 AS retry_backoff_base_secs,
extract(epoch FROM j.retry_backoff)::float8 AS retry_backoff_secs,
extract(epoch FROM j.timeout)::float8 AS timeout_secs,
j.lease_expires_at, j.worker_id, j.result, j.last_error, j.errors,
j.created_at, j.started_at, j.finished_at,
j.workflow_id, j.workflow_index, j.on_success, j.on_error, j.lease_token
