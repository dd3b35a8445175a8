-- Dashboard: who leads the periodic scheduler. lock_holder is the backend
-- that holds the scheduler's advisory lock now (pg_locks: the lock table in
-- memory, no table scan; $1 is the lock's name, db::periodic_lock_name);
-- the leader row says which process last took the lead and which backend
-- it led from. It leads while the two are the same. workers: its worker
-- ids in the registry (same host and pid).
WITH lock AS (
    SELECT hashtextextended($1, 0) AS key
),
holder AS (
    SELECT (SELECT k.pid FROM pg_locks k, lock
            WHERE k.locktype = 'advisory' AND k.granted AND k.objsubid = 1
              AND k.database = (SELECT oid FROM pg_database WHERE datname = current_database())
              AND k.classid = ((lock.key >> 32) & 4294967295)::oid
              AND k.objid = (lock.key & 4294967295)::oid
            LIMIT 1) AS lock_holder
)
SELECT h.lock_holder, l.host, l.pid, l.version, l.backend_pid, l.since,
       coalesce(l.backend_pid = h.lock_holder, false) AS leading,
       ARRAY(SELECT w.id FROM conveyor.workers w
             WHERE w.host = l.host AND w.pid = l.pid ORDER BY w.id) AS workers
FROM holder h
LEFT JOIN conveyor.periodic_leader l ON true
