//! How the CLI fails: one clean line per error on stderr, and the exit codes
//! (0 success, 1 error, 2 usage, 141 stdout closed early).

use std::io::Write;
use std::process::ExitCode;

/// Why a command did not succeed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An error for the user: printed as `error: <message>`, exit code 1.
    Error(String),
    /// The command line asks for something impossible: exit code 2, like
    /// clap's own usage errors.
    Usage(String),
    /// Already told on stderr (e.g. one line per job id): exit code 1.
    Reported,
    /// Whoever read stdout stopped (`| head`): end quietly, with the code a
    /// shell shows for a process killed by SIGPIPE.
    BrokenPipe,
}

impl Failure {
    pub(crate) fn msg(message: impl Into<String>) -> Failure {
        Failure::Error(message.into())
    }

    /// Prints the failure and gives the exit code.
    pub(crate) fn report(self) -> ExitCode {
        match self {
            Failure::Error(message) => {
                warn(&format!("error: {}", one_line(&message)));
                ExitCode::FAILURE
            }
            Failure::Usage(message) => {
                warn(&format!("error: {}", one_line(&message)));
                ExitCode::from(2)
            }
            Failure::Reported => ExitCode::FAILURE,
            Failure::BrokenPipe => ExitCode::from(141),
        }
    }
}

impl From<conveyor::Error> for Failure {
    fn from(error: conveyor::Error) -> Self {
        Failure::Error(describe(&error))
    }
}

impl From<sqlx::Error> for Failure {
    fn from(error: sqlx::Error) -> Self {
        Failure::Error(format!("database: {}", sqlx_message(&error)))
    }
}

impl From<serde_json::Error> for Failure {
    fn from(error: serde_json::Error) -> Self {
        Failure::Error(format!("JSON: {error}"))
    }
}

impl From<std::io::Error> for Failure {
    fn from(error: std::io::Error) -> Self {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            Failure::BrokenPipe
        } else {
            Failure::Error(error.to_string())
        }
    }
}

/// A line on stderr; a closed stderr is ignored (`eprintln!` would panic).
pub(crate) fn warn(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Conveyor's error as one line, PostgreSQL's message without sqlx's
/// decorations.
pub(crate) fn describe(error: &conveyor::Error) -> String {
    match error {
        conveyor::Error::Database(e) => format!("database: {}", sqlx_message(e)),
        conveyor::Error::Unconfirmed { ids, source } => format!(
            "enqueue of {} job(s) unconfirmed: the database could not be reached to tell \
             whether it committed ({}); enqueueing again with the same ids is safe",
            ids.len(),
            describe(source)
        ),
        other => other.to_string(),
    }
}

/// What went wrong, without sqlx's prefixes and without the line number of
/// PostgreSQL's C source that sqlx appends to the server's message.
pub(crate) fn sqlx_message(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(db) => {
            let mut message = db.message().to_string();
            if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                if let Some(detail) = pg.detail() {
                    message.push_str(&format!(" ({detail})"));
                }
                if let Some(hint) = pg.hint() {
                    message.push_str(&format!(" (hint: {hint})"));
                }
            }
            message
        }
        sqlx::Error::Configuration(e) => {
            let text = e.to_string();
            let mut rest = text.as_str();
            while let Some(inner) = rest.strip_prefix("error with configuration: ") {
                rest = inner;
            }
            format!("invalid database URL: {rest}")
        }
        sqlx::Error::Io(e) => e.to_string(),
        sqlx::Error::Tls(e) => format!("TLS: {e}"),
        other => other.to_string(),
    }
}

/// One line: newlines and other control characters become spaces.
fn one_line(text: &str) -> String {
    text.trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A database URL fit to print: the password of `user:password@` and any
/// `password=` parameter (URL query or `key=value` string) become `***`.
pub(crate) fn redact(url: &str) -> String {
    // postgres://user:secret@host → postgres://user:***@host. The last `@`:
    // a password may hold one; at worst more than the password is hidden.
    let mut out = match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &url[scheme + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..scheme + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    };
    // ?password=secret&… and host=… password=secret …
    let mut from = 0;
    while let Some(found) = out[from..].to_ascii_lowercase().find("password=") {
        let start = from + found + "password=".len();
        let value = &out[start..];
        let end = if let Some(quoted) = value.strip_prefix('\'') {
            quoted.find('\'').map_or(value.len(), |q| q + 2)
        } else {
            value
                .find(|c: char| c == '&' || c.is_whitespace())
                .unwrap_or(value.len())
        };
        out.replace_range(start..start + end, "***");
        from = start + 3;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_hidden() {
        for (url, shown) in [
            ("postgres://u:pw@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p@w@h/db", "postgres://u:***@h/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            (
                "postgres://h/db?password=pw&x=1",
                "postgres://h/db?password=***&x=1",
            ),
            ("host=h PASSWORD='a b' user=u", "host=h PASSWORD=*** user=u"),
            ("password=", "password=***"),
            ("password='", "password=***"),
            ("é://ü:ö@ß?password=é", "é://ü:***@ß?password=***"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }
}
