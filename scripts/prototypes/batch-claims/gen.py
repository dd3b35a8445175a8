"""Writes the pgbench scripts of the batch-claims prototype (issue 16):
f.sql (the old design, bench F's statements), c0.sql (today's claim.sql and
complete.sql as the library expands them), h.sql (today's, with a claims row
per statement; run against a schema whose claim update is HOT), n2.sql (job
row untouched, one lease row per job) and n.sql (job row untouched, one
claims row per claim statement). See run.sh and
docs/decisions/2026-11-25-batch-claims.md."""
import re, pathlib, sys
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
M = ROOT / 'sql'
OUT = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / 'out'
OUT.mkdir(exist_ok=True)
cols = (M/'inspect/job_columns.sql').read_text().strip()
dp = []
for k in range(8):
    dp.append(f"taken_{k} AS (DELETE FROM conveyor.ready_{k} WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked WHERE slot = {k})) RETURNING job_id),")
delete_picked = "\n".join(dp) + "\ntaken AS (" + " UNION ALL ".join(f"SELECT job_id FROM taken_{k}" for k in range(8)) + ")"
def strip_comments(s):
    return "\n".join(l for l in s.splitlines() if not l.strip().startswith('--'))
def store_and_count(rows):
    """The end of N's and N2's outcome: the finished rows (CTE `rows`) into
    today's success table, counted in the rollups, their ids returned."""
    return f"""into_success AS (INSERT INTO conveyor.jobs_success SELECT * FROM {rows}),
counted AS (
    SELECT conveyor_internal.count_outcomes(array_agg(queue), array_agg(task), array_agg(state),
        array_agg(1::float8), array_agg(extract(epoch FROM now() - started_at)::float8 * 1000))
    FROM {rows}
)
SELECT (SELECT count(*) FROM counted), (SELECT string_agg(id::text, ',') FROM {rows});
"""


B = 500
# --- C0: today's claim and complete
claim = strip_comments((M/'claim/claim.sql').read_text()).replace('{delete_picked}', delete_picked).replace('{job_columns}', cols)
subs = {'$1': "'bench'::text", '$2': "'{noop}'::text[]", '$3': f"{B}", '$4': '60', '$5': "'raw'::text", '$6': 'NULL', '$7': 'NULL'}
for k in sorted(subs, reverse=True):
    claim = claim.replace(k, subs[k])
claim = claim.rstrip().rstrip(';')
# The final UPDATE becomes a CTE, so its rows can be gathered into pgbench variables (\gset).
head, upd = claim.split("\nUPDATE conveyor.jobs_unfinished j", 1)
upd = "UPDATE conveyor.jobs_unfinished j" + upd
c0_claim = head + ",\nclaimed AS (" + upd + ")\nSELECT array_agg(id)::text AS ids, array_agg(lease_token)::text AS toks, count(*) AS n FROM claimed \\gset\n"
comp = strip_comments((M/'outcome/complete.sql').read_text())
csubs = {'$1': ':ids::uuid[]', '$2': ':toks::bigint[]', '$3': f"array_fill('success'::text, ARRAY[:n::int])",
         '$4': "array_fill('null'::jsonb, ARRAY[:n::int])", '$5': "array_fill(NULL::text, ARRAY[:n::int])",
         '$6': "array_fill(NULL::float8, ARRAY[:n::int])", '$7': "array_fill(1::float8, ARRAY[:n::int])"}
for k in sorted(csubs, reverse=True):
    comp = comp.replace(k, csubs[k])
c0 = c0_claim + comp.strip().rstrip(';') + ";\n"
(OUT / 'c0.sql').write_text(c0)
# --- F: the old design (bench/baseline.rs)
F = open(ROOT / 'examples/bench/baseline.rs').read()
fclaim = re.search(r'const CLAIM: &str = "(.*?)";', F, re.S).group(1)
fcomp = re.search(r'const COMPLETE: &str = "(.*?)";', F, re.S).group(1)
fclaim = fclaim.replace('$1', "'bench'").replace('$2', f'{B}')
fhead, fupd = fclaim.split("\n    UPDATE bench_old.jobs j", 1)
f = fhead + ",\nclaimed AS (UPDATE bench_old.jobs j" + fupd + ")\nSELECT array_agg(id)::text AS ids, array_agg(lease_token)::text AS toks FROM claimed \\gset\n"
f += fcomp.replace('$1', ':ids::uuid[]').replace('$2', ':toks::bigint[]') + ";\n"
(OUT / 'f.sql').write_text(f)
schema = re.search(r'const SCHEMA: &str = "(.*?)";', F, re.S).group(1)
(OUT / 'f_schema.sql').write_text(schema)
# --- N: the claim leaves the job row alone; a claims row per statement is the lease
n_claim = f"""WITH picked AS (
    SELECT slot, ctid FROM conveyor.ready
    WHERE queue = 'bench' AND task = ANY('{{noop}}'::text[]) AND run_at <= now()
      AND NOT EXISTS (SELECT 1 FROM conveyor.queues WHERE name = 'bench' AND paused_at IS NOT NULL)
    ORDER BY -(priority::bigint), run_at, job_id
    LIMIT {B}
    FOR UPDATE SKIP LOCKED
),
{delete_picked},
tok AS (SELECT nextval('conveyor.lease_tokens') AS t),
ins AS (INSERT INTO proto.claims (lease_token, worker_id, queue, expires_at, started_at, job_ids)
        SELECT (SELECT t FROM tok), 'raw', 'bench', now() + interval '60 seconds', now(), ARRAY(SELECT job_id FROM taken)),
bodies AS (SELECT {cols} FROM conveyor.jobs_unfinished j WHERE j.id = ANY(ARRAY(SELECT job_id FROM taken)) AND j.state = 'pending')
SELECT array_agg(id)::text AS ids, (SELECT t FROM tok) AS tok, count(*) AS n, sum(length(args::text)) AS argbytes FROM bodies \\gset
"""
n_comp = f"""WITH c AS (SELECT lease_token, started_at, worker_id FROM proto.claims WHERE lease_token = :tok),
ended AS (
    DELETE FROM conveyor.jobs_unfinished j
    WHERE j.id = ANY(:ids::uuid[]) AND j.state = 'pending' AND EXISTS (SELECT 1 FROM c)
    RETURNING j.id, j.queue, j.task, j.args, j.headers, 'success'::text AS state,
        j.priority, j.run_at, j.attempt + 1 AS attempt, j.max_retries, j.retry_backoff_base, j.retry_backoff,
        j.timeout, NULL::timestamptz AS lease_expires_at, NULL::text AS worker_id, 'null'::jsonb AS result,
        j.last_error, j.errors, j.created_at, (SELECT started_at FROM c) AS started_at, now() AS finished_at,
        j.workflow_id, j.workflow_index, j.on_success, j.on_error, j.cancel_requested_at,
        j.unique_key, j.unique_until, (SELECT lease_token FROM c) AS lease_token
),
""" + store_and_count("ended")
(OUT / 'n.sql').write_text(n_claim + n_comp)

