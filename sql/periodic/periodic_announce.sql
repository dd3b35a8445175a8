-- A process that just took the periodic scheduler's lead says who it is and
-- which schedules it runs, in one statement on its leadership session (so
-- backend_pid is the session that holds the lock): the leader row, a row
-- per schedule it registered ($4-$9, one array element each) marked
-- on_leader, and on_leader = false for every other schedule (kept, with its
-- last slot, but not enqueued while this process leads).
-- $1 host, $2 pid, $3 version; $4 names, $5 schedules, $6 tasks, $7 queues,
-- $8 missed, $9 next slots; $10 the lock holder's backend if not this
-- session's (a leader behind a transaction-mode pooler announces on
-- another connection). (Both WITH parts run although nothing reads them.)
WITH leader AS (
    INSERT INTO conveyor.periodic_leader AS l (one, host, pid, version, backend_pid, since)
    VALUES (true, $1, $2, $3, coalesce($10::int, pg_backend_pid()), now())
    ON CONFLICT ON CONSTRAINT periodic_leader_pkey DO UPDATE
    SET host = excluded.host, pid = excluded.pid, version = excluded.version,
        backend_pid = excluded.backend_pid, since = excluded.since
),
registered AS (
    INSERT INTO conveyor.periodic AS p (name, schedule, task, queue, missed, next_slot, on_leader)
    SELECT s.name, s.schedule, s.task, s.queue, s.missed, s.next_slot, true
    FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::timestamptz[])
         AS s (name, schedule, task, queue, missed, next_slot)
    ON CONFLICT ON CONSTRAINT periodic_pkey DO UPDATE
    SET schedule = excluded.schedule, task = excluded.task, queue = excluded.queue,
        missed = excluded.missed, next_slot = excluded.next_slot, on_leader = true,
        updated_at = now()
)
UPDATE conveyor.periodic SET on_leader = false, updated_at = now()
WHERE on_leader AND name <> ALL($4::text[])
