#!/bin/bash
# Read costs of design N's view (proto.jobs_v) against conveyor.jobs, after view_setup.sql and view.sql (run.sh view).
P="psql -h 127.0.0.1 -U postgres -d proto -qAt"
started=$($P -c "select job_ids[250] from proto.claims limit 1")
pending=$($P -c "select job_id from conveyor.ready limit 1 offset 5000")
finished=$($P -c "select id from conveyor.jobs_success limit 1 offset 5000")
t() { # label, sql: median execution ms of 7 runs, EXPLAIN ANALYZE
  for i in 1 2 3 4 5 6 7; do $P -c "EXPLAIN (ANALYZE, TIMING OFF) $2" | grep -oP 'Execution Time: \K[0-9.]+'; done | sort -n | sed -n 4p | xargs printf "%-55s %s ms\n" "$1"
}
for src in conveyor.jobs proto.jobs_v; do
  echo "== $src"
  t "by id, started" "SELECT * FROM $src WHERE id = '$started'"
  t "by id, pending" "SELECT * FROM $src WHERE id = '$pending'"
  t "by id, finished" "SELECT * FROM $src WHERE id = '$finished'"
  t "count started, queue" "SELECT count(*) FROM $src WHERE state = 'started' AND queue = 'bench'"
  t "count pending, queue" "SELECT count(*) FROM $src WHERE state = 'pending' AND queue = 'bench'"
  t "50 newest successes" "SELECT id FROM $src WHERE state = 'success' ORDER BY finished_at DESC LIMIT 50"
  t "50 newest pending via ring (dashboard)" "SELECT j.id FROM (SELECT job_id FROM conveyor.ready ORDER BY job_id DESC LIMIT 50) n JOIN $src j ON j.id = n.job_id AND j.state = 'pending'"
  t "50 started (dashboard active)" "SELECT id FROM $src WHERE state = 'started' ORDER BY id LIMIT 50"
done
