//! Starting bubblewrap: a program that isolates itself, started the cheap way.
//!
//! `std::process::Command` falls back to `fork` as soon as anything has to happen
//! between fork and exec (here: a new session, descriptors to pass, rlimits), and a fork
//! of chitti costs more than the rest of the launch. [`DirectChild::spawn`] does the same
//! set-up in a [`vfork::spawn`] child instead.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::vfork::{self, c_string, open_pidfd, ExecImage};
use crate::sandbox::rlimits::Rlimits;

/// A started program, its own session leader. Killed (with its process group) and
/// reaped when dropped before it was reaped.
pub struct DirectChild {
    pub pid: libc::pid_t,
    /// Readable once the program has exited.
    pub pidfd: OwnedFd,
    /// The wait status, once reaped.
    status: Option<libc::c_int>,
}

/// The descriptors the program gets as stdin, stdout and stderr (`None`: chitti's own).
pub struct Stdio {
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

impl DirectChild {
    /// Starts `program` in a new session with `env` only, in `cwd`, under `rlimits`;
    /// `pass_fds` keep their numbers, every other descriptor above 2 is closed on exec.
    /// Returns once the program runs (or with the reason it could not).
    pub fn spawn(
        program: &Path,
        args: &[OsString],
        env: &[(OsString, OsString)],
        cwd: &Path,
        pass_fds: &[OwnedFd],
        rlimits: Rlimits,
        stdio: &Stdio,
    ) -> io::Result<DirectChild> {
        // Everything the child touches is built here, before the clone.
        let bad = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        let mut argv = vec![program.as_os_str().to_os_string()];
        argv.extend_from_slice(args);
        let image = ExecImage::new(program, &argv, env).map_err(bad)?;
        let execve = image.execve();
        let cwd_c = c_string(cwd.as_os_str().as_bytes()).map_err(bad)?;
        let pass: Vec<RawFd> = pass_fds.iter().map(|f| f.as_raw_fd()).collect();
        let redirects: Vec<(RawFd, RawFd)> =
            [(&stdio.stdin, 0), (&stdio.stdout, 1), (&stdio.stderr, 2)]
                .into_iter()
                .filter_map(|(fd, target)| fd.as_ref().map(|fd| (fd.as_raw_fd(), target)))
                .collect();

        // Written by the child on failure; read once it is gone (CLONE_VFORK).
        let mut failed: Option<(&'static str, i32)> = None;
        let errno = || unsafe { *libc::__errno_location() };
        let pid = unsafe {
            vfork::spawn(&mut || {
                vfork::reset_signals();
                // No controlling terminal for the sandbox, a terminal's Ctrl-C reaches
                // chitti (which tears down in order), and the group can be killed.
                if libc::setsid() < 0 {
                    failed = Some(("setsid", errno()));
                    libc::_exit(125);
                }
                for &(fd, target) in &redirects {
                    // dup2 onto itself would keep close-on-exec set.
                    let ok = if fd == target {
                        libc::fcntl(fd, libc::F_SETFD, 0) >= 0
                    } else {
                        libc::dup2(fd, target) >= 0
                    };
                    if !ok {
                        failed = Some(("redirecting stdio", errno()));
                        libc::_exit(125);
                    }
                }
                // Nothing chitti's caller left open may reach the sandbox: mark every
                // descriptor close-on-exec, then clear the flag on the ones passed.
                libc::syscall(
                    libc::SYS_close_range,
                    3u32,
                    u32::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                );
                for &fd in &pass {
                    if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                        failed = Some(("passing a descriptor", errno()));
                        libc::_exit(125);
                    }
                }
                if libc::chdir(cwd_c.as_ptr()) < 0 {
                    failed = Some(("chdir", errno()));
                    libc::_exit(125);
                }
                if let Err(e) = rlimits.apply() {
                    failed = Some(("setrlimit", e.raw_os_error().unwrap_or(libc::EIO)));
                    libc::_exit(125);
                }
                execve.exec();
                failed = Some(("exec", errno()));
                libc::_exit(127);
            })?
        };
        if let Some((step, errno)) = failed {
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            let e = io::Error::from_raw_os_error(errno);
            return Err(if step == "exec" {
                e
            } else {
                io::Error::new(e.kind(), format!("{step}: {e}"))
            });
        }
        let pidfd = match open_pidfd(pid) {
            Ok(fd) => fd,
            Err(e) => {
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
                return Err(e);
            }
        };
        Ok(DirectChild {
            pid,
            pidfd,
            status: None,
        })
    }

