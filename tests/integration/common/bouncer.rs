//! One PgBouncer (Debian's `pgbouncer`, 1.18) per test binary, in
//! transaction mode on a private port, for the `pgbouncer` test target: it
//! runs the integration suite again with every queue connection through it.
//!
//! Every database of the shared server is reached through it (a `*`
//! wildcard), each with a pool of [`SERVER_CONNECTIONS`] server
//! connections, few enough that clients really share them. It is started
//! by the first test that needs it and stops when the test binary exits
//! (a shell waits on the binary's end of a pipe, then kills it and removes
//! its directory, log included). When
//! `pgbouncer` is missing, it is installed with `apt-get` (as root, or
//! through `sudo -n`), as the browser test installs Chromium.

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

#[allow(dead_code)] // each includer uses part of it
#[path = "../../support/apt.rs"]
pub mod apt;
use std::time::{Duration, Instant};

/// Server connections per database (PgBouncer's `default_pool_size`).
pub const SERVER_CONNECTIONS: u32 = 3;

/// The running PgBouncer: its port, and the shell that stops it when this
/// process ends (its stdin is our end of a pipe).
pub struct Bouncer {
    port: u16,
    _watch: Child,
}

fn binary() -> Option<PathBuf> {
    ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Where a PgBouncer listens and what it pools (the benchmark starts its
/// own with these; the tests share one made by [`port`]).
pub struct Options {
    /// Addresses to listen on, besides 127.0.0.1.
    pub listen: Vec<String>,
    /// The server: host, port.
    pub server: (String, u16),
    /// Server connections per database (`default_pool_size`).
    pub pool_size: u32,
}

fn config(dir: &Path, port: u16, options: &Options) -> String {
    let (host, server_port) = &options.server;
    let listen = std::iter::once("127.0.0.1")
        .chain(options.listen.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(",");
    format!(
        "[databases]\n\
         * = host={host} port={server_port} user=postgres\n\
         [pgbouncer]\n\
         listen_addr = {listen}\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = any\n\
         pool_mode = transaction\n\
         default_pool_size = {pool_size}\n\
         max_client_conn = 2000\n\
         ignore_startup_parameters = extra_float_digits\n\
         logfile = {log}\n\
         pidfile = {pid}\n",
        pool_size = options.pool_size,
        log = dir.join("pgbouncer.log").display(),
        pid = dir.join("pgbouncer.pid").display(),
    )
}

impl Bouncer {
    /// Starts a PgBouncer in transaction mode; it stops when this is dropped
    /// (or when the process exits, however it exits).
    pub fn start(options: &Options) -> Bouncer {
        let bin = binary().or_else(|| {
            eprintln!("pgbouncer is missing");
            apt::install(&["pgbouncer"]);
            binary()
        });
        let bin = bin.expect(
            "the pgbouncer tests need PgBouncer (/usr/sbin/pgbouncer, Debian's `pgbouncer`) \
         and could not install it",
        );
        let dir =
            std::env::temp_dir().join(format!("conveyor-pgb-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let port = free_port();
        let ini = dir.join("pgbouncer.ini");
        std::fs::File::create(&ini)
            .and_then(|mut f| f.write_all(config(&dir, port, options).as_bytes()))
            .expect("write pgbouncer.ini");
        // PgBouncer refuses to run as root: it switches to `postgres` (-u).
        let user = if apt::is_root() {
            let _ = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status();
            "-u postgres"
        } else {
            ""
        };
        // Stops PgBouncer and removes its directory when our end of its stdin
        // closes, i.e. when the test binary exits, however it exits.
        let script = format!(
            "{bin} {user} {ini} & pid=$!; cat >/dev/null; kill $pid; wait $pid; rm -rf {dir}",
            bin = bin.display(),
            ini = ini.display(),
            dir = dir.display(),
        );
        let watch = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgbouncer");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "PgBouncer did not listen within 20 s; see {}",
                dir.join("pgbouncer.log").display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "PgBouncer on port {port} (transaction mode, {} server connections per \
         database), log {}",
            options.pool_size,
            dir.join("pgbouncer.log").display()
        );
        Bouncer {
            port,
            _watch: watch,
        }
    }

    /// Its port (on 127.0.0.1 and every address of [`Options::listen`]).
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// The port of this binary's PgBouncer (started on first use) in front of
/// the server at `server` (host, port).
pub fn port(server: (&str, u16)) -> u16 {
    static BOUNCER: OnceLock<Bouncer> = OnceLock::new();
    BOUNCER
        .get_or_init(|| {
            Bouncer::start(&Options {
                listen: Vec::new(),
                server: (server.0.to_string(), server.1),
                pool_size: SERVER_CONNECTIONS,
            })
        })
        .port()
}
