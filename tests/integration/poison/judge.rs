//! What "defined" means for a row, and the probes that watch the run.

use super::*;

// ---------------------------------------------------------------------------
// What "defined" means.

/// A row as the classifier reads it, by SQL (some rows cannot be decoded
/// into a `Job`, and must still be judged).
pub(super) struct Seen {
    pub(super) state: String,
    pub(super) queue: String,
    pub(super) task: String,
    /// `run_at > now()`.
    pub(super) ahead: bool,
    pub(super) last_error: String,
}

/// The class of a row that is in a defined state, or `Err` with why not
/// (yet). `inserted` is the state the row had when inserted, for rows the
/// test wrote; `None` for rows spawned by follow-ups.
pub(super) fn classify(
    seen: Option<&Seen>,
    written: Option<Written<'_>>,
) -> Result<String, String> {
    let inserted = written.map(|w| w.state);
    let inserted_final = inserted.is_some_and(|s| matches!(s, "success" | "failure" | "cancelled"));
    let Some(seen) = seen else {
        // Only the pruner deletes, and only jobs that finished longer ago
        // than their retention.
        return if written.is_some_and(|w| w.prunable) {
            Ok("gone: pruned (written finished, long ago)".to_string())
        } else {
            Err("vanished: deleted, yet not finished long ago".to_string())
        };
    };
    let served = SERVED_QUEUES.contains(&seen.queue.as_str());
    let registered = REGISTERED_TASKS.contains(&seen.task.as_str());
    match seen.state.as_str() {
        final_state @ ("success" | "failure" | "cancelled") if inserted_final => {
            if inserted == Some(final_state) {
                Ok(format!(
                    "{final_state}: as written (final rows are left alone)"
                ))
            } else {
                Err(format!(
                    "a row written {} is now {final_state}",
                    inserted.unwrap_or_default()
                ))
            }
        }
        "success" => Ok("success".to_string()),
        "cancelled" => Ok("cancelled".to_string()),
        "failure" if seen.last_error.is_empty() => Err("failure without a last_error".to_string()),
        "failure" => Ok(format!("failure: {}", error_kind(&seen.last_error))),
        "scheduled" | "retry" if !served => Ok(format!(
            "waiting: {}, on a queue no worker serves",
            seen.state
        )),
        "scheduled" | "retry" if seen.ahead => Ok(format!("waiting: {}, run_at ahead", seen.state)),
        "scheduled" | "retry" => Err(format!("{} and due, not yet promoted", seen.state)),
        "pending" if !served => Ok("waiting: pending, on a queue no worker serves".to_string()),
        "pending" if !registered => Ok("waiting: pending, of a task no worker has".to_string()),
        // The claim checks run_at itself (claim.sql): a hand-written
        // pending row waits for it, as README's "Never before run_at" says.
        "pending" if seen.ahead => Ok("waiting: pending, run_at ahead".to_string()),
        "pending" => Err("pending and runnable, not yet claimed".to_string()),
        "started" => Err("started".to_string()),
        other => Err(format!("unknown state {other:?}")),
    }
}

/// The reason of a failure, in a few words, for the counts.
pub(super) fn error_kind(error: &str) -> &'static str {
    const KINDS: &[(&str, &str)] = &[
        ("poison says no", "the handler said fail"),
        (
            "poison asks to retry",
            "the handler asked to retry, none left",
        ),
        ("lease expired", "lease expired (rescued)"),
        ("conveyor cannot decode", "row cannot be decoded"),
        (
            "follow-up work could not be enqueued",
            "follow-up could not be enqueued",
        ),
        ("timed out", "timed out"),
        ("conveyor could not record", "outcome could not be recorded"),
    ];
    KINDS
        .iter()
        .find(|(needle, _)| error.contains(needle))
        .map_or("other reason", |(_, kind)| kind)
}

/// Every row's state, by id.
pub(super) async fn snapshot(pool: &PgPool) -> HashMap<Uuid, Seen> {
    let rows = sqlx::query(
        "SELECT id, state, queue, task, run_at > now() AS ahead,
                coalesce(last_error, '') AS last_error
         FROM conveyor.jobs",
    )
    .fetch_all(pool)
    .await
    .expect("read the jobs");
    rows.into_iter()
        .map(|row| {
            (
                row.get("id"),
                Seen {
                    state: row.get("state"),
                    queue: row.get("queue"),
                    task: row.get("task"),
                    ahead: row.get("ahead"),
                    last_error: row.get("last_error"),
                },
            )
        })
        .collect()
}

/// The judgement of every row but the normal jobs: poison rows the
/// database accepted (by id, with their inserted state) and whatever their
/// follow-ups spawned.
pub(super) fn judge(
    seen: &HashMap<Uuid, Seen>,
    accepted: &BTreeMap<Uuid, (String, bool)>,
    normal: &HashSet<Uuid>,
) -> BTreeMap<Uuid, Result<String, String>> {
    let mut verdicts = BTreeMap::new();
    for (id, (state, prunable)) in accepted {
        let written = Written {
            state,
            prunable: *prunable,
        };
        verdicts.insert(*id, classify(seen.get(id), Some(written)));
    }
    for (id, row) in seen {
        if !accepted.contains_key(id) && !normal.contains(id) {
            let verdict = classify(Some(row), None).map(|class| format!("follow-up job: {class}"));
            verdicts.insert(*id, verdict);
        }
    }
    verdicts
}

