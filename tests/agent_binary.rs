//! `chitti run`, `chat` and `mcp` are served by `chitti-agent`, which `chitti` execs from
//! beside its own executable: never from PATH, never from beside a symbolic link to chitti,
//! and with a clear refusal when it is missing.

mod common;

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

use common::{chitti_bin, marker, scratch_root};

/// Held while a test writes an executable and while one starts a process. A child forked
/// while another test's new executable is still open for writing holds that descriptor
/// until it execs, and running the file meanwhile fails with ETXTBSY ("Text file busy",
/// seen once in CI).
static EXECUTABLES: Mutex<()> = Mutex::new(());

fn executables() -> MutexGuard<'static, ()> {
    EXECUTABLES.lock().unwrap_or_else(|e| e.into_inner())
}

/// `command`'s output, started while no test writes an executable.
fn output(command: &mut Command) -> std::io::Result<Output> {
    let _writing_none = executables();
    command.output()
}

/// A fresh directory under the scratch root.
fn fresh_dir(tag: &str) -> PathBuf {
    let dir = scratch_root().join(marker(tag));
    std::fs::create_dir_all(&dir).expect("create a test directory");
    dir
}

/// A copy of the chitti binary under test in `dir`.
fn copy_chitti(dir: &Path) -> PathBuf {
    let copy = dir.join("chitti");
    let _starting_none = executables();
    std::fs::copy(chitti_bin(), &copy).expect("copy chitti");
    copy
}

