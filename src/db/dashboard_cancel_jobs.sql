-- Dashboard, a page of a bulk cancel: conveyor.cancel() on each id of $1,
-- in one statement; each job's state afterwards (NULL: gone).
SELECT t.id, conveyor.cancel(t.id) AS state
FROM unnest($1::uuid[]) AS t (id)
