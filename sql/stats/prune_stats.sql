-- Delete the outcome rollups (conveyor.stats) of minutes more than $1
-- seconds ago (a range of the primary key's leading column).
DELETE FROM conveyor.stats WHERE minute < now() - make_interval(secs => $1)
