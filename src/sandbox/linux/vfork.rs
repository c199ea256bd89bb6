//! Starting a process without copying chitti's address space.
//!
//! `fork` copies the page tables of every private mapping, and afterwards parent and
//! child both take a page fault on each page either of them writes: for a process the
//! size of chitti that is a large share of a sandboxed call's cost. Like `posix_spawn`,
//! [`spawn`] clones with `CLONE_VM | CLONE_VFORK` instead: the child runs on a stack of
//! its own inside chitti's memory while the calling thread waits, until the child execs
//! or exits. Unlike `posix_spawn`, the child may do the set-up a sandbox needs (new
//! session, rlimits, capabilities, Landlock, seccomp) before it execs.
//!
//! What the child may do is what is allowed between fork and exec, and less: system
//! calls on data prepared beforehand, nothing that allocates or takes a lock (another
//! thread of chitti may hold it), and no writes to memory the parent uses, except
//! through what the closure captures for that purpose.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Enough for the set-up code; a guard page below it turns an overflow into a crash of
/// the child instead of a write into chitti's heap.
const STACK_BYTES: usize = 256 * 1024;

/// The child's stack: an anonymous mapping with an inaccessible lowest page.
struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping belongs to whoever holds the `Stack`; nothing else points into it
// once the child has exec'd or exited.
unsafe impl Send for Stack {}

/// A stack kept for the next spawn instead of unmapped: `munmap` flushes the TLB of every
/// CPU the process has run on (an interrupt to each, on a virtual machine, landing on the
/// command just started), and sessions spawn again. `try_lock` only: a process forked
/// while another thread held the lock must not wait for it forever.
static SPARE: std::sync::Mutex<Option<Stack>> = std::sync::Mutex::new(None);

impl Stack {
    fn take() -> io::Result<Stack> {
        match SPARE.try_lock().ok().and_then(|mut spare| spare.take()) {
            Some(stack) => Ok(stack),
            None => Stack::new(),
        }
    }

    /// Keeps the stack for the next spawn if no other is kept, else unmaps it.
    fn put_back(self) {
        if let Ok(mut spare) = SPARE.try_lock() {
            if spare.is_none() {
                *spare = Some(self);
            }
        }
    }