    /// Kills the program and its process group. Until it is reaped its pid, and so the
    /// group id, cannot be reused: this reaches only what it started in its session.
    pub fn kill(&self) {
        if self.status.is_none() {
            unsafe {
                libc::kill(-self.pid, libc::SIGKILL);
                libc::kill(self.pid, libc::SIGKILL);
            }
        }
    }

    /// Reaps the program (blocking until it exits) and returns its wait status.
    pub fn reap(&mut self) -> io::Result<libc::c_int> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let mut status = 0;
        loop {
            let r = unsafe { libc::waitpid(self.pid, &mut status, 0) };
            if r == self.pid {
                self.status = Some(status);
                return Ok(status);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for DirectChild {
    fn drop(&mut self) {
        if self.status.is_none() {
            self.kill();
            let _ = self.reap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn_sh(
        script: &str,
        dir: &Path,
        pass: &[OwnedFd],
        stdout: Option<OwnedFd>,
    ) -> io::Result<DirectChild> {
        DirectChild::spawn(
            Path::new("/bin/sh"),
            &["-c".into(), script.into()],
            &[("PATH".into(), "/usr/bin:/bin".into())],
            dir,
            pass,
            Rlimits {
                max_open_files: Some(64),
                ..Rlimits::default()
            },
            &Stdio {
                stdin: None,
                stdout,
                stderr: None,
            },
        )
    }

    /// What a descriptor of this process is (`pipe:[inode]`), to compare with what the
    /// child sees at the same number.
    fn identity(fd: &OwnedFd) -> String {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .unwrap()
            .display()
            .to_string()
    }

    #[test]
    fn the_program_gets_its_session_cwd_env_limits_and_only_the_passed_descriptors() {
        let dir = tempfile::tempdir().unwrap();
        let (passed_r, _passed_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        // Not close-on-exec, like a descriptor chitti's caller left open.
        let (kept_r, _kept_w) = nix::unistd::pipe().unwrap();
        // The shell may reuse a closed number for its own descriptors (dash saves a
        // redirected stdout at 10 and up), so the child reports what each number *is*,
        // and its output goes to a file given as stdout rather than through a redirection.
        let script = format!(
            "pwd; echo \"$PATH\"; ulimit -n; set -- $(cat /proc/$$/stat); echo $6; \
             readlink /proc/$$/fd/{p} || echo none; readlink /proc/$$/fd/{k} || echo none",
            p = passed_r.as_raw_fd(),
            k = kept_r.as_raw_fd()
        );
        let out_path = dir.path().join("out");
        let out_file = std::fs::File::create(&out_path).unwrap();
        let mut child = spawn_sh(
            &script,
            dir.path(),
            std::slice::from_ref(&passed_r),
            Some(out_file.into()),
        )
        .unwrap();
        let status = child.reap().unwrap();
        assert_eq!(libc::WEXITSTATUS(status), 0);
        let out = std::fs::read_to_string(&out_path).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        let cwd = dir.path().canonicalize().unwrap();
        let pid = child.pid.to_string();
        assert_eq!(
            lines[..4],
            [cwd.to_str().unwrap(), "/usr/bin:/bin", "64", pid.as_str()],
            "{out}"
        );
        assert_eq!(lines[4], identity(&passed_r), "the passed pipe: {out}");
        assert_ne!(
            lines[5],
            identity(&kept_r),
            "the caller's pipe leaked: {out}"
        );
        assert_eq!(lines.len(), 6, "{out}");
    }

    #[test]
    fn a_missing_program_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = DirectChild::spawn(
            Path::new("/nonexistent/chitti-bwrap"),
            &[],
            &[],
            dir.path(),
            &[],
            Rlimits::default(),
            &Stdio {
                stdin: None,
                stdout: None,
                stderr: None,
            },
        )
        .err()
        .expect("spawning a missing program fails");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn dropping_kills_the_program_and_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let child = spawn_sh("sleep 1000 & echo $! > bg; wait", dir.path(), &[], None).unwrap();
        let bg = dir.path().join("bg");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !bg.exists() || std::fs::read_to_string(&bg).unwrap().trim().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the script never started"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let bg_pid: i32 = std::fs::read_to_string(&bg)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        drop(child);
        // The background sleep was in the group: it is dead (a zombie at most, until
        // init reaps it).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{bg_pid}/stat")).unwrap_or_default();
            let alive = stat
                .rsplit(") ")
                .next()
                .is_some_and(|rest| !rest.starts_with('Z'));
            if !alive {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the group survived the drop"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}
