-- One job under a uniqueness key (sql/enqueue/enqueue_unique.sql).
SELECT id, inserted FROM conveyor_internal.enqueue_unique($1::jsonb, $2, make_interval(secs => $3), $4)
