-- The claim of claim.sql, for when a long transaction holds a lock on the
-- ready ring (a pg_dump): no slot can be truncated then, and a claim that
-- starts at the head of each slot walks every dead entry claims have left
-- there since. A sealed slot gets no new rows (only the current slot takes
-- inserts), so its claim order is fixed: this worker passes, per slot, the
-- claim key (-priority, run_at, job_id) of the last row it took there
-- ($8 to $10), and the second in which it did ($11); each slot is read
-- from just after that key, the current slot always from its head (new
-- rows of any priority arrive there), and a key taken in a second when the
-- slot has been current since is ignored (the slot may hold new rows
-- below it). Rows a floor passes over (committed late into a sealed slot,
-- or locked by another claim that then rolled back) wait for the next claim
-- without floors, which the worker makes every safety interval.
-- Unlike claim.sql, candidates are chosen first, unlocked, per slot (the
-- first placeholder below: one index scan per slot from its floor, merged),
-- then each slot's are locked with SKIP LOCKED by address and deleted (the
-- second: CTEs locked_<k>, taken_<k>, and `taken`, their union; both
-- written out by db::ring).
-- Returns the claimed jobs, and on every row the new floors (`floors`:
-- per slot other than the current one, the highest key taken) and the
-- second they were taken in (`floors_second`).
WITH room AS (
    SELECT greatest(0, least(
               $3::bigint,
               coalesce($7::int, $3::bigint),
               CASE WHEN $6::int IS NULL THEN $3::bigint
                    ELSE $6::int - conveyor_internal.live_leases($1) END)) AS n
),
now_slot AS (
    SELECT conveyor_internal.ready_slot() AS slot,
           floor(extract(epoch FROM statement_timestamp()))::bigint AS second
),
cand AS (
    SELECT * FROM ({candidates}) AS c
    WHERE NOT EXISTS (SELECT 1 FROM conveyor.queues WHERE name = $1 AND paused_at IS NOT NULL)
    ORDER BY np, run_at, job_id
    LIMIT (SELECT n FROM room)
),
{lock_and_take},
-- One conveyor.claims row, the jobs' rows left pending: claim_rows.sql.
{claim_rows}
SELECT {job_columns},
    (SELECT coalesce(jsonb_agg(f), '[]') FROM (
        SELECT DISTINCT ON (slot) slot, np, run_at, job_id FROM taken
        WHERE slot <> (SELECT slot FROM now_slot)
        ORDER BY slot, np DESC, run_at DESC, job_id DESC) AS f) AS floors,
    (SELECT second FROM now_slot) AS floors_second
FROM claimed j
