-- One job under a uniqueness key (see conveyor.enqueue_unique in V4).
SELECT id, inserted FROM conveyor.enqueue_unique($1::jsonb, $2, make_interval(secs => $3))
