//! Starting bubblewrap before its arguments are known.
//!
//! bwrap loads four shared libraries before it looks at an argument (about 0.3 ms),
//! and a one-shot `chitti sandbox exec` spends about as long deciding the policy.
//! Started with `--args FD` as soon as chitti knows the call goes to bwrap, bwrap does
//! its loading on another CPU meanwhile, then blocks reading FD.
//!
//! The options (every namespace, mount and environment variable) go down that pipe in
//! one write of at most `PIPE_BUF` bytes, which the kernel makes atomic: bwrap reads all
//! of them or none, never a truncated list that could lack a mask or a namespace. None
//! is what it reads if chitti dies first, and then it must not run the command bare: its
//! own argument list carries `--disable-userns`, which bwrap refuses without the
//! `--unshare-user` that only the options supply, so it exits before anything runs. A
//! longer list does not fit: that bwrap is killed unread and a new one is started the
//! usual way, with the same descriptors.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::direct::{DirectChild, Stdio};
use crate::sandbox::rlimits::Rlimits;

/// In bwrap's own argument list: refused unless the options bring [`GUARD_NEEDS`].
const GUARD: &str = "--disable-userns";
const GUARD_NEEDS: &str = "--unshare-user";

/// A bwrap waiting for its arguments. Dropped unlaunched, it is killed before its
/// argument pipe closes (fields drop in order), so it never runs anything.
pub struct EarlyBwrap {
    child: DirectChild,
    args: OwnedFd,
    program: PathBuf,
    command: Vec<OsString>,
    /// What a replacement bwrap needs: the descriptors passed at their numbers, and stdio.
    passed: Vec<OwnedFd>,
    stdio: Stdio,
}

impl EarlyBwrap {
    /// Starts `program` (bwrap) for `command` with `--args`, an empty environment, `/` as
    /// its directory and the limits that do not depend on the policy (no core dumps, the
    /// umask); `passed` are the descriptors the options will name.
    pub fn spawn(
        program: &Path,
        command: &[OsString],
        passed: Vec<OwnedFd>,
        stdio: Stdio,
    ) -> io::Result<EarlyBwrap> {
        let (args_read, args) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let mut argv = vec![
            OsString::from("--args"),
            OsString::from(args_read.as_raw_fd().to_string()),
            // Fails the call unless the options arrive (see the module comment).
            OsString::from(GUARD),
            OsString::from("--"),
        ];
        argv.extend_from_slice(command);
        // Passed at their own numbers, which the arguments will name.
        let mut pass = passed;
        pass.push(args_read);
        let child = DirectChild::spawn(
            program,
            &argv,
            &[],
            Path::new("/"),
            &pass,
            Rlimits::default(),
            &stdio,
        );
        // chitti's copy of bwrap's end; bwrap sees EOF once `args` closes.
        drop(pass.pop());
        let passed = pass;
        let child = child?;
        // Still in its exec, and about to be preempted here by chitti's policy work.
        super::cpu::move_to_another_cpu(child.pid);
        Ok(EarlyBwrap {
            child,
            args,
            program: program.to_path_buf(),
            command: command.to_vec(),
            passed,
            stdio,
        })
    }

    /// Hands bwrap its options (`args` up to the `--` before the command, which must be
    /// the command it was started for), `env` as `--setenv` options and the profile's
    /// limits. Returns the running bwrap: this one, or a new one if the options do not
    /// fit in one atomic write.
    pub fn launch(
        self,
        args: &[OsString],
        env: &[(OsString, OsString)],
        cwd: &Path,
        rlimits: Rlimits,
    ) -> io::Result<DirectChild> {
        let options = args
            .len()
            .checked_sub(self.command.len() + 1)
            .filter(|&end| args[end] == "--" && args[end + 1..] == self.command[..])
            .filter(|&end| args[..end].iter().any(|a| a == GUARD_NEEDS))
            .map(|end| option_stream(&args[..end], env))
            .filter(|stream| stream.len() <= libc::PIPE_BUF)
            // A bwrap that cannot take the limits (gone already?) is replaced, not trusted.
            .filter(|_| rlimits.apply_to(self.child.pid).is_ok());
        let EarlyBwrap {
            child,
            args: pipe,
            program,
            passed,
            stdio,
            ..
        } = self;
        if let Some(stream) = options {
            // SAFETY: writes `stream`, which outlives the call, to an open pipe.
            let written =
                unsafe { libc::write(pipe.as_raw_fd(), stream.as_ptr().cast(), stream.len()) };
            if written == stream.len() as isize {
                return Ok(child);
            }
            // Nothing was written (a pipe write this size is all or nothing).
        }
        // Killed and reaped before its argument pipe closes: it never parses anything.
        drop(child);
        drop(pipe);
        DirectChild::spawn(&program, args, env, cwd, &passed, rlimits, &stdio)
    }
}

