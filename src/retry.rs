//! Retry backoff: machinery's Fibonacci policy.

use std::time::Duration;

/// The `n`-th Fibonacci number, starting `fibonacci(1) = 1, fibonacci(2) = 1`
/// (`fibonacci(0) = 0`); saturates instead of overflowing.
///
/// ```
/// let seq: Vec<u64> = (1..=8).map(conveyor::fibonacci).collect();
/// assert_eq!(seq, [1, 1, 2, 3, 5, 8, 13, 21]);
/// assert_eq!(conveyor::fibonacci(93), 12_200_160_415_121_876_738);
/// assert_eq!(conveyor::fibonacci(u32::MAX), u64::MAX);
/// ```
pub fn fibonacci(n: u32) -> u64 {
    // fibonacci(94) is past u64::MAX: from there on it saturates. (Looping
    // n times for a hand-written attempt of 2^31 would block the runtime.)
    if n > 93 {
        return u64::MAX;
    }
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        (a, b) = (b, a.saturating_add(b));
    }
    a
}

/// Longest delay the default policy will produce (about 31 years would be
/// silly; a week is the cap).
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(7 * 24 * 3600);

/// The default delay before the retry that follows failed attempt number
/// `attempt` (1-based): `fibonacci(attempt) × base`, so 1, 1, 2, 3, 5, 8 … bases,
/// capped at a week.
///
/// ```
/// use std::time::Duration;
/// let base = Duration::from_millis(100);
/// assert_eq!(conveyor::fibonacci_backoff(1, base), Duration::from_millis(100));
/// assert_eq!(conveyor::fibonacci_backoff(4, base), Duration::from_millis(300));
/// ```
pub fn fibonacci_backoff(attempt: u32, base: Duration) -> Duration {
    let factor = fibonacci(attempt.max(1)) as f64;
    let secs = base.as_secs_f64() * factor;
    if secs >= MAX_BACKOFF.as_secs_f64() {
        MAX_BACKOFF
    } else {
        Duration::from_secs_f64(secs)
    }
}
