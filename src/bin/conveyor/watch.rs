//! `conveyor stats --watch`: the statistics again every few seconds until
//! interrupted (Ctrl-C ends it with exit code 0; a closed stdout, `| head`,
//! quietly with 141, like any other command).

use std::io::{IsTerminal, Write};
use std::time::Duration;

use conveyor::Client;

use crate::failure::Failure;
use crate::output;

/// Prints the statistics every `every` until Ctrl-C. On a terminal the
/// screen is redrawn; otherwise each refresh is appended (with `--json`,
/// one JSON array per line).
pub(crate) async fn stats(client: &Client, every: Duration, as_json: bool) -> Result<(), Failure> {
    let redraw = !as_json && std::io::stdout().is_terminal();
    let mut interrupt = Interrupt::new()?;
    loop {
        let stats = client.queue_stats().await?;
        let text = if as_json {
            serde_json::to_string(&stats)?
        } else {
            let now = chrono::Utc::now().format("%F %T UTC");
            let header = format!("{now}, every {} (Ctrl-C to stop)", duration(every));
            format!("{header}\n{}\n", output::stats_table(&stats))
        };
        let mut out = std::io::stdout().lock();
        if redraw {
            // Home, clear the screen.
            write!(out, "\x1b[H\x1b[2J")?;
        }
        writeln!(out, "{text}")?;
        out.flush()?;
        drop(out);
        tokio::select! {
            () = interrupt.recv() => return Ok(()),
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// Ctrl-C (SIGINT), listened for from the start: a signal that comes before
/// the first wait still ends the loop cleanly.
struct Interrupt {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupt {
    fn new() -> Result<Interrupt, Failure> {
        Ok(Interrupt {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        self.signal.recv().await;
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// A duration as people write it: `2s`, `1.5s`, `5m`, `1h`, `250ms`.
pub(crate) fn duration(d: Duration) -> String {
    let ms = d.as_millis();
    let units = [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ];
    match units
        .iter()
        .find(|(size, _)| ms >= *size && ms.is_multiple_of(*size))
    {
        Some((size, unit)) => format!("{}{unit}", ms / size),
        None if ms >= 1_000 => format!("{}s", d.as_secs_f64()),
        None => format!("{ms}ms"),
    }
}