    fn new() -> io::Result<Stack> {
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = STACK_BYTES + page;
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Stack { base, len };
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// Stacks grow down on every architecture chitti supports.
    fn top(&self) -> *mut libc::c_void {
        unsafe { self.base.cast::<u8>().add(self.len).cast() }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// The child's entry point: calls the closure, which should exec or exit.
extern "C" fn trampoline(arg: *mut libc::c_void) -> libc::c_int {
    let child = unsafe { &mut *arg.cast::<&mut dyn FnMut()>() };
    child();
    unsafe { libc::_exit(127) }
}

/// Runs `child` in a new process (its parent-death and exit signal is SIGCHLD, so it is
/// waited for like any child) and returns its pid once it has exec'd or exited.
///
/// Every signal is blocked across the clone, so that none of chitti's handlers runs on
/// the child's stack; `child` must put back default dispositions and the mask it wants
/// before it execs.
///
/// # Safety
/// `child` must follow the rules in the module documentation and should end in
/// `execve` or `_exit` (if it returns, the child exits with 127).
pub unsafe fn spawn(child: &mut dyn FnMut()) -> io::Result<libc::pid_t> {
    let stack = Stack::take()?;
    let mut all: libc::sigset_t = std::mem::zeroed();
    let mut previous: libc::sigset_t = std::mem::zeroed();
    libc::sigfillset(&mut all);
    libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
    let mut entry: &mut dyn FnMut() = child;
    let pid = libc::clone(
        trampoline,
        stack.top(),
        libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
        (&mut entry as *mut &mut dyn FnMut()).cast(),
    );
    let error = io::Error::last_os_error();
    libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
    // The child has exec'd or exited: its stack is no longer in use.
    stack.put_back();
    if pid < 0 {
        return Err(error);
    }
    Ok(pid)
}

/// Puts every signal back to its default action and unblocks them all: handlers set to
/// be ignored would survive exec, and chitti's own handlers must never run in the child.
///
/// # Safety
/// Only for the child of [`spawn`] (or of `fork`), before it execs.
pub unsafe fn reset_signals() {
    for sig in 1..libc::SIGRTMAX() {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            libc::signal(sig, libc::SIG_DFL);
        }
    }
    unblock_all_signals();
}

/// Unblocks every signal of the calling thread. Async-signal-safe.
pub fn unblock_all_signals() {
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// A C string for a child that must not allocate; a NUL inside is bad input.
pub fn c_string(bytes: &[u8]) -> Result<CString, String> {
    CString::new(bytes).map_err(|_| "an argument or variable contains a NUL byte".to_string())
}

/// A program, its argv and its environment as `execve` takes them, built before the clone.
pub struct ExecImage {
    program: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

impl ExecImage {
    /// The path that is executed.
    pub fn program(&self) -> &std::ffi::CStr {
        &self.program
    }

    /// `argv` is the whole argument vector, argv[0] included.
    pub fn new(
        program: &Path,
        argv: &[OsString],
        env: &[(OsString, OsString)],
    ) -> Result<ExecImage, String> {
        Ok(ExecImage {
            program: c_string(program.as_os_str().as_bytes())?,
            argv: argv
                .iter()
                .map(|a| c_string(a.as_bytes()))
                .collect::<Result<_, _>>()?,
            envp: env
                .iter()
                .map(|(k, v)| {
                    let mut kv = k.as_bytes().to_vec();
                    kv.push(b'=');
                    kv.extend_from_slice(v.as_bytes());
                    c_string(&kv)
                })
                .collect::<Result<_, _>>()?,
        })
    }

    /// The null-terminated pointer arrays, valid while `self` lives. Build them before the
    /// clone (they allocate); [`Execve::exec`] then only makes the system call.
    pub fn execve(&self) -> Execve<'_> {
        self.execve_with(&self.program)
    }

    /// [`ExecImage::execve`] of `program` in place of the one this image was made with
    /// (a program the supervisor found on PATH itself, see `LaunchSpec::find_program`).
    pub fn execve_with<'a>(&'a self, program: &'a CString) -> Execve<'a> {
        let pointers = |strings: &[CString]| {
            strings
                .iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        // For a file without `#!`: `/bin/sh FILE ARGS...`, with FILE as `execvp` gives it
        // (the name as typed when it has a slash, else the path found on PATH).
        let file = match self.argv.first() {
            Some(typed) if typed.as_bytes().contains(&b'/') => typed,
            _ => program,
        };
        let script_argv = [BIN_SH.as_ptr(), file.as_ptr()]
            .into_iter()
            .chain(self.argv.iter().skip(1).map(|s| s.as_ptr()))
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        Execve {
            program,
            argv: pointers(&self.argv),
            envp: pointers(&self.envp),
            script_argv,
        }
    }
}

const BIN_SH: &std::ffi::CStr = c"/bin/sh";

/// An `execve` call ready to be made.
pub struct Execve<'a> {
    program: &'a CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// `/bin/sh PROGRAM ARGS...`, for a program the kernel does not recognise.
    script_argv: Vec<*const libc::c_char>,
}

impl Execve<'_> {
    /// Replaces the calling process; returns only on failure, with errno set.
    ///
    /// A file the kernel cannot execute (`ENOEXEC`: a script without a `#!` line) is run
    /// by `/bin/sh`, as `execvp` and shells do: bubblewrap starts commands with `execvp`,
    /// and every backend should run the same command the same way.
    ///
    /// # Safety
    /// As for `execve`: meant for a child between clone (or fork) and exec.
    pub unsafe fn exec(&self) {
        libc::execve(
            self.program.as_ptr(),
            self.argv.as_ptr(),
            self.envp.as_ptr(),
        );
        if *libc::__errno_location() == libc::ENOEXEC {
            libc::execve(
                BIN_SH.as_ptr(),
                self.script_argv.as_ptr(),
                self.envp.as_ptr(),
            );
            // Report the program's own error, not the shell's.
            *libc::__errno_location() = libc::ENOEXEC;
        }
    }
}

/// A pidfd for process `pid`. For our own unreaped child, the pid cannot be reused
/// meanwhile: the pidfd is surely that child's.
pub fn open_pidfd(pid: libc::pid_t) -> io::Result<OwnedFd> {
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Waits until `fd` is readable (a pidfd whose process has exited, a pipe at EOF), `limit`
/// at most (zero: only looks); whether it is. A signal or the limit ends the wait early;
/// the caller goes on all the same.
pub fn wait_readable(fd: &OwnedFd, limit: std::time::Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = limit.as_millis().min(i32::MAX as u128) as i32;
    unsafe { libc::poll(&mut poll, 1, ms) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(pid: libc::pid_t) -> i32 {
        let mut status = 0;
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        status
    }

    #[test]
    fn the_child_runs_in_its_own_process_and_reports_through_shared_memory() {
        let mut seen_pid: libc::pid_t = 0;
        let pid = unsafe {
            spawn(&mut || {
                reset_signals();
                // The parent waits until we exit, so this write is seen, not raced.
                seen_pid = libc::getpid();
                libc::_exit(7)
            })
        }
        .unwrap();
        assert_eq!(seen_pid, pid);
        assert_ne!(pid, std::process::id() as libc::pid_t);
        let status = wait(pid);
        assert!(libc::WIFEXITED(status));
        assert_eq!(libc::WEXITSTATUS(status), 7);
    }

    #[test]
    fn spawn_returns_after_exec_with_the_child_setup_applied() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = format!(
            "ulimit -n > '{}'; set -- $(cat /proc/$$/stat); echo $6 >> '{}'",
            out.display(),
            out.display()
        );
        let image = ExecImage::new(
            Path::new("/bin/sh"),
            &["sh".into(), "-c".into(), script.into()],
            &[],
        )
        .unwrap();
        let execve = image.execve();
        let mut exec_errno = 0;
        let pid = unsafe {
            spawn(&mut || {
                reset_signals();
                libc::setsid();
                let limit = libc::rlimit {
                    rlim_cur: 77,
                    rlim_max: 77,
                };
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                execve.exec();
                exec_errno = *libc::__errno_location();
                libc::_exit(127)
            })
        }
        .unwrap();
        assert_eq!(exec_errno, 0);
        let status = wait(pid);
        assert_eq!(libc::WEXITSTATUS(status), 0);
        let text = std::fs::read_to_string(&out).unwrap();
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("77"), "the rlimit applies to the child");
        let sid = pid.to_string();
        assert_eq!(
            lines.next(),
            Some(sid.as_str()),
            "the child leads a new session"
        );
        let mut ours = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut ours) };
        assert_ne!(ours.rlim_max, 77, "the parent's own limits are untouched");
    }

    #[test]
    fn a_nul_inside_an_argument_is_bad_input() {
        let e = ExecImage::new(Path::new("/bin/sh"), &["a\0b".into()], &[])
            .err()
            .expect("a NUL byte is refused");
        assert!(e.contains("NUL"), "{e}");
    }

    #[test]
    fn a_failed_exec_is_seen_by_the_parent() {
        let image = ExecImage::new(
            Path::new("/nonexistent/chitti-vfork-test"),
            &["missing".into()],
            &[],
        )
        .unwrap();
        let execve = image.execve();
        let mut exec_errno = 0;
        let pid = unsafe {
            spawn(&mut || {
                reset_signals();
                execve.exec();
                exec_errno = *libc::__errno_location();
                libc::_exit(127)
            })
        }
        .unwrap();
        assert_eq!(exec_errno, libc::ENOENT);
        assert_eq!(libc::WEXITSTATUS(wait(pid)), 127);
    }
}
