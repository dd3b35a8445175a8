-- Send notifications outside the transaction that caused them (after it
-- committed): one row per (channel, payload). Writes nothing, so holding
-- PostgreSQL's notify lock never waits for a disk flush.
SELECT count(pg_notify(n.channel, n.payload))
FROM unnest($1::text[], $2::text[]) AS n(channel, payload)