# --- H: today's statements plus a claims row per claim statement (the
# schema of this variant has no index naming `state`, so the claim is HOT).
marker = "\nSELECT array_agg(id)::text AS ids, array_agg(lease_token)::text AS toks, count(*) AS n FROM claimed \\gset\n"
head, rest = c0.split(marker)
head += (",\nins AS (INSERT INTO proto.claims SELECT (SELECT max(lease_token) FROM claimed), 'raw', 'bench', "
         "now() + interval '60 seconds', now(), ARRAY(SELECT id FROM claimed) WHERE EXISTS (SELECT 1 FROM claimed))")
(OUT / 'h.sql').write_text(head + marker + rest)
# --- N2: the job row untouched, one narrow lease row per job.
n2_claim = n_claim.replace("""ins AS (INSERT INTO proto.claims (lease_token, worker_id, queue, expires_at, started_at, job_ids)
        SELECT (SELECT t FROM tok), 'raw', 'bench', now() + interval '60 seconds', now(), ARRAY(SELECT job_id FROM taken)),
bodies AS (SELECT""", "bodies AS (SELECT").replace("AND j.state = 'pending')", """AND j.state = 'pending'),
ins AS (INSERT INTO proto.leases SELECT b.id, (SELECT t FROM tok), b.attempt + 1, 'raw', now(), now() + interval '60 seconds' FROM bodies b)""")
n2_comp = """WITH outcome AS (SELECT * FROM unnest(:ids::uuid[], array_fill(:tok::bigint, ARRAY[:n::int])) AS o(id, lease_token)),
fenced AS (
    DELETE FROM proto.leases l USING outcome o
    WHERE l.job_id = ANY(:ids::uuid[]) AND l.job_id = o.id AND l.lease_token = o.lease_token
    RETURNING l.*
),
ended AS (
    DELETE FROM conveyor.jobs_unfinished j
    WHERE j.id = ANY(ARRAY(SELECT job_id FROM fenced)) AND j.state = 'pending'
    RETURNING j.*
),
rows AS (
    SELECT e.id, e.queue, e.task, e.args, e.headers, 'success'::text AS state,
        e.priority, e.run_at, f.attempt, e.max_retries, e.retry_backoff_base, e.retry_backoff,
        e.timeout, NULL::timestamptz AS lease_expires_at, NULL::text AS worker_id, 'null'::jsonb AS result,
        e.last_error, e.errors, e.created_at, f.started_at, now() AS finished_at,
        e.workflow_id, e.workflow_index, e.on_success, e.on_error, e.cancel_requested_at,
        e.unique_key, e.unique_until, f.lease_token
    FROM ended e JOIN fenced f ON f.job_id = e.id
),
""" + store_and_count("rows")
(OUT / 'n2.sql').write_text(n2_claim + n2_comp)
# --- NL: N with the claimed jobs' rows locked (FOR NO KEY UPDATE, as an UPDATE
# would), so that cancel, delete and re-queue keep today's mutual exclusion
# with the claim; NLC: NL whose outcome also counts down the claim's jobs_left.
nl_claim = n_claim.replace("AND j.state = 'pending')", "AND j.state = 'pending' FOR NO KEY UPDATE OF j)")
(OUT / 'nl.sql').write_text(nl_claim + n_comp)
nlc_comp = n_comp.replace("""ended AS (""", """done AS (UPDATE proto.claims SET jobs_left = jobs_left - (SELECT count(*) FROM ended) WHERE lease_token = :tok),
ended AS (""").replace("WITH c AS", "WITH c AS")
# `done` reads `ended`: move it after `ended`.
head, rest = nlc_comp.split("done AS (", 1)
done_cte, rest2 = rest.split("\nended AS (", 1)
ended_cte, tail = rest2.split("\n),\n", 1)
nlc_comp = head + "ended AS (" + ended_cte + "\n),\ndone AS (" + done_cte + "\n" + tail
(OUT / 'nlc.sql').write_text(nl_claim.replace("ins AS (INSERT INTO proto.claims (lease_token, worker_id, queue, expires_at, started_at, job_ids)",
    "ins AS (INSERT INTO proto.claims (lease_token, worker_id, queue, expires_at, started_at, job_ids)").replace(
    "ARRAY(SELECT job_id FROM taken)),", "ARRAY(SELECT job_id FROM taken)),", 1) + nlc_comp)
