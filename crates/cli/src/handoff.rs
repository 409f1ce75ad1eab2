//! `schedstate` hands the server's command lines to `schedstate-server`: the same
//! arguments (and `argv[0]`), environment and standard streams, by `exec` on Unix (so
//! signals sent to the process reach the server), elsewhere by running it and passing
//! its exit code on.
//!
//! The server binary is found in `SCHEDSTATE_SERVER_BIN`, else beside this one. A
//! `schedstate` built in this repository's target directory builds it there when it is
//! missing or older than the sources (`cargo build -p schedstate-server` with the same
//! profile and target directory): `cargo run --release -- demo` compiles only the store
//! half, and the first server command compiles the rest, once. A `schedstate`
//! installed elsewhere names the missing binary instead.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use crate::connect::Credentials;
use crate::demo::DemoArgs;
use crate::inspect::InspectArgs;
use crate::output::{CliError, err};
use crate::server_half::{RemoteReads, ServerHalf};

/// The server binary's name.
pub const SERVER_BIN: &str = "schedstate-server";

/// An environment variable naming the server binary to use instead of the one beside
/// `schedstate` (packaging, tests).
pub const SERVER_BIN_ENV: &str = "SCHEDSTATE_SERVER_BIN";

/// The workspace this binary was built from (its manifest is `crates/cli`'s).
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// Runs the server's command lines in `schedstate-server`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Handoff;

impl Handoff {
    /// Replaces this process with `schedstate-server` and this process's arguments.
    /// Returns only what kept it from running; elsewhere than Unix, exits with the
    /// server's exit code.
    pub fn exec(&self) -> CliError {
        let mut args = std::env::args_os();
        let arg0 = args.next().unwrap_or_else(|| "schedstate".into());
        let args: Vec<OsString> = args.collect();
        match server_binary() {
            Ok(bin) => run(&bin, &arg0, &args),
            Err(e) => e,
        }
    }
}

impl ServerHalf for Handoff {
    fn cluster_demo(&self, _: &DemoArgs, _: usize) -> Result<(), CliError> {
        Err(self.exec())
    }

    fn inspect_server(&self, _: &InspectArgs) -> Result<(), CliError> {
        Err(self.exec())
    }

    fn remote(&self, _: &str, _: &Credentials) -> Result<Box<dyn RemoteReads>, CliError> {
        Err(self.exec())
    }
}

/// Runs `bin` with `args` in place of this process; its `argv[0]` stays this one's, so
/// its usage lines and `ps` say `schedstate`.
#[cfg(unix)]
fn run(bin: &Path, arg0: &OsString, args: &[OsString]) -> CliError {
    use std::os::unix::process::CommandExt;
    let e = Command::new(bin).arg0(arg0).args(args).exec();
    err(format!("cannot run {}: {e}", bin.display()))
}

#[cfg(not(unix))]
fn run(bin: &Path, _arg0: &OsString, args: &[OsString]) -> CliError {
    match Command::new(bin).args(args).status() {
        Ok(status) => std::process::exit(status.code().unwrap_or(1)),
        Err(e) => err(format!("cannot run {}: {e}", bin.display())),
    }
}

