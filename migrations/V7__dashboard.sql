-- Conveyor schema, version 7: indexes for the web dashboard's job lists.
--
-- The dashboard lists the jobs of one state, newest first, optionally
-- narrowed to a queue or a task. Unfinished states are found through their
-- partial indexes (jobs_claim_idx, jobs_waiting_idx, jobs_running_idx) and
-- finished ones through jobs_finished_idx (state, finished_at). That is
-- enough for a state alone, but a queue or task that is rare among millions
-- of kept successes would make the list walk every success to fill a page
-- (about 200 ms at 1M rows, growing with the history). These two indexes
-- serve those lists directly, newest first.
--
-- Each also carries the other filter column and the id, so a list narrowed
-- to both a queue and a task (even a pair that never occurs) and the keyset
-- tie-break on id are answered from the index alone (an index-only scan),
-- without reading every matching row from the table.
--
-- Both are partial over finished jobs: a job enters each once, when it
-- reaches its final state, and never while it waits, runs or retries, so
-- the claim path does not maintain them.
CREATE INDEX jobs_finished_queue_idx ON conveyor.jobs (queue, state, finished_at)
    INCLUDE (task, id) WHERE finished_at IS NOT NULL;

CREATE INDEX jobs_finished_task_idx ON conveyor.jobs (task, state, finished_at)
    INCLUDE (queue, id) WHERE finished_at IS NOT NULL;

COMMENT ON INDEX conveyor.jobs_finished_queue_idx IS
    'Dashboard: finished jobs of one queue and state, newest first.';
COMMENT ON INDEX conveyor.jobs_finished_task_idx IS
    'Dashboard: finished jobs of one task and state, newest first.';