/// Options as bwrap's `--args` reads them: NUL-terminated strings, the environment first
/// (bwrap itself was started with none).
fn option_stream(options: &[OsString], env: &[(OsString, OsString)]) -> Vec<u8> {
    let mut stream = Vec::new();
    let mut push = |s: &[u8]| {
        stream.extend_from_slice(s);
        stream.push(0);
    };
    for (name, value) in env {
        push(b"--setenv");
        push(name.as_bytes());
        push(value.as_bytes());
    }
    for option in options {
        push(option.as_bytes());
    }
    stream
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::Capabilities;

    /// bwrap, where it can create its sandbox here; None after saying SKIP.
    fn usable_bwrap() -> Option<PathBuf> {
        let caps = Capabilities::get();
        if let Some(why) = caps.bwrap_static_blocker() {
            eprintln!("SKIP: {why}");
            return None;
        }
        let bwrap = caps.bwrap()?.path.clone();
        if let Err(why) = crate::sandbox::capabilities::probe_bwrap(&bwrap) {
            eprintln!("SKIP: bubblewrap cannot create its sandbox here: {why}");
            return None;
        }
        Some(bwrap)
    }

    fn no_stdio() -> Stdio {
        Stdio {
            stdin: None,
            stdout: None,
            stderr: None,
        }
    }

    /// The options of a real call, for `command`, in `dir`.
    fn options(dir: &Path, command: &[OsString]) -> Vec<OsString> {
        let mut args: Vec<OsString> = [
            "--unshare-user",
            "--disable-userns",
            "--unshare-pid",
            "--unshare-net",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--bind",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        args.push(dir.into());
        args.push(dir.into());
        args.push("--".into());
        args.extend_from_slice(command);
        args
    }

    fn wait(mut child: DirectChild) -> libc::c_int {
        child.reap().unwrap()
    }

    /// chitti dies between starting bwrap and writing its options: the option pipe closes
    /// unwritten. bwrap must not run the command (which would be bare, with no
    /// namespace and no mount): decided by the file the command would have created.
    #[test]
    fn bwrap_whose_options_never_come_runs_nothing() {
        let Some(bwrap) = usable_bwrap() else { return };
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let command: Vec<OsString> = vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("touch '{}'", marker.display()).into(),
        ];
        let early = EarlyBwrap::spawn(&bwrap, &command, Vec::new(), no_stdio()).unwrap();
        // What chitti's death does: the pipe closes, nobody kills bwrap first.
        let EarlyBwrap {
            child, args: pipe, ..
        } = early;
        drop(pipe);
        let status = wait(child);
        assert!(
            !marker.exists(),
            "bwrap ran the command without its options"
        );
        assert_ne!(status, 0);
    }

    /// The guard itself: even with the host mounted (which only the options do), bwrap
    /// given the guard but not the options it needs runs nothing.
    #[test]
    fn the_guard_stops_bwrap_without_its_options() {
        let Some(bwrap) = usable_bwrap() else { return };
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let status = std::process::Command::new(&bwrap)
            .args([GUARD, "--ro-bind", "/", "/", "--bind"])
            .arg(dir.path())
            .arg(dir.path())
            .args(["--", "/bin/sh", "-c"])
            .arg(format!("touch '{}'", marker.display()))
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(
            !marker.exists(),
            "bwrap ran the command without {GUARD_NEEDS}"
        );
        assert!(!status.success());
    }

    /// Options that fit are written to the waiting bwrap; options that do not (a long
    /// environment variable) make chitti start a new bwrap the usual way. Either way the
    /// command runs in the sandbox with its environment: it writes what it sees.
    #[test]
    fn options_reach_bwrap_whether_or_not_they_fit_one_write() {
        let Some(bwrap) = usable_bwrap() else { return };
        for value_len in [10, 2 * libc::PIPE_BUF] {
            let dir = tempfile::tempdir().unwrap();
            let dir = crate::canonical::canonicalize(dir.path()).unwrap();
            let out = dir.join("out");
            let command: Vec<OsString> = vec![
                "/bin/sh".into(),
                "-c".into(),
                format!("printf '%s %s' \"$$\" \"$LONG\" > '{}'", out.display()).into(),
            ];
            let value = "x".repeat(value_len);
            let early = EarlyBwrap::spawn(&bwrap, &command, Vec::new(), no_stdio()).unwrap();
            let child = early
                .launch(
                    &options(&dir, &command),
                    &[("LONG".into(), value.clone().into())],
                    &dir,
                    Rlimits::default(),
                )
                .unwrap();
            assert_eq!(wait(child), 0, "value of {value_len} bytes");
            // Its own PID namespace (pid 2 under bwrap's init): the options were applied,
            // not only the command run; and the environment arrived whole.
            let seen = std::fs::read_to_string(&out).unwrap();
            assert_eq!(seen, format!("2 {value}"), "value of {value_len} bytes");
        }
    }
}
