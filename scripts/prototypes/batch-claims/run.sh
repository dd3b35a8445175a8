#!/bin/bash
# The batch-claims prototype (issue 16, docs/decisions/2026-11-25-batch-claims.md):
# each design's claim and outcome statements replayed as raw SQL by pgbench on
# one connection, batches of 500, against the PostgreSQL of DATABASE_URL's host.
#
#   scripts/prototypes/batch-claims/run.sh setup          # two databases, proto and proto_h
#   scripts/prototypes/batch-claims/run.sh rounds 3       # f c0 h n2 n, interleaved, 100,000 jobs each
#   scripts/prototypes/batch-claims/run.sh one n 100000   # one variant (also n_gin: N with a GIN index)
#   scripts/prototypes/batch-claims/run.sh view           # design N's conveyor.jobs view: read costs
#   scripts/prototypes/batch-claims/run.sh drop
#
# Prints jobs/s and WAL bytes per job (the WAL position of the whole cluster:
# run it on a quiet server) and pgbench's latency per statement.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
OUT=${OUT:-$HERE/out}
PGHOST=${PGHOST:-127.0.0.1}; PGUSER=${PGUSER:-postgres}; export PGHOST PGUSER
BATCH=500

setup() {
    python3 "$HERE/gen.py" "$OUT"
    for db in proto proto_h; do
        psql -qAt -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
        (cd "$ROOT" && cargo run -q --release --features cli --bin conveyor -- \
            --database-url "postgres://$PGUSER@$PGHOST/$db" migrate)
        psql -qAt -d $db -c "CREATE SCHEMA proto" \
            -c "CREATE TABLE proto.claims (lease_token bigint PRIMARY KEY, worker_id text NOT NULL, queue text NOT NULL,
                    expires_at timestamptz NOT NULL, started_at timestamptz NOT NULL, job_ids uuid[] NOT NULL,
                    jobs_left int NOT NULL DEFAULT 500)" \
            -c "CREATE TABLE proto.leases (job_id uuid PRIMARY KEY, lease_token bigint NOT NULL, attempt int NOT NULL,
                    worker_id text NOT NULL, started_at timestamptz NOT NULL, lease_expires_at timestamptz NOT NULL)
                WITH (fillfactor = 90)"
    done
    psql -qAt -d proto -f "$OUT/f_schema.sql" 2>/dev/null
    # H: no index names `state`, and room on each page, so the claim's update is HOT.
    psql -qAt -d proto_h -c "DROP INDEX conveyor.jobs_running_idx" -c "DROP INDEX conveyor.jobs_waiting_idx" \
        -c "ALTER TABLE conveyor.jobs_unfinished SET (fillfactor = 50)"
}

one() {
    local v=$1 n=${2:-100000} db=proto opts="" script=$1
    # N with a GIN index on the claims' id arrays (a lookup by job id).
    if [ "$v" = n_gin ]; then script=n; fi
    if [ "$v" = h ]; then db=proto_h; fi
    # F's and H's generic plans join the outcome's ids as a nested loop over
    # the whole batch (the Rust baseline gets the hash join): give them theirs.
    if [ "$v" = f ]; then opts="-c plan_cache_mode=force_custom_plan"; fi
    if [ "$v" = h ]; then opts="-c enable_nestloop=off"; fi
    local p="psql -qAt -d $db"
    local load="INSERT INTO conveyor.jobs (queue, task) SELECT 'bench', 'noop' FROM generate_series(1, $n)"
    case $v in
        f) $p -c "TRUNCATE bench_old.jobs" -c "${load/conveyor.jobs/bench_old.jobs}" -c "VACUUM (ANALYZE) bench_old.jobs" ;;
        c0|h|n|n2|n_gin|nl|nlc)
            $p -c "ALTER TABLE conveyor.jobs_unfinished ENABLE TRIGGER jobs_ready_delete" \
               -c "DELETE FROM conveyor.jobs_unfinished" -c "SELECT conveyor.rebuild_ready()" \
               -c "TRUNCATE proto.claims, proto.leases" -c "$load" \
               -c "VACUUM (ANALYZE) conveyor.jobs_unfinished, conveyor.ready, proto.claims, proto.leases" >/dev/null
            # N and N2 leave the job row pending: the trigger that removes a
            # pending job's ring row would run for nothing when it ends.
            case $v in n|n2|n_gin|nl|nlc) $p -c "ALTER TABLE conveyor.jobs_unfinished DISABLE TRIGGER jobs_ready_delete" ;; esac
            $p -c "DROP INDEX IF EXISTS proto.claims_job_ids"
            if [ "$v" = n_gin ]; then $p -c "CREATE INDEX claims_job_ids ON proto.claims USING gin (job_ids)"; fi ;;
        *) echo "unknown variant $v" >&2; exit 2 ;;
    esac
    $p -c CHECKPOINT
    local w0 w1 out
    w0=$($p -c "SELECT pg_current_wal_insert_lsn()")
    out=$(PGOPTIONS="$opts" pgbench -n -r -M prepared -c 1 -t $((n / BATCH)) -f "$OUT/$script.sql" $db 2>&1)
    w1=$($p -c "SELECT pg_current_wal_insert_lsn()")
    local tps wal
    tps=$(echo "$out" | grep -oP 'tps = \K[0-9.]+' | head -1)
    wal=$($p -c "SELECT (pg_wal_lsn_diff('$w1', '$w0') / $n)::int")
    echo "$v jobs_s=$(echo "$tps * $BATCH / 1" | bc) wal_per_job=$wal" \
        "claim_ms=$(echo "$out" | grep -A1 'statement latencies' | tail -1 | awk '{print $1}')" \
        "outcome_ms=$(echo "$out" | grep -A2 'statement latencies' | tail -1 | awk '{print $1}')"
}

case ${1:-} in
    setup) setup ;;
    one) shift; one "$@" ;;
    rounds) for _ in $(seq 1 "${2:-3}"); do for v in f c0 h n2 n; do one $v 100000; done; done ;;
    view) psql -qAt -d proto -f "$HERE/view_setup.sql" >/dev/null && psql -qAt -d proto -f "$HERE/view.sql" && "$HERE/view_queries.sh" ;;
    drop) psql -qAt -c "DROP DATABASE IF EXISTS proto" -c "DROP DATABASE IF EXISTS proto_h" ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
esac
