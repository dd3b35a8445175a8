//! Whole poison rows: what each sets, what the handler does with it, and
//! fixed edge rows every run inserts.

use super::*;

/// What each insert returns: the state written, and whether the row is
/// finished since longer than the default retention (the pruner may
/// delete it: 7 days, failures 30).
pub(super) const RETURNING: &str = "RETURNING state, coalesce(finished_at < now() - CASE state \
     WHEN 'failure' THEN interval '30 days' ELSE interval '7 days' END, false) AS prunable";

/// How a row was written: its state, and whether the pruner may delete it.
#[derive(Clone, Copy)]
pub(super) struct Written<'a> {
    pub(super) state: &'a str,
    pub(super) prunable: bool,
}

/// A row's columns, in insert order; the last value set for a name wins.
#[derive(Default)]
pub(super) struct Columns(Vec<(&'static str, String)>);

impl Columns {
    pub(super) fn set(&mut self, name: &'static str, value: String) {
        self.0.retain(|(n, _)| *n != name);
        self.0.push((name, value));
    }

    pub(super) fn sql(&self) -> String {
        let names: Vec<&str> = self.0.iter().map(|(n, _)| *n).collect();
        let values: Vec<&str> = self.0.iter().map(|(_, v)| v.as_str()).collect();
        format!(
            "INSERT INTO conveyor.jobs ({}) VALUES ({})",
            names.join(", "),
            values.join(", ")
        )
    }
}

/// What the `poison` handler does with a row's job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Behaviour {
    Succeed,
    /// `TaskError::fail`: no retry.
    Fail,
    /// `TaskError::retry` on its first run (so the row meets its own retry
    /// settings: backoff base, max_retries, attempt), then success.
    RetryOnce,
}

/// The behaviour of a job the test did not write (a spawned follow-up).
pub(super) fn behaviour_of(id: Uuid) -> Behaviour {
    match id.as_u128() % 8 {
        0 | 1 => Behaviour::Fail,
        2 => Behaviour::RetryOnce,
        _ => Behaviour::Succeed,
    }
}

/// One generated row.
pub(super) struct Poison {
    pub(super) id: Uuid,
    pub(super) sql: String,
    pub(super) behaviour: Behaviour,
}

impl Poison {
    /// The SQL, shortened for a report (the seed replays it whole).
    pub(super) fn short_sql(&self) -> String {
        short(&self.sql, 700)
    }
}

pub(super) fn short(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// A row: mostly values the database takes (hostile but in range), and in
/// about a quarter of the rows one value it must refuse.
pub(super) fn generate(rng: &mut Rng) -> Poison {
    let id = rng.uuid();
    let mut c = Columns::default();
    c.set("id", lit(&id.to_string()));

    let task = match rng.below(100) {
        0..80 => "poison".to_string(),
        80..85 => "normal".to_string(),
        85..90 => rng
            .pick(&[
                "unregistered",
                "Poison",
                " poison",
                "poison\n",
                "poison\u{200B}",
            ])
            .to_string(),
        _ => {
            let t: String = text(rng).chars().take(255).collect();
            if t.is_empty() { "😀".to_string() } else { t }
        }
    };
    c.set("task", lit(&task));
    if rng.percent(85) {
        let queue = match rng.below(100) {
            0..72 => "default".to_string(),
            72..86 => "other".to_string(),
            86..92 => rng
                .pick(&["nobody", "DEFAULT", "default ", "other\t"])
                .to_string(),
            _ => {
                let q: String = text(rng).chars().take(128).collect();
                if q.is_empty() { "🚚".to_string() } else { q }
            }
        };
        c.set("queue", lit(&queue));
    }
    let state = rng.weighted(&[
        (40, "pending"),
        (12, "scheduled"),
        (12, "retry"),
        (16, "started"),
        (6, "success"),
        (7, "failure"),
        (4, "cancelled"),
        (3, ""),
    ]);
    if !state.is_empty() {
        c.set("state", lit(state));
    }
    let extremes_i32 = [i32::MIN, i32::MAX, 0, -1, 1];
    if rng.percent(70) {
        c.set("args", jsonb(&json_value(rng, 4)));
    }
    if rng.percent(40) {
        c.set("headers", jsonb(&json_object(rng)));
    }
    if rng.percent(50) {
        let p = if rng.percent(60) {
            rng.pick(&extremes_i32)
        } else {
            rng.i32()
        };
        c.set("priority", p.to_string());
    }
    let counts = |rng: &mut Rng| -> String {
        match rng.below(6) {
            0 => "0".to_string(),
            1 => "1".to_string(),
            2 => (i32::MAX - 1).to_string(),
            3 => i32::MAX.to_string(),
            4 => rng.below(30).to_string(),
            _ => (rng.next() % (i32::MAX as u64)).to_string(),
        }
    };
    if rng.percent(50) {
        c.set("attempt", counts(rng));
    }
    if rng.percent(50) {
        c.set("max_retries", counts(rng));
    }
    if rng.percent(60) {
        c.set("run_at", time_ok(rng));
    }
    for (column, p) in [
        ("created_at", 30),
        ("started_at", 20),
        ("cancel_requested_at", 10),
    ] {
        if rng.percent(p) {
            c.set(column, time_ok(rng));
        }
    }
    // Only ever tested for NULL, so not constrained: any time is accepted.
    if rng.percent(10) {
        c.set("cancel_requested_at", time_unread(rng));
    }
    match state {
        "success" | "failure" | "cancelled" => c.set("finished_at", time_ok(rng)),
        "started" => {
            // A lease that has lapsed, or lapses within 1.5 s: the rescuer
            // must take it (nobody renews it).
            let lease = match rng.below(4) {
                0 => "'0001-01-01 00:00:00+00'".to_string(),
                1 => format!("now() + interval '{} milliseconds'", rng.below(1_500)),
                2 => "now()".to_string(),
                _ => format!("now() - interval '{} seconds'", 1 + rng.below(100_000_000)),
            };
            c.set("lease_expires_at", lease);
        }
        _ => {}
    }
    let tokens = [1, 2, 42, 0, -1, i64::MAX, i64::MIN];
    if state == "started" || rng.percent(15) {
        let token = if rng.percent(70) {
            rng.pick(&tokens)
        } else {
            rng.next() as i64
        };
        c.set("lease_token", token.to_string());
    }
    if rng.percent(if state == "started" { 80 } else { 20 }) {
        let worker = if rng.percent(50) {
            rng.pick(&WORKER_IDS).to_string()
        } else {
            text(rng)
        };
        c.set("worker_id", lit(&worker));
    }
    if rng.percent(40) {
        c.set("retry_backoff_base", interval_ok(rng));
    }
    if rng.percent(20) {
        let backoff = if rng.percent(30) {
            format!(
                "interval {}",
                lit(rng.pick(&["-1 second", "-178000000 years", "-1 microsecond"]))
            )
        } else {
            interval_ok(rng)
        };
        c.set("retry_backoff", backoff);
    }
    if rng.percent(30) {
        let timeout = interval_ok(rng);
        if !timeout.ends_with("'0'") && !timeout.ends_with("'0 milliseconds'") {
            c.set("timeout", timeout);
        }
    }
    if rng.percent(20) {
        c.set("result", jsonb(&json_value(rng, 4)));
    }
    if rng.percent(25) {
        c.set("last_error", lit(&text(rng)));
    }
    if rng.percent(30) {
        c.set("errors", jsonb(&json_errors(rng)));
    }
    if rng.percent(25) {
        c.set("on_success", jsonb(&follow_ups(rng)));
    }
    if rng.percent(25) {
        c.set("on_error", jsonb(&follow_ups(rng)));
    }
    if rng.percent(15) {
        c.set("workflow_id", lit(&rng.uuid().to_string()));
    }
    if rng.percent(15) {
        let index = if rng.percent(70) {
            rng.pick(&extremes_i32)
        } else {
            rng.i32()
        };
        c.set("workflow_index", index.to_string());
    }
    if rng.percent(15) {
        // A few shared keys: two unfinished rows with one key collide.
        let key = if rng.percent(70) {
            rng.pick(&["poison-key-1", "poison-key-2", "poison-key-3"])
                .to_string()
        } else {
            text(rng)
        };
        c.set("unique_key", lit(&key));
        if rng.percent(50) {
            c.set("unique_until", time_ok(rng));
        } else if rng.percent(20) {
            c.set("unique_until", time_unread(rng));
        }
    }

    if rng.percent(25) {
        refuse_one(rng, &mut c, state);
    }
    let behaviour = match rng.below(20) {
        0..5 => Behaviour::Fail,
        5..8 => Behaviour::RetryOnce,
        _ => Behaviour::Succeed,
    };
    Poison {
        id,
        sql: c.sql(),
        behaviour,
    }
}

/// Rows every run inserts, whatever the seed: edges the generator reaches
/// only now and then. Each is a `poison` job on `default` unless it says
/// otherwise.
pub(super) fn edge_rows(rng: &mut Rng) -> Vec<Poison> {
    use Behaviour::{Fail, RetryOnce, Succeed};
    let wf = rng.uuid();
    let (member, callback) = (rng.uuid(), rng.uuid());
    let self_parent = format!(
        r#"[{{"kind":"workflow","id":"{wf}","workflow":"chord","parent_id":"{wf}","total":1,"start":[{{"kind":"job","id":"{member}","task":"poison","workflow_id":"{wf}","workflow_index":0}}],"on_complete":{{"kind":"job","id":"{callback}","task":"poison","pass_result":true}}}}]"#
    );
    let mut nested = format!(r#"{{"kind":"job","id":"{}","task":"poison"}}"#, rng.uuid());
    for _ in 0..300 {
        let w = rng.uuid();
        nested = format!(
            r#"{{"kind":"workflow","id":"{w}","workflow":"chain","total":1,"start":[{nested}]}}"#
        );
    }
    let started =
        |lease: &str, token: i64, rest: &str| format!("'started', {lease}, {token}{rest}");
    // (columns, their values, what the handler does)
    let edges: Vec<(&str, String, Behaviour)> = vec![
        // The claim saturates the attempt; a retry then computes its backoff.
        (
            "attempt, max_retries",
            "2147483646, 2147483647".into(),
            RetryOnce,
        ),
        ("attempt, max_retries", "2147483647, 0".into(), Succeed),
        (
            "attempt, max_retries",
            "2147483647, 2147483647".into(),
            Fail,
        ),
        // Rows a worker cannot decode.
        ("args", jsonb(&deep(rng, 400, "1")), Succeed),
        ("args", jsonb(r#"{"n":1e400}"#), Succeed),
        ("result", jsonb(&deep(rng, 129, "null")), Succeed),
        // Hand-written claims whose leases lapsed (or lapse in a second).
        (
            "state, lease_expires_at, lease_token, attempt, max_retries",
            started("'0001-01-01 00:00:00+00'", i64::MAX, ", 1, 0"),
            Succeed,
        ),
        (
            "state, lease_expires_at, lease_token, cancel_requested_at, worker_id",
            started(
                "now() - interval '1 second'",
                1,
                ", now(), 'poison-worker-a'",
            ),
            Succeed,
        ),
        (
            "state, lease_expires_at, lease_token, worker_id",
            started(
                "now() + interval '1 second'",
                i64::MIN,
                ", 'poison-worker-b'",
            ),
            Succeed,
        ),
        // Retry settings at their limits.
        ("retry_backoff_base", "'178000000 years'".into(), RetryOnce),
        (
            "retry_backoff_base, max_retries, timeout",
            "'0', 2147483647, '1 microsecond'".into(),
            Succeed,
        ),
        ("timeout", "'178000000 years'".into(), Succeed),
        ("retry_backoff", "'-178000000 years'".into(), Succeed),
        // Follow-ups that cannot be enqueued, and odd ones that can.
        (
            "on_success",
            jsonb(r#"[{"kind":"job","task":""}]"#),
            Succeed,
        ),
        ("on_success", jsonb(r#"[{"kind":"workflow"}]"#), Succeed),
        ("on_success", jsonb("42"), Succeed),
        ("on_error", jsonb("[42]"), Fail),
        ("on_success", jsonb(&self_parent), Succeed),
        ("on_success", jsonb(&format!("[{nested}]")), Succeed),
        (
            "workflow_id, workflow_index",
            format!("'{}', {}", rng.uuid(), i32::MIN),
            Fail,
        ),
        // Times and priorities at their limits.
        (
            "state, run_at",
            "'scheduled', '9999-12-31 23:59:59.999999+00'".into(),
            Succeed,
        ),
        (
            "state, run_at, queue",
            "'retry', now() - interval '1 day', 'other'".into(),
            Succeed,
        ),
        (
            "run_at, priority",
            format!("'0001-01-01 00:00:00+00', {}", i32::MIN),
            Succeed,
        ),
        ("run_at", "now() + interval '1 day'".into(), Succeed),
        (
            "state, finished_at",
            "'success', '0001-01-01 00:00:00+00'".into(),
            Succeed,
        ),
        (
            "priority, headers",
            format!(
                "{}, {}",
                i32::MAX,
                jsonb(r#"{"traceparent":"00-😀😀😀-😀-01","tracestate":[1]}"#)
            ),
            Succeed,
        ),
        (
            "errors",
            jsonb(
                r#"[1,"x",null,{"attempt":"one"},{"at":"294276-01-01T00:00:00Z","attempt":99999999999}]"#,
            ),
            Fail,
        ),
        // Waiting for a worker that never comes.
        ("task", "'unregistered'".into(), Succeed),
        ("queue", "'nobody'".into(), Succeed),
    ];
    edges
        .into_iter()
        .map(|(columns, values, behaviour)| {
            let id = rng.uuid();
            let (columns, values) = if columns.split(", ").any(|c| c == "task") {
                (columns.to_string(), values)
            } else {
                (format!("task, {columns}"), format!("'poison', {values}"))
            };
            Poison {
                id,
                sql: format!("INSERT INTO conveyor.jobs (id, {columns}) VALUES ('{id}', {values})"),
                behaviour,
            }
        })
        .collect()
}

/// Sets one value the database must refuse (a CHECK, NOT NULL, a range, a
/// syntax it does not take).
pub(super) fn refuse_one(rng: &mut Rng, c: &mut Columns, state: &str) {
    let time_columns = ["run_at", "created_at", "started_at"];
    match rng.below(24) {
        0 => c.set("task", "NULL".to_string()),
        1 => c.set("task", "''".to_string()),
        2 => c.set("task", lit(&"t".repeat(256))),
        3 => c.set("queue", "''".to_string()),
        4 => c.set("queue", lit(&"q".repeat(129))),
        5 => c.set("attempt", "-1".to_string()),
        6 => c.set("max_retries", i32::MIN.to_string()),
        7 => c.set("priority", "2147483648".to_string()),
        8 | 9 => {
            let column = rng.pick(&time_columns);
            c.set(column, time_bad(rng));
        }
        10 => c.set(
            "retry_backoff_base",
            format!(
                "interval {}",
                lit(rng.pick(&["-1 second", "-178000000 years", "178000001 years"]))
            ),
        ),
        11 => c.set(
            "timeout",
            format!(
                "interval {}",
                lit(rng.pick(&["0", "-1 second", "-1 microsecond"]))
            ),
        ),
        12 => c.set("args", jsonb(r#"{"nul":"a\u0000b"}"#)),
        13 => c.set(
            "args",
            jsonb(rng.pick(&["{", "[1,]", "{'a':1}", "NaN", "\"\u{1}\""])),
        ),
        14 => c.set("headers", jsonb(rng.pick(&["[]", "\"h\"", "42", "null"]))),
        15 => c.set("errors", jsonb(rng.pick(&["{}", "\"e\"", "null", "7"]))),
        16 => {
            if state == "started" {
                c.0.retain(|(n, _)| *n != "lease_expires_at");
            } else {
                c.set(
                    "lease_expires_at",
                    "now() - interval '1 minute'".to_string(),
                );
            }
        }
        17 => {
            if matches!(state, "success" | "failure" | "cancelled") {
                c.0.retain(|(n, _)| *n != "finished_at");
            } else {
                c.set("finished_at", "now()".to_string());
            }
        }
        18 => c.set("args", "NULL".to_string()),
        19 => c.set("last_error", "'a' || chr(0)".to_string()),
        20 => c.set(
            "state",
            lit(rng.pick(&["PENDING", "done", "", "running", "pending "])),
        ),
        21 => c.set("result", jsonb(r#""\udc00""#)),
        22 => c.set("lease_token", "9223372036854775808".to_string()),
        _ => c.set(
            rng.pick(&["retry_backoff_base", "timeout", "retry_backoff"]),
            "interval '1 fortnight'".to_string(),
        ),
    }
}
