-- Make sure the day tables of finished jobs exist for today and the next
-- two days (UTC). Returns how many were created.
SELECT conveyor_internal.create_history_partitions(2)