/// An executable script at `path` holding `text`.
fn write_script(path: &Path, text: &str) {
    let _starting_none = executables();
    std::fs::write(path, text).expect("write a script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// An executable script at `path` that records its arguments in `record` and exits 7.
fn recording_script(path: &Path, record: &Path) {
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\nexit 7\n",
        record.display()
    );
    write_script(path, &script);
}

/// A copy of chitti in a fresh directory, beside a `chitti-agent` that records its
/// arguments; returns the copy and the record file.
fn chitti_beside_recording_agent(tag: &str) -> (PathBuf, PathBuf) {
    let dir = fresh_dir(tag);
    let chitti = copy_chitti(&dir);
    let record = dir.join("record");
    recording_script(&dir.join("chitti-agent"), &record);
    (chitti, record)
}

fn run(chitti: &Path, args: &[&str], path_env: &Path) -> Output {
    output(Command::new(chitti).args(args).env("PATH", path_env)).expect("start chitti")
}

#[test]
fn without_chitti_agent_the_agent_commands_are_refused_and_say_how_to_get_it() {
    let dir = fresh_dir("alone");
    let chitti = copy_chitti(&dir);
    for command in [&["run", "hello"][..], &["chat"], &["mcp"]] {
        let out = run(&chitti, command, Path::new("/usr/bin:/bin"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(127), "{command:?}: {stderr}");
        let expected = dir.join("chitti-agent");
        assert!(
            stderr.contains(&expected.display().to_string()) && stderr.contains("cargo build"),
            "{command:?} should name the missing file and how to build it: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{command:?} printed on stdout");
    }
    // The sandbox itself needs no agent binary, and doctor says it is missing.
    let out = run(&chitti, &["sandbox", "profile"], Path::new("/usr/bin:/bin"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&chitti, &["doctor", "--json"], Path::new("/usr/bin:/bin"));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor's JSON");
    assert_eq!(report["agent_binary"]["present"], false, "{report}");
    let named = dir.join("chitti-agent").display().to_string();
    assert_eq!(report["agent_binary"]["path"], named.as_str(), "{report}");
}

#[test]
fn chitti_agent_is_taken_from_beside_the_real_file_with_the_same_arguments() {
    let (chitti, record) = chitti_beside_recording_agent("real");
    // A decoy beside a symbolic link to chitti, and another on PATH: neither may run.
    let elsewhere = fresh_dir("link");
    let decoy_record = elsewhere.join("decoy-ran");
    symlink(&chitti, elsewhere.join("chitti")).expect("symlink");
    recording_script(&elsewhere.join("chitti-agent"), &decoy_record);

    let out = run(
        &elsewhere.join("chitti"),
        &["run", "--max-steps", "3", "a task"],
        &elsewhere,
    );
    assert_eq!(
        out.status.code(),
        Some(7),
        "chitti should have become the script (its exit status): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&record).expect("the real chitti-agent ran"),
        "run\n--max-steps\n3\na task\n"
    );
    assert!(
        !decoy_record.exists(),
        "a chitti-agent beside the link or on PATH ran"
    );
}

#[test]
fn the_sandbox_commands_do_not_start_chitti_agent() {
    let (chitti, record) = chitti_beside_recording_agent("core");
    for command in [&["sandbox", "profile"][..], &["--version"]] {
        let out = run(&chitti, command, Path::new("/usr/bin:/bin"));
        assert_ne!(out.status.code(), Some(7), "{command:?} ran chitti-agent");
    }
    assert!(!record.exists(), "a sandbox command started chitti-agent");
}

/// `doctor` says the agent binary is usable only when it starts and is this chitti's: a
/// file that is not executable, or another program, is reported with what is wrong.
#[test]
fn doctor_tells_a_usable_agent_binary_from_one_that_cannot_serve() {
    let doctor = |dir: &Path| -> serde_json::Value {
        let out = run(
            &dir.join("chitti"),
            &["doctor", "--json"],
            Path::new("/usr/bin:/bin"),
        );
        serde_json::from_slice(&out.stdout).expect("doctor's JSON")
    };
    let dir = fresh_dir("doctor-agent");
    copy_chitti(&dir);
    let agent = dir.join("chitti-agent");

    {
        let _starting_none = executables();
        std::fs::copy(chitti_bin().with_file_name("chitti-agent"), &agent).expect("copy the agent");
    }
    let report = doctor(&dir);
    assert_eq!(report["agent_binary"]["present"], true, "{report}");

    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o644)).unwrap();
    let report = doctor(&dir);
    assert_eq!(report["agent_binary"]["present"], false, "{report}");
    let problem = report["agent_binary"]["problem"]
        .as_str()
        .unwrap_or_default();
    assert!(problem.contains("cannot be started"), "{report}");

    let record = dir.join("record");
    recording_script(&agent, &record);
    let report = doctor(&dir);
    assert_eq!(report["agent_binary"]["present"], false, "{report}");
    let problem = report["agent_binary"]["problem"]
        .as_str()
        .unwrap_or_default();
    assert!(problem.contains("--version"), "{report}");
}

/// `chitti` hands `chitti-agent` the name of the sources it was built from, and an agent
/// built from others refuses to serve (a review ran a session on an older agent binary,
/// with older sandbox code, beside a newer chitti); doctor says so.
#[test]
fn an_agent_binary_from_another_build_refuses_to_serve() {
    let dir = fresh_dir("source-id");
    let chitti = copy_chitti(&dir);
    let record = dir.join("record");
    let script = format!(
        "#!/bin/sh\nprintf '%s' \"$CHITTI_AGENT_EXPECTS\" > '{}'\nexit 7\n",
        record.display()
    );
    write_script(&dir.join("chitti-agent"), &script);
    let out = run(&chitti, &["mcp"], Path::new("/usr/bin:/bin"));
    assert_eq!(out.status.code(), Some(7));
    let handed = std::fs::read_to_string(&record).expect("the agent ran");
    assert_eq!(handed, chitti::cli::agent_binary::SOURCE_ID);

    let agent = chitti_bin().with_file_name("chitti-agent");
    let out = output(
        Command::new(&agent)
            .args(["mcp"])
            .env("CHITTI_AGENT_EXPECTS", "0000000000000000"),
    )
    .expect("start chitti-agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{stderr}");
    assert!(stderr.contains("built from other sources"), "{stderr}");
    // Started by its own chitti, or by hand, it serves.
    let out = output(
        Command::new(&agent)
            .arg("--version")
            .env("CHITTI_AGENT_EXPECTS", chitti::cli::agent_binary::SOURCE_ID),
    )
    .unwrap();
    assert!(out.status.success());
}
