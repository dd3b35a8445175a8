-- Upkeep of the ready ring (conveyor.ready): empties sealed slots, switches
-- banks while a long transaction holds the current one, drops banks left
-- long ago (conveyor_internal.rotate_ring()). Returns the current bank, the
-- slots emptied, and whether a long transaction holds a slot / the current
-- bank (both NULL when another process was doing the upkeep).
SELECT current_bank, emptied, held, stuck FROM conveyor_internal.rotate_ring()