/// The server binary to run: `SCHEDSTATE_SERVER_BIN`, else the one beside this
/// binary, built first when this binary lives in its workspace's target directory
/// and the server is missing or older than the sources.
fn server_binary() -> Result<PathBuf, CliError> {
    if let Some(bin) = std::env::var_os(SERVER_BIN_ENV).filter(|b| !b.is_empty()) {
        return Ok(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().map_err(|e| err(format!("where am I? {e}")))?;
    let bin = exe.with_file_name(format!("{SERVER_BIN}{}", std::env::consts::EXE_SUFFIX));
    let Some(build) = BuildPlace::of(&exe) else {
        if bin.is_file() {
            return Ok(bin);
        }
        return Err(err(format!(
            "this command runs in {SERVER_BIN}, which is not installed beside {} ({} is missing): install both binaries (`cargo install --path crates/cli` and `--path crates/server`), or set {SERVER_BIN_ENV}",
            exe.display(),
            bin.display()
        )));
    };
    if build.is_stale(&bin) {
        build.build()?;
        // Cargo leaves a server it finds up to date untouched; dated now, it does not
        // send the next command to cargo again.
        let _ = std::fs::File::options()
            .write(true)
            .open(&bin)
            .and_then(|f| f.set_modified(SystemTime::now()));
    }
    Ok(bin)
}

/// Where this binary was built: its workspace and cargo's directories for it.
#[derive(Debug)]
struct BuildPlace {
    workspace: PathBuf,
    /// The target directory (`target`).
    target_dir: PathBuf,
    /// The profile directory's name (`release`, `debug`, or a custom profile's).
    profile_dir: String,
}

impl BuildPlace {
    /// The place `exe` was built in, if it is a profile directory of a cargo target
    /// directory and the workspace it was built from still has the server's package.
    fn of(exe: &Path) -> Option<BuildPlace> {
        let workspace = PathBuf::from(WORKSPACE);
        if !workspace.join("crates/server/Cargo.toml").is_file() {
            return None;
        }
        let profile = exe.parent()?;
        let target_dir = profile.parent()?;
        // Every cargo target directory holds this file.
        if !target_dir.join("CACHEDIR.TAG").is_file() {
            return None;
        }
        Some(BuildPlace {
            workspace,
            target_dir: target_dir.to_path_buf(),
            profile_dir: profile.file_name()?.to_str()?.to_string(),
        })
    }

    /// Whether `bin` is missing or older than a source file of the workspace (but
    /// `schedstate`'s own `main.rs`, which the server does not compile).
    fn is_stale(&self, bin: &Path) -> bool {
        let Ok(built) = bin.metadata().and_then(|m| m.modified()) else {
            return true;
        };
        let mut newest = SystemTime::UNIX_EPOCH;
        for file in ["Cargo.toml", "Cargo.lock"] {
            newest_in(&self.workspace.join(file), &mut newest);
        }
        newest_in(&self.workspace.join("src"), &mut newest);
        if let Ok(crates) = std::fs::read_dir(self.workspace.join("crates")) {
            for krate in crates.filter_map(Result::ok) {
                newest_in(&krate.path().join("Cargo.toml"), &mut newest);
                newest_in(&krate.path().join("src"), &mut newest);
            }
        }
        newest > built
    }

    /// `cargo build -p schedstate-server` into this binary's directory.
    fn build(&self) -> Result<(), CliError> {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(&cargo);
        cmd.args([
            "build",
            "--quiet",
            "-p",
            "schedstate-server",
            "--bin",
            SERVER_BIN,
        ]);
        match self.profile_dir.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        cmd.arg("--target-dir")
            .arg(&self.target_dir)
            .current_dir(&self.workspace);
        eprintln!(
            "schedstate: this command runs in {SERVER_BIN}, the server half of the command line; building it first (the server stack, once: about two minutes on two cores)"
        );
        let status = cmd.status().map_err(|e| {
            err(format!(
                "cannot run cargo ({}) to build {SERVER_BIN}: {e}",
                Path::new(&cargo).display()
            ))
        })?;
        if !status.success() {
            return Err(err(format!(
                "building {SERVER_BIN} failed ({status}); build it with `cargo build --release` in {}",
                self.workspace.display()
            )));
        }
        Ok(())
    }
}

/// Raises `newest` to the modification time of `path`, or of the newest file under it.
fn newest_in(path: &Path, newest: &mut SystemTime) {
    let Ok(meta) = path.metadata() else {
        return;
    };
    if path.ends_with("crates/cli/src/main.rs") {
        return;
    }
    if meta.is_dir() {
        if let Ok(entries) = std::fs::read_dir(path) {
            for entry in entries.filter_map(Result::ok) {
                newest_in(&entry.path(), newest);
            }
        }
    } else if let Ok(modified) = meta.modified() {
        *newest = (*newest).max(modified);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_outside_a_target_directory_has_no_build_place() {
        let dir = tempfile::tempdir().unwrap();
        assert!(BuildPlace::of(&dir.path().join("release/schedstate")).is_none());
        std::fs::create_dir(dir.path().join("release")).unwrap();
        std::fs::write(dir.path().join("CACHEDIR.TAG"), b"").unwrap();
        let place = BuildPlace::of(&dir.path().join("release/schedstate")).unwrap();
        assert_eq!(place.profile_dir, "release");
        assert_eq!(place.target_dir, dir.path());
    }

    #[test]
    fn a_server_older_than_a_source_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let place = BuildPlace {
            workspace: PathBuf::from(WORKSPACE),
            target_dir: dir.path().to_path_buf(),
            profile_dir: "debug".into(),
        };
        let bin = dir.path().join(SERVER_BIN);
        assert!(place.is_stale(&bin), "a missing server is stale");
        std::fs::write(&bin, b"").unwrap();
        let old = std::fs::File::options().write(true).open(&bin).unwrap();
        old.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1))
            .unwrap();
        assert!(place.is_stale(&bin), "older than the sources");
        old.set_modified(SystemTime::now() + std::time::Duration::from_secs(3600))
            .unwrap();
        assert!(!place.is_stale(&bin), "newer than every source");
    }
}
