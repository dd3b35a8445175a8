-- A worker's beat: alive, running $2 jobs. No row (deleted by an operator,
-- or dead for a day): the caller registers again.
UPDATE conveyor.workers
SET last_beat_at = now(), busy = $2, dead_at = NULL
WHERE id = $1
