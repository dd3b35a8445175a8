//! A private pg_auto_failover formation on free loopback ports in a temp
//! dir: a monitor, a primary and a synchronous standby, each run by its own
//! `pg_autoctl` keeper (as the `postgres` user when the test runs as root:
//! neither PostgreSQL nor pg_autoctl runs as root).
//!
//! Needs Debian's `postgresql-N-auto-failover` for the newest server under
//! `/usr/lib/postgresql`; installs it with `apt-get` (as root, or through
//! `sudo -n`) when it is missing.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

// apt-get, shared with the PgBouncer and browser tests.
#[path = "../support/apt.rs"]
mod apt;

/// The monitor's settings, tightened from their defaults (a node is
/// considered gone after 20 s, and a dead primary's demotion is awaited
/// for 30 s: about 50 s from kill to a writable standby) so the test fails
/// over in seconds. The production defaults are what docs/scaling.md quotes.
const MONITOR_SETTINGS: [(&str, &str); 6] = [
    ("pgautofailover.health_check_period", "1000"),
    ("pgautofailover.health_check_timeout", "1000"),
    ("pgautofailover.health_check_max_retries", "1"),
    ("pgautofailover.health_check_retry_delay", "500"),
    ("pgautofailover.node_considered_unhealthy_timeout", "4000"),
    ("pgautofailover.primary_demote_timeout", "2000"),
];

pub struct Node {
    pub name: String,
    pub port: u16,
    pgdata: PathBuf,
    keeper: Child,
}

