//! Where the CPU went during a timed run: PostgreSQL's processes, the
//! worker processes, and the machine as a whole, from /proc. On one machine
//! every "host" shares the same cores, so these say who saturated them.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Clock ticks per second of /proc's CPU times (`USER_HZ`, 100 on Linux).
const TICKS: f64 = 100.0;

/// (utime + stime, cutime + cstime, ppid) of a process, in ticks.
fn stat(pid: u32) -> Option<(u64, u64, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start after ')'.
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    let num = |i: usize| fields.get(i)?.parse::<u64>().ok();
    let own = num(11)? + num(12)?;
    let children = num(13)? + num(14)?;
    Some((own, children, fields.get(1)?.parse().ok()?))
}

/// CPU time of a server: the postmaster, every child it has reaped
/// (backends that ended) and every child still running.
fn server_ticks(postmaster: u32) -> u64 {
    let Some((own, reaped, _)) = stat(postmaster) else {
        return 0;
    };
    let live: u64 = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(stat)
        .filter(|(_, _, ppid)| *ppid == postmaster)
        .map(|(own, _, _)| own)
        .sum();
    own + reaped + live
}

/// Busy and total ticks of all cores, from the first line of /proc/stat.
fn machine_ticks() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let values: Vec<u64> = text
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = values.iter().take(8).sum();
    // idle and iowait are not busy.
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// A reading to subtract a later one from.
pub struct CpuMark {
    at: Instant,
    server: u64,
    workers: u64,
    machine: (u64, u64),
}

impl CpuMark {
    /// Reads the server (`postmaster`'s tree), the `workers` and the machine now.
    pub fn now(postmaster: Option<u32>, workers: &[u32]) -> CpuMark {
        CpuMark {
            at: Instant::now(),
            server: postmaster.map_or(0, server_ticks),
            workers: worker_ticks(workers),
            machine: machine_ticks(),
        }
    }

    /// Percent of one core used by the server and by the workers since
    /// this mark, and percent of the whole machine busy.
    pub fn since(&self, postmaster: Option<u32>, workers: &[u32]) -> Value {
        let later = CpuMark::now(postmaster, workers);
        let secs = later
            .at
            .duration_since(self.at)
            .max(Duration::from_millis(1));
        let pct = |ticks: u64| 100.0 * ticks as f64 / TICKS / secs.as_secs_f64();
        let (busy, total) = (
            later.machine.0 - self.machine.0,
            later.machine.1 - self.machine.1,
        );
        json!({
            "server_cpu_pct_of_core": pct(later.server.saturating_sub(self.server)),
            "workers_cpu_pct_of_core": pct(later.workers.saturating_sub(self.workers)),
            "machine_busy_pct": 100.0 * busy as f64 / total.max(1) as f64,
            "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        })
    }
}

fn worker_ticks(workers: &[u32]) -> u64 {
    workers.iter().filter_map(|p| stat(*p)).map(|s| s.0).sum()
}
