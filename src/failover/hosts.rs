//! libpq-style host lists: `postgres://user@h1:5432,h2:5432/db?target_session_attrs=read-write`
//! split into one set of sqlx connect options per host.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

use crate::error::{Error, Result};

/// Which servers of a host list a session may use (libpq's
/// `target_session_attrs`, the values that make sense for a queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attrs {
    /// Any server that accepts the connection (libpq's default).
    Any,
    /// A server that takes writes: not in recovery and not
    /// `default_transaction_read_only` (`read-write`).
    ReadWrite,
    /// A server not in recovery (`primary`).
    Primary,
}

impl Attrs {
    fn parse(value: &str) -> Result<Attrs> {
        match value {
            "any" => Ok(Attrs::Any),
            "read-write" => Ok(Attrs::ReadWrite),
            "primary" => Ok(Attrs::Primary),
            other => Err(Error::Config(format!(
                "target_session_attrs={other}: Conveyor writes, so only any, read-write or primary can serve it"
            ))),
        }
    }

    /// Whether a server in this condition qualifies.
    pub(crate) fn accepts(self, in_recovery: bool, read_only: bool) -> bool {
        match self {
            Attrs::Any => true,
            Attrs::ReadWrite => !in_recovery && !read_only,
            Attrs::Primary => !in_recovery,
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Attrs::Any => "any",
            Attrs::ReadWrite => "read-write",
            Attrs::Primary => "primary",
        }
    }
}

/// A parsed host list.
#[derive(Clone, Debug)]
pub(crate) struct HostList {
    /// `host:port` (for logs) and the options to reach it, in the URL's order.
    pub hosts: Vec<(String, PgConnectOptions)>,
    pub attrs: Attrs,
    /// libpq's `connect_timeout`, if given: how long one host may take to
    /// answer a connection or a check.
    pub connect_timeout: Option<Duration>,
}

impl HostList {
    /// Whether this URL needs following: several hosts, or session
    /// attributes to check. Anything else is a plain sqlx URL.
    pub(crate) fn needs_following(&self) -> bool {
        self.hosts.len() > 1 || self.attrs != Attrs::Any
    }
}

/// Splits `url`'s comma-separated hosts into one URL each (same user,
/// database and parameters) and parses them with sqlx; takes
/// `target_session_attrs` and `connect_timeout` out of the parameters.
pub(crate) fn parse(url: &str) -> Result<HostList> {
    let bad = |why: &str| Error::Config(format!("database URL: {why}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("expected postgres://…"))?;
    if scheme != "postgres" && scheme != "postgresql" {
        return Err(bad("expected postgres:// or postgresql://"));
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let mut attrs = Attrs::Any;
    let mut connect_timeout = None;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "target_session_attrs" => attrs = Attrs::parse(value)?,
            "connect_timeout" => {
                let secs: u64 = value
                    .parse()
                    .map_err(|_| bad("connect_timeout must be whole seconds"))?;
                connect_timeout = (secs > 0).then(|| Duration::from_secs(secs));
            }
            _ => kept.push(pair),
        }
    }
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    let hosts: Vec<&str> = hosts.split(',').collect();
    if hosts.len() > 1 && hosts.iter().any(|host| host.is_empty()) {
        return Err(bad("an empty host in the host list"));
    }
    let hosts = hosts
        .into_iter()
        .map(|host| {
            let one = format!("{scheme}://{userinfo}{host}{path}{query}");
            let options = PgConnectOptions::from_str(&one)?;
            let label = format!("{}:{}", options.get_host(), options.get_port());
            Ok((label, options))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(HostList {
        hosts,
        attrs,
        connect_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_list_becomes_one_set_of_options_per_host() {
        let list = parse(
            "postgres://app:s%40cret@db1:5433,db2,[::1]:6000/queue?sslmode=disable&target_session_attrs=read-write&connect_timeout=3&application_name=w",
        )
        .unwrap();
        let labels: Vec<&str> = list.hosts.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["db1:5433", "db2:5432", "[::1]:6000"]);
        assert_eq!(list.attrs, Attrs::ReadWrite);
        assert_eq!(list.connect_timeout, Some(Duration::from_secs(3)));
        for (_, options) in &list.hosts {
            assert_eq!(options.get_username(), "app");
            assert_eq!(options.get_database(), Some("queue"));
            assert_eq!(options.get_application_name(), Some("w"));
        }
        assert!(list.needs_following());
    }

    #[test]
    fn a_plain_url_needs_no_following_and_bad_attrs_are_refused() {
        let plain = parse("postgres://postgres@127.0.0.1:5432/postgres").unwrap();
        assert_eq!(plain.hosts.len(), 1);
        assert!(!plain.needs_following());
        let one = parse("postgresql://h/db?target_session_attrs=primary").unwrap();
        assert!(one.needs_following());
        for bad in [
            "postgres://a,b/db?target_session_attrs=standby",
            "postgres://a,,b/db",
            "mysql://a/db",
            "postgres://a/db?connect_timeout=soon",
        ] {
            assert!(matches!(parse(bad), Err(Error::Config(_))), "{bad}");
        }
    }

    #[test]
    fn read_write_wants_a_writable_server_primary_only_one_out_of_recovery() {
        assert!(Attrs::ReadWrite.accepts(false, false));
        assert!(!Attrs::ReadWrite.accepts(false, true));
        assert!(!Attrs::ReadWrite.accepts(true, true));
        assert!(Attrs::Primary.accepts(false, true));
        assert!(!Attrs::Primary.accepts(true, true));
        assert!(Attrs::Any.accepts(true, true));
    }
}