pub struct Formation {
    dir: PathBuf,
    bin: PathBuf,
    /// uid and gid of `postgres` when running as root.
    user: Option<(u32, u32)>,
    monitor: Node,
    pub nodes: Vec<Node>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn id(args: &[&str]) -> Option<u32> {
    let out = Command::new("id").args(args).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The newest server's bin directory that has pg_auto_failover, installing
/// the extension's package when it is missing.
fn server_bin() -> PathBuf {
    let newest = || -> Option<PathBuf> {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|e| {
                let path = e.ok()?.path();
                let version = path.file_name()?.to_str()?.parse().ok()?;
                path.join("bin/initdb").exists().then_some((version, path))
            })
            .collect();
        versions.sort();
        versions.pop().map(|(_, path)| path)
    };
    let dir = newest().expect("PostgreSQL server binaries under /usr/lib/postgresql/N/bin");
    let ready = |dir: &Path| {
        dir.join("lib/pgautofailover.so").exists() && Path::new("/usr/bin/pg_autoctl").exists()
    };
    if !ready(&dir) {
        let version = dir.file_name().and_then(|v| v.to_str()).unwrap_or("15");
        let package = format!("postgresql-{version}-auto-failover");
        eprintln!("pg_auto_failover is missing: installing {package}");
        let installed = apt::install(&[&package]);
        assert!(
            installed && ready(&dir),
            "the failover test needs pg_auto_failover and could not install it: run \
             `apt-get install {package}` as root"
        );
    }
    dir.join("bin")
}

impl Formation {
    /// Starts the monitor, then the primary, then the standby, and returns
    /// once the standby is synchronous.
    pub async fn start() -> Formation {
        let bin = server_bin();
        let dir = std::env::temp_dir().join(format!(
            "conveyor-failover-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let user = (id(&["-u"]) == Some(0)).then(|| {
            let uid = id(&["-u", "postgres"]).expect("a postgres user to run the servers as");
            let gid = id(&["-g", "postgres"]).expect("the postgres user's group");
            (uid, gid)
        });
        if user.is_some() {
            let status = Command::new("chown")
                .arg("postgres:postgres")
                .arg(&dir)
                .status();
            assert!(status.is_ok_and(|s| s.success()), "chown the temp dir");
        }
        let monitor = keeper(&dir, &bin, user, "monitor", &["create", "monitor"]);
        let mut formation = Formation {
            monitor,
            dir,
            bin,
            user,
            nodes: Vec::new(),
        };
        let monitor = formation.monitor_url();
        let mut conn = wait_connect(&monitor, Duration::from_secs(60)).await;
        for (name, value) in MONITOR_SETTINGS {
            let sql = format!("ALTER SYSTEM SET {name} = '{value}'");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.clone()))
                .execute(&mut conn)
                .await
                .expect(&sql);
        }
        sqlx::raw_sql("SELECT pg_reload_conf()")
            .execute(&mut conn)
            .await
            .expect("reload the monitor");
        let node_monitor = format!(
            "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=prefer",
            formation.monitor.port
        );
        for name in ["node1", "node2"] {
            let args = [
                "create",
                "postgres",
                "--monitor",
                &node_monitor,
                "--name",
                name,
            ];
            let node = keeper(&formation.dir, &formation.bin, formation.user, name, &args);
            formation.nodes.push(node);
            // One at a time: the first becomes the primary.
            let wanted = if name == "node1" {
                "single"
            } else {
                "secondary"
            };
            formation
                .wait_state(&mut conn, name, &[wanted], Duration::from_secs(120))
                .await;
        }
        formation
            .wait_state(&mut conn, "node1", &["primary"], Duration::from_secs(60))
            .await;
        formation
    }

    pub fn monitor_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/pg_auto_failover",
            self.monitor.port
        )
    }

    /// The formation's URI as `pg_autoctl show uri` prints it: every node,
    /// `target_session_attrs=read-write`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!(
            "postgres://postgres@{}/postgres?target_session_attrs=read-write&sslmode=prefer",
            hosts.join(",")
        )
    }

    pub fn node_url(&self, node: &Node) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", node.port)
    }

    /// Waits until the monitor says `node` is in one of `states` (reported
    /// and assigned).
    pub async fn wait_state(
        &self,
        monitor: &mut PgConnection,
        node: &str,
        states: &[&str],
        within: Duration,
    ) {
        let deadline = Instant::now() + within;
        let mut last = None;
        loop {
            let row: Option<(String, String)> = sqlx::query_as(
                "SELECT reportedstate::text, goalstate::text FROM pgautofailover.node WHERE nodename = $1",
            )
            .bind(node)
            .fetch_optional(&mut *monitor)
            .await
            .ok()
            .flatten();
            if let Some((reported, goal)) = &row
                && reported == goal
                && states.contains(&reported.as_str())
            {
                return;
            }
            last = row.or(last);
            assert!(
                Instant::now() < deadline,
                "{node} not in {states:?} within {within:?} (last seen {last:?}); logs in {}",
                self.dir.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The node the monitor reports as primary.
    pub async fn primary(&self, monitor: &mut PgConnection) -> Option<usize> {
        let name: Option<String> = sqlx::query_scalar(
            "SELECT nodename FROM pgautofailover.node WHERE reportedstate = 'primary'",
        )
        .fetch_optional(monitor)
        .await
        .ok()
        .flatten();
        self.nodes
            .iter()
            .position(|n| Some(&n.name) == name.as_ref())
    }

    /// The node's machine dies: SIGKILL its keeper (which would restart
    /// PostgreSQL otherwise) and then its postmaster. Returns when both got
    /// the signal.
    pub fn kill_node(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        let mut doomed = descendants(node.keeper.id());
        doomed.push(node.keeper.id());
        let postmaster = postmaster_pid(&node.pgdata).expect("the node's postmaster.pid");
        doomed.retain(|pid| *pid != postmaster);
        signal("KILL", &doomed);
        signal("KILL", &[postmaster]);
        let _ = node.keeper.wait();
    }
}

/// Starts `pg_autoctl <args> --run` for a node named `name`.
fn keeper(dir: &Path, bin: &Path, user: Option<(u32, u32)>, name: &str, args: &[&str]) -> Node {
    let port = free_port();
    let pgdata = dir.join(name);
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
    let mut command = Command::new("/usr/bin/pg_autoctl");
    command
        .args(args)
        .arg("--pgdata")
        .arg(&pgdata)
        .args(["--pgport", &port.to_string()])
        .args(["--hostname", "127.0.0.1", "--listen", "127.0.0.1"])
        .args(["--auth", "trust", "--no-ssl", "--run"])
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("PG_CONFIG", bin.join("pg_config"))
        .env("HOME", dir)
        .env("XDG_CONFIG_HOME", dir.join("config"))
        .env("XDG_DATA_HOME", dir.join("data"))
        .env("XDG_RUNTIME_DIR", dir.join("run"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log file"))
        .stderr(log);
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    let keeper = command.spawn().expect("start pg_autoctl");
    Node {
        name: name.into(),
        port,
        pgdata,
        keeper,
    }
}

/// Connects to `url`, retrying for up to `within`.
pub async fn wait_connect(url: &str, within: Duration) -> PgConnection {
    let deadline = Instant::now() + within;
    loop {
        match PgConnection::connect(url).await {
            Ok(conn) => return conn,
            Err(error) if Instant::now() > deadline => panic!("cannot connect to {url}: {error}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// The postmaster of `pgdata`, if it still runs (a stale pid file's pid
/// may belong to another process by now: it must name this data dir).
fn postmaster_pid(pgdata: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(pgdata.join("postmaster.pid")).ok()?;
    let pid: u32 = text.lines().next()?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let wanted = pgdata.as_os_str().as_encoded_bytes();
    cmdline
        .windows(wanted.len())
        .any(|w| w == wanted)
        .then_some(pid)
}

/// Every process under `pid`, children first.
fn descendants(pid: u32) -> Vec<u32> {
    let path = format!("/proc/{pid}/task/{pid}/children");
    let children: Vec<u32> = std::fs::read_to_string(path)
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    let mut all = Vec::new();
    for child in children {
        all.extend(descendants(child));
        all.push(child);
    }
    all
}

fn signal(name: &str, pids: &[u32]) {
    if pids.is_empty() {
        return;
    }
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .args(pids.iter().map(u32::to_string))
        .stderr(Stdio::null())
        .status();
}

impl Drop for Formation {
    fn drop(&mut self) {
        // pg_autoctl stops its PostgreSQL on SIGTERM; whatever is left after
        // 10 s (and the killed node's backends) is killed.
        let mut keepers: Vec<&mut Node> = self.nodes.iter_mut().collect();
        keepers.push(&mut self.monitor);
        for node in &keepers {
            signal("TERM", &[node.keeper.id()]);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for node in keepers {
            while Instant::now() < deadline && matches!(node.keeper.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let mut left = descendants(node.keeper.id());
            left.extend(postmaster_pid(&node.pgdata));
            signal("KILL", &left);
            let _ = node.keeper.kill();
            let _ = node.keeper.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
