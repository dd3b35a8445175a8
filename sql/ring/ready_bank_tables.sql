-- Makes sure the eight slot tables of a bank of conveyor.ready exist and
-- are attached (conveyor.ready_bank): conveyor.ready_<8 bank + k> for
-- k = 0 … 7, each FOR VALUES IN (8 bank + k). A table is created on its own
-- and then attached, because CREATE TABLE … PARTITION OF would take ACCESS
-- EXCLUSIVE on conveyor.ready, which a running pg_dump's lock blocks, where
-- ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE (its indexes are created by
-- the attach). Called by the baseline migration for bank 0, which is always
-- there, and by conveyor_internal.rotate_ring() for the bank it uses;
-- returns the tables created or attached.
CREATE OR REPLACE FUNCTION conveyor_internal.ready_bank_tables(bank smallint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    name text;
    t regclass;
    made integer := 0;
BEGIN
    FOR k IN 0 .. {ring_slots} - 1 LOOP
        name := format('ready_%s', bank * {ring_slots} + k);
        t := to_regclass(format('conveyor.%I', name));
        IF t IS NULL THEN
            EXECUTE format('CREATE TABLE conveyor.%I (LIKE conveyor.ready)', name);
            EXECUTE format('COMMENT ON TABLE conveyor.%I IS %L', name,
                           CASE WHEN bank = 0 THEN format('Slot %s of conveyor.ready.', k)
                                ELSE format('Slot %s of bank %s of conveyor.ready (made while a long transaction held another bank; dropped a while after the ring left it).', k, bank)
                           END);
        END IF;
        IF t IS NULL OR NOT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = t) THEN
            EXECUTE format('ALTER TABLE conveyor.ready ATTACH PARTITION conveyor.%I FOR VALUES IN (%s)',
                           name, bank * {ring_slots} + k);
            made := made + 1;
        END IF;
    END LOOP;
    RETURN made;
END
$$;

COMMENT ON FUNCTION conveyor_internal.ready_bank_tables(smallint) IS
    'Internal. Creates and attaches the missing slot tables of a bank of conveyor.ready (conveyor.ready_<{ring_slots} bank + k>); returns how many.';
