-- Issue 31: a queue that survives the nightly backup. pg_dump takes an
-- ACCESS SHARE lock on every table it dumps and keeps it, with its snapshot,
-- for its whole run. The ready ring's slots (conveyor.ready_0 … _7) can then
-- not be emptied by TRUNCATE, every claim walks the dead entries of every
-- job claimed since the dump began, and at 1,500 jobs/s the queue fell
-- behind about 150 s into a real dump (docs/storage.md).
--
-- A lock taken by a transaction covers only the tables that exist when it
-- takes it. So the ring now has banks of 8 slots: bank 0 is slots 0-7 (the
-- tables conveyor.ready_0 … _7 of before, always there), bank b the slots
-- 8b … 8b+7 (tables conveyor.ready_<8b> … ready_<8b+7>, created on demand).
-- Inserts go to the current bank, named in conveyor.ready_bank. When a long
-- transaction holds a slot of the current bank, the rotator
-- (conveyor_internal.rotate_ring()) creates or empties another bank,
-- attaches it (ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on
-- conveyor.ready, which a dump's ACCESS SHARE does not block), makes it
-- current and carries the held bank's runnable rows into it; claims read the
-- current bank only. The new bank's tables are not locked by the dump, so
-- they are emptied every second as before. Once the holder is gone, the
-- ring goes back to bank 0 and the other banks are detached and dropped.
CREATE TABLE conveyor.ready_bank (
    bank     smallint    NOT NULL DEFAULT 0 CHECK (bank >= 0 AND bank < 4096),
    since    timestamptz NOT NULL DEFAULT now(),
    held_by  text
);

-- One row, always.
CREATE UNIQUE INDEX ready_bank_one_row ON conveyor.ready_bank ((true));
INSERT INTO conveyor.ready_bank (bank) VALUES (0);

COMMENT ON TABLE conveyor.ready_bank IS
    'The bank of conveyor.ready slots that takes inserts now (one row, written by conveyor_internal.rotate_ring()). Bank 0 is conveyor.ready_0 … _7; another bank is used while a long transaction (a pg_dump) holds a slot of bank 0.';
COMMENT ON COLUMN conveyor.ready_bank.bank IS
    'The current bank b: new ring rows go to slot 8b + (the second modulo 8), table conveyor.ready_<slot>.';
COMMENT ON COLUMN conveyor.ready_bank.since IS 'When this bank became current.';
COMMENT ON COLUMN conveyor.ready_bank.held_by IS
    'Why: the transaction that held the previous bank (pid, application name), or NULL for bank 0.';

COMMENT ON COLUMN conveyor.ready.slot IS
    'Ring slot: 8 * bank + the second the row was inserted, modulo 8 (bank 0: slots 0-7; see conveyor.ready_bank).';
COMMENT ON TABLE conveyor.ready IS
    'Runnable (pending) jobs in claim order, one row each, in slots that rotate every second and are emptied by TRUNCATE, in banks of 8 slots (conveyor.ready_bank). Written by triggers on conveyor.jobs; read by claims.';

-- Replaced by conveyor_internal.rotate_ring(), which also switches banks
-- (a database made after this change never had it).
DROP FUNCTION IF EXISTS conveyor_internal.rotate_ready(integer, interval);
