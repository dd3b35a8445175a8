-- Mark workers silent for three beat intervals dead; delete rows dead for
-- a day. Returns how many were marked now.
WITH gone AS (
    DELETE FROM conveyor.workers WHERE dead_at < now() - interval '1 day'
),
marked AS (
    UPDATE conveyor.workers SET dead_at = now()
    WHERE dead_at IS NULL AND last_beat_at < now() - 3 * beat_interval
    RETURNING id
)
SELECT count(*) FROM marked
