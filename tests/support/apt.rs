//! What the test binaries (and the benchmark) share to install the Debian
//! packages they need (`pgbouncer`, `chromium`, …) on a machine where
//! nothing was installed by hand: `apt-get` as root, or through `sudo -n`.

use std::process::{Command, Stdio};

/// Whether this process runs as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0\n"))
}

/// Installs `packages` with `apt-get` (refreshing the package lists and
/// trying again if the first attempt fails); says on stderr why when it
/// cannot. Returns whether they were installed.
pub fn install(packages: &[&str]) -> bool {
    let root = is_root();
    let apt = |args: &[&str]| {
        let mut command = if root {
            Command::new("apt-get")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "apt-get"]);
            sudo
        };
        command
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let install: Vec<&str> = ["install", "-y", "-q"]
        .iter()
        .chain(packages)
        .copied()
        .collect();
    eprintln!("installing {}", packages.join(" "));
    let installed = apt(&install) || (apt(&["update", "-q"]) && apt(&install));
    if !installed {
        eprintln!("apt-get could not install {}", packages.join(" "));
    }
    installed
}
