-- Insert a batch of jobs in one statement (one element per job in each array).
-- A job whose id already exists is not inserted and not returned: the caller
-- checks that those exist (existing_ids.sql). The statement is kept this
-- plain on purpose: PostgreSQL then settles on a cached generic plan, where a
-- join back to the input made it plan every call anew (0.2 ms, more than the
-- insert). Due time and first state: conveyor_internal.due_at() and
-- initial_state(), the rule every way in applies. The insert trigger sends
-- one job_ready notification per queue, delivered at commit.
--
-- Jobs go into conveyor.jobs_unfinished, whose primary key keeps ids unique
-- among unfinished jobs. A finished job lives in another partition
-- (conveyor.jobs_success, …), which no index shares with it: when an id may
-- belong to one ($14: the caller chose some id, or an earlier try of this
-- insert may have committed and its jobs run since), each id is also looked
-- for in the whole table, read with this statement's snapshot, in which
-- every job is in exactly one partition. (Only a job inserted and finished
-- entirely while this statement runs could slip past; with $14 false
-- nothing is looked up: ids the library generates are new.)
INSERT INTO conveyor.jobs_unfinished
    (id, queue, task, args, headers, state, priority, run_at,
     max_retries, retry_backoff_base, timeout, on_success, on_error)
SELECT t.id, t.queue, t.task, t.args, t.headers,
       conveyor_internal.initial_state(due.at),
       t.priority, due.at, t.max_retries,
       make_interval(secs => t.backoff_base_secs),
       CASE WHEN t.timeout_secs IS NOT NULL THEN make_interval(secs => t.timeout_secs) END,
       t.on_success, t.on_error
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[],
            $6::int[], $7::timestamptz[], $8::float8[], $9::int[],
            $10::float8[], $11::float8[], $12::jsonb[], $13::jsonb[])
         AS t(id, queue, task, args, headers, priority, run_at, delay_secs,
              max_retries, backoff_base_secs, timeout_secs, on_success, on_error)
     CROSS JOIN LATERAL (SELECT conveyor_internal.due_at(t.run_at, t.delay_secs) AS at) AS due
WHERE NOT $14::boolean OR NOT EXISTS (SELECT 1 FROM conveyor.jobs x WHERE x.id = t.id)
ON CONFLICT ON CONSTRAINT jobs_unfinished_pkey DO NOTHING
RETURNING id
