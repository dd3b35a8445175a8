-- Retention by day: drop the day tables of finished jobs in state $1 whose
-- whole day ended more than $2 seconds ago (every job in them is past the
-- retention). Returns how many were dropped.
SELECT conveyor_internal.drop_history_partitions($1, now() - make_interval(secs => $2))
