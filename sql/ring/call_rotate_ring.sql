-- Upkeep of the ready ring (conveyor.ready): empties sealed slots, switches
-- banks while a long transaction holds the current one, drops banks left
-- long ago (conveyor_internal.rotate_ring()). Returns the current bank, the
-- slots emptied, and whether a long transaction holds a slot / the current
-- bank (both NULL when another process did the upkeep less than 200 ms ago
-- or is doing it: a fleet of workers needs no more passes than one).
SELECT current_bank, emptied, held, stuck FROM conveyor_internal.rotate_ring(min_gap => '200 milliseconds')
