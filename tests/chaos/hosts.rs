//! Worker "hosts" in network namespaces, from Rust: a thin handle on
//! `scripts/hosts.sh` (the one place that creates and removes them). Used by
//! the chaos test (a host whose network is cut) and by the benchmark (C on
//! 1, 2 and 3 hosts), which includes this file.

use std::process::Command;
use std::time::Duration;

/// A set of hosts (`cv<set>-1` …), removed when dropped. The script also
/// removes it on its next `up` if this process died without dropping it.
pub struct Hosts {
    set: String,
    /// This machine's address on the hosts' bridge: where a server they
    /// reach must listen.
    pub server: String,
    /// The hosts' network (`10.77.X.0/24`), for `pg_hba.conf`.
    pub network: String,
    /// The namespaces, host 1 first.
    pub namespaces: Vec<String>,
}

fn script() -> String {
    format!("{}/scripts/hosts.sh", env!("CARGO_MANIFEST_DIR"))
}

/// Why hosts cannot be made here, if they cannot: namespaces need root
/// (an effective uid of 0) and iproute2's `ip`, which this installs with
/// `apt-get` when it is missing. Whether the kernel then lets this process
/// make namespaces and links, only [`Hosts::up`] finds out.
pub fn unavailable() -> Option<String> {
    if !is_root() {
        return Some("network namespaces need root (this process's effective uid is not 0)".into());
    }
    let has_ip = || Command::new("ip").arg("-V").output().is_ok();
    if !has_ip() {
        eprintln!("iproute2 is missing: installing it");
        let apt = |args: &[&str]| {
            Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdin(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let installed = apt(&["update", "-q"]) && apt(&["install", "-y", "-q", "iproute2"]);
        if !(installed && has_ip()) {
            return Some(
                "network namespaces need iproute2 (`ip`), which is missing and could not be \
                 installed: run `apt-get install iproute2` as root"
                    .into(),
            );
        }
    }
    None
}

/// Whether this process's effective uid is 0 (from `/proc/self/status`,
/// so that it does not depend on `PATH`).
fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0")
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(script())
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", script()))?;
    if !out.status.success() {
        return Err(format!(
            "hosts.sh {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Hosts {
    /// Creates `count` hosts in set `set` (1-9 of `[a-z0-9]`; pick one
    /// unique to this run, such as `t<pid>`), owned by this process.
    pub fn up(count: usize, set: &str) -> Result<Hosts, String> {
        let pid = std::process::id().to_string();
        let out = run(&["up", &count.to_string(), set, &pid])?;
        let value = |key: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                .map(|v| v.trim_matches('\'').to_string())
                .ok_or_else(|| format!("hosts.sh printed no {key}: {out}"))
        };
        Ok(Hosts {
            set: set.to_string(),
            server: value("HOSTS_SERVER")?,
            network: value("HOSTS_NETWORK")?,
            namespaces: value("HOSTS_NAMESPACES")?
                .split_whitespace()
                .map(str::to_string)
                .collect(),
        })
    }

    /// A command that runs `program` on host `i` (0-based).
    pub fn command(&self, i: usize, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespaces[i]])
            .arg(program);
        command
    }

    /// Cuts host `i` (0-based) off: its link goes down, packets are dropped
    /// silently both ways (no RST, no ICMP), connections stay open.
    pub fn cut(&self, i: usize) -> Result<(), String> {
        run(&["cut", &self.set, &(i + 1).to_string()]).map(drop)
    }

    /// Brings host `i`'s link back.
    pub fn heal(&self, i: usize) -> Result<(), String> {
        run(&["heal", &self.set, &(i + 1).to_string()]).map(drop)
    }

    /// Whether a TCP connection from host `i` (0-based) to `address:port`
    /// completes within `within`: with bash's `/dev/tcp`, run in the host's
    /// namespace.
    pub fn reaches(&self, i: usize, address: &str, port: u16, within: Duration) -> bool {
        self.command(i, "timeout")
            .arg(format!("{}s", within.as_secs_f64()))
            .args(["bash", "-c", &format!("exec 3<>/dev/tcp/{address}/{port}")])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Sets a sysctl inside host `i` (`net.ipv4.tcp_retries2`, say: each
    /// namespace has its own TCP settings).
    pub fn sysctl(&self, i: usize, key: &str, value: &str) -> Result<(), String> {
        let out = self
            .command(i, "sysctl")
            .args(["-q", "-w", &format!("{key}={value}")])
            .output()
            .map_err(|e| format!("sysctl: {e}"))?;
        out.status
            .success()
            .then_some(())
            .ok_or_else(|| format!("sysctl {key}: {}", String::from_utf8_lossy(&out.stderr)))
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = run(&["down", &self.set]);
    }
}
