-- The oldest transaction, open for more than $1 seconds, that holds a lock
-- on a slot of the ready ring (conveyor.ready): while it runs no slot can be
-- emptied and claims slow down (a pg_dump, a session that read the ring and
-- left its transaction open). None when there is no such transaction.
SELECT a.pid, coalesce(nullif(a.application_name, ''), a.usename::text, '?') AS who,
       extract(epoch FROM now() - a.xact_start)::float8 AS secs
FROM pg_locks l
JOIN pg_inherits i ON i.inhrelid = l.relation AND i.inhparent = 'conveyor.ready'::regclass
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.granted AND l.pid <> pg_backend_pid()
  -- pg_locks shows every database's locks, and databases made from one
  -- template share their tables' oids.
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND a.xact_start < now() - make_interval(secs => $1)
ORDER BY a.xact_start
LIMIT 1
