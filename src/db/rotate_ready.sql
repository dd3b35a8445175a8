-- Empty the sealed slots of the ready ring (conveyor.ready) that can be
-- locked at once; returns how many were emptied.
SELECT conveyor_internal.rotate_ready()
