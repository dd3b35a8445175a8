-- Claims wait for their turn without holding a snapshot (issue 31;
-- docs/decisions/2026-11-29-claim-turns-without-a-snapshot.md).
--
-- Claims of a queue take turns, two at a time (conveyor_internal.
-- define_ready_slot() says why). They waited for a turn on an advisory
-- lock, inside the claim statement: a waiting statement holds its snapshot,
-- so with 50 worker processes, where about 45 claims waited at any moment
-- for a second or more, the oldest waiting claim held back the removal of
-- every ring row claimed since it began; each claim then stepped over those
-- dead rows, took longer, and made the line longer (a backlog of 500,000
-- jobs ran at a fifth of the rate of one process, and slowed as it ran).
--
-- `LOCK TABLE` is the one statement that waits for a lock without taking a
-- snapshot. So a turn is now a lock on one of these empty tables, in SHARE
-- UPDATE EXCLUSIVE mode (the weakest mode that conflicts with itself: a
-- pg_dump's ACCESS SHARE lock does not stand in its way). A queue's two
-- turns are claim_turn_<2k> and claim_turn_<2k+1>, k = hashtext(queue) & 15:
-- queues that share k share their turns. A claim first tries both
-- (NOWAIT); if both are taken, it returns at once and the worker waits in a
-- transaction of its own, `BEGIN; LOCK TABLE …; SET LOCAL
-- conveyor.claim_turn = '<n>'`, then claims in it. Nothing else locks
-- these tables or writes them; they stay empty.
DO $$
BEGIN
    FOR k IN 0..31 LOOP
        EXECUTE format('CREATE TABLE conveyor_internal.claim_turn_%s ()', k);
        EXECUTE format(
            'COMMENT ON TABLE conveyor_internal.claim_turn_%s IS %L', k,
            'Internal, always empty. A turn to claim: claims lock it (SHARE UPDATE EXCLUSIVE) while they run; see migrations/V19__claim_turns.sql.');
    END LOOP;
END
$$;
