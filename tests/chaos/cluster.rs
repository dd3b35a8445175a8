//! A private, throwaway PostgreSQL cluster (initdb + pg_ctl on a free port in
//! a temp dir) that a test may restart or kill without touching the shared one.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
    as_postgres: bool,
    options: Options,
}

/// Where a cluster listens and what it runs with.
#[derive(Clone, Debug)]
pub struct Options {
    /// `listen_addresses`: 127.0.0.1, plus (say) the hosts' bridge address.
    pub listen: Vec<String>,
    /// Networks (CIDR) whose clients are trusted too (`pg_hba.conf`).
    pub trust: Vec<String>,
    /// `name=value` settings given to the server with `-c`.
    pub settings: Vec<String>,
}

impl Default for Options {
    /// Loopback only; room for many connections, no fsync (tests).
    fn default() -> Options {
        Options {
            listen: vec!["127.0.0.1".into()],
            trust: Vec::new(),
            settings: vec!["max_connections=200".into(), "fsync=off".into()],
        }
    }
}

fn pg_bin() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries under /usr/lib/postgresql")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("an initdb under /usr/lib/postgresql/*/bin")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Cluster {
    /// initdb and start a cluster; PostgreSQL refuses to run as root, so as
    /// root it runs as the `postgres` user.
    pub fn start() -> Cluster {
        Cluster::start_with(Options::default())
    }

    /// [`Cluster::start`] with other addresses or settings.
    pub fn start_with(options: Options) -> Cluster {
        let dir =
            std::env::temp_dir().join(format!("conveyor-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let as_postgres = is_root();
        if as_postgres {
            run(Command::new("chown").arg("postgres:postgres").arg(&dir));
        }
        let cluster = Cluster {
            dir,
            bin: pg_bin(),
            port: free_port(),
            as_postgres,
            options,
        };
        let data = cluster.data();
        cluster.pg(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        if !cluster.options.trust.is_empty() {
            let lines: String = (cluster.options.trust.iter())
                .map(|net| format!("host all all {net} trust\n"))
                .collect();
            let hba = cluster.dir.join("data/pg_hba.conf");
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(hba)
                .expect("pg_hba.conf");
            std::io::Write::write_all(&mut file, lines.as_bytes()).expect("write pg_hba.conf");
        }
        cluster.ctl(&["start"]);
        cluster
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The URL of the `postgres` database at another of its addresses.
    #[allow(dead_code)] // not every includer reaches it at another address
    pub fn url_at(&self, address: &str) -> String {
        format!("postgres://postgres@{address}:{}/postgres", self.port)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The postmaster's process id (the first line of `postmaster.pid`).
    #[allow(dead_code)] // the benchmark reads the server's CPU time from it
    pub fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// `pg_ctl restart`: `fast` (clean) or `immediate` (like a crash).
    pub fn restart(&self, mode: &str) {
        self.ctl(&["restart", "-m", mode]);
    }

    fn ctl(&self, args: &[&str]) {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses={}",
            self.port,
            self.dir.display(),
            self.options.listen.join(",")
        );
        for setting in &self.options.settings {
            options.push_str(" -c ");
            options.push_str(setting);
        }
        let log = self.dir.join("postgres.log").display().to_string();
        let data = self.data();
        let mut all = vec!["-D", &data, "-l", &log, "-o", &options, "-w", "-t", "60"];
        all.extend_from_slice(args);
        self.pg("pg_ctl", &all);
    }

    fn pg(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        command.args(args);
        run(&mut command);
    }
}

fn run(command: &mut Command) {
    let out = command.output().expect("run a PostgreSQL command");
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let path = self.bin.join("pg_ctl");
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        let _ = command
            .args(["-D", &data, "-m", "immediate", "-w", "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