/// CPU time the calling thread has run so far (Linux's
/// `/proc/thread-self/schedstat`), if known.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Notices when the runtime (which the workers share with the test) is
/// blocked by work on it: between two of its 20 ms ticks, its thread ran
/// for longer than [`STALL`]. Counted in the thread's CPU time, not by the
/// clock: a tick that comes late only because a loaded machine gave the
/// thread no CPU is not a stall. (By the clock where the thread's CPU time
/// cannot be read.)
pub(super) struct StallProbe {
    pub(super) task: tokio::task::JoinHandle<()>,
    /// When each tick after a stall was due, and how long the thread ran
    /// before it came.
    pub(super) stalls: Arc<Mutex<Vec<(Instant, Duration)>>>,
    pub(super) longest: Arc<Mutex<Duration>>,
}

impl StallProbe {
    pub(super) fn start() -> StallProbe {
        let stalls: Arc<Mutex<Vec<(Instant, Duration)>>> = Arc::default();
        let longest: Arc<Mutex<Duration>> = Arc::default();
        let (s, l) = (stalls.clone(), longest.clone());
        let task = tokio::spawn(async move {
            let (mut last, mut last_cpu) = (Instant::now(), thread_cpu());
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let (now, cpu) = (Instant::now(), thread_cpu());
                let busy = match (cpu, last_cpu) {
                    (Some(cpu), Some(last_cpu)) => cpu.saturating_sub(last_cpu),
                    _ => now - last,
                };
                if busy > STALL {
                    s.lock().unwrap().push((last, busy));
                }
                let mut longest = l.lock().unwrap();
                *longest = (*longest).max(busy);
                (last, last_cpu) = (now, cpu);
            }
        });
        StallProbe {
            task,
            stalls,
            longest,
        }
    }

    /// The stalls seen, and the longest the thread ran between two ticks.
    pub(super) fn stop(self) -> (Vec<(Instant, Duration)>, Duration) {
        self.task.abort();
        let stalls = std::mem::take(&mut *self.stalls.lock().unwrap());
        let longest = *self.longest.lock().unwrap();
        (stalls, longest)
    }
}

/// Runs `f` as a task of its own: `Err` with the panic message if it panicked.
pub(super) async fn no_panic<T: Send + 'static>(
    f: impl Future<Output = T> + Send + 'static,
) -> Result<T, String> {
    match tokio::spawn(f).await {
        Ok(value) => Ok(value),
        Err(error) if error.is_panic() => {
            let payload = error.into_panic();
            Err(payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic".to_string()))
        }
        Err(error) => Err(format!("task failed: {error}")),
    }
}

/// Runs the `conveyor` command; `Err` with its stderr if it panicked.
pub(super) fn cli(url: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(env!("CARGO_BIN_EXE_conveyor"))
        .arg("--database-url")
        .arg(url)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .output()
        .expect("run conveyor");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(101) || stderr.contains("panicked") {
        // "thread 'main' (pid) panicked at <location>:" then the message.
        let mut lines = stderr.lines().skip_while(|l| !l.contains("panicked at "));
        let at = lines.next().and_then(|l| l.split("panicked at ").nth(1));
        let message = lines.find(|l| !l.trim().is_empty()).unwrap_or_default();
        Err(short(
            &format!("{} {message}", at.unwrap_or("(no location)")),
            400,
        ))
    } else {
        Ok(())
    }
}

pub(super) fn bump(counts: &mut BTreeMap<String, usize>, class: impl Into<String>) {
    *counts.entry(class.into()).or_default() += 1;
}

/// Why the database refused a row, for the counts; panics on an error
/// that is not a refusal of the data (a bug of the generator, or worse).
pub(super) fn refusal(error: &sqlx::Error, sql: &str) -> String {
    let Some(db) = error.as_database_error() else {
        panic!("inserting a poison row failed other than by a refusal: {error}\n{sql}");
    };
    let code = db.code().unwrap_or_default().to_string();
    // 22: data exceptions (range, syntax of a value, \u0000 in jsonb);
    // 23: integrity (CHECK, NOT NULL, unique); 54000: chr(0).
    assert!(
        code.starts_with("22") || code.starts_with("23") || code == "54000",
        "poison row refused with an unexpected error {code}: {}\n{}",
        db.message(),
        short(sql, 2_000)
    );
    match db.constraint() {
        Some(constraint) => format!("refused: {code} {constraint}"),
        None => {
            let message = db.message();
            let head: String = message.chars().take(48).collect();
            format!("refused: {code} {head}")
        }
    }
}
