-- Send notifications outside the transaction that caused them (after it
-- committed): one row per (channel, payload). Writes nothing, so holding
-- PostgreSQL's notify lock never waits for a disk flush.
--
-- Finished jobs ($3, the job_finished channel) are announced only while
-- some session listens for them: one holding the shared advisory lock on
-- hashtextextended($3, 0), as a Client awaiting a JobHandle does (see
-- notify/waiters.rs). PostgreSQL wakes every backend that LISTENs in the
-- database for each notification, whatever its channel: with 50 worker
-- processes listening, announcing every batch of outcomes to nobody cost a
-- quarter of the fleet's throughput (docs/decisions/2026-11-28-fleets.md).
-- Getting the lock here means no one holds it; it is held to the end of
-- this statement's transaction, so a listener arriving meanwhile waits,
-- then LISTENs, then reads the jobs' state, which these outcomes already
-- committed.
SELECT count(pg_notify(n.channel, n.payload))
FROM unnest($1::text[], $2::text[]) AS n(channel, payload)
WHERE n.channel <> $3::text OR NOT pg_try_advisory_xact_lock(hashtextextended($3, 0))
