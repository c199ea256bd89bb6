//! What the `chitti` binary does before its own work, in place of std's runtime start.
//!
//! `chitti` is started once per sandboxed call, so its start is part of every call's
//! cost. std's start (`lang_start`) makes eleven system calls before `main` here: it keeps
//! descriptors 0-2 open and ignores SIGPIPE, which chitti needs, and it maps an alternate
//! signal stack and installs SIGSEGV and SIGBUS handlers, whose only use is a message
//! ("has overflowed its stack") before a process that overflows its stack dies anyway.
//! Measured with hyperfine on the build machine, a static musl binary that links std
//! started 10 us sooner without that start (0.133 against 0.143 ms, medians of 3,000).
//! So `src/main.rs` is a C `main` (`#![no_main]`) that calls [`start`] first; what
//! std's start would also have recorded is taken from here: the arguments ([`args_os`];
//! std's own list stays empty with musl, which does not hand them to init functions).
//! The other binary (`chitti-agent`) keeps std's start.

use std::ffi::{c_char, c_int, CStr, OsString};
use std::os::unix::ffi::OsStringExt;
use std::sync::atomic::{AtomicIsize, AtomicPtr, Ordering};

/// The process's `argc` and `argv`, as the C start handed them to `main` (the strings
/// live on the initial stack for the process's lifetime).
static ARGC: AtomicIsize = AtomicIsize::new(-1);
static ARGV: AtomicPtr<*const c_char> = AtomicPtr::new(std::ptr::null_mut());

/// What std's start does that chitti relies on, then remembers the arguments. Call it
/// first thing in a `#![no_main]` `main`, before any other thread exists.
///
/// # Safety
/// `argv` must point to `argc` valid NUL-terminated strings that outlive the process (the
/// arguments C's start passes to `main`).
pub unsafe fn start(argc: c_int, argv: *const *const c_char) {
    keep_standard_descriptors_open();
    // A reader that goes away must make a write fail (EPIPE), not kill chitti: the
    // sandbox's pipes, its input among them, are written by chitti while it sets up and
    // ends a call. Children get the default back (std's `Command` and the supervisor's
    // command reset it), as with std's start.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    ARGV.store(argv.cast_mut(), Ordering::Relaxed);
    ARGC.store(argc as isize, Ordering::Relaxed);
}

/// Descriptors 0, 1 and 2 that the caller left closed are opened on /dev/null, as std's
/// start does: otherwise the first file chitti opens would get number 1 or 2, and its
/// output and errors would be written into that file (a lock, a repository's config).
/// Aborts where that cannot be done, as std's start does.
fn keep_standard_descriptors_open() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: three valid pollfd entries; a timeout of zero only asks.
    while unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } == -1 {
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EINTR) => continue,
            // poll refused (a sandbox may forbid it): ask each descriptor instead.
            Some(libc::EINVAL | libc::EAGAIN | libc::ENOMEM) => {
                for pollfd in &mut fds {
                    // SAFETY: F_GETFD reads the descriptor's flags, nothing else.
                    let closed = unsafe { libc::fcntl(pollfd.fd, libc::F_GETFD) } == -1
                        && std::io::Error::last_os_error().raw_os_error() == Some(libc::EBADF);
                    pollfd.revents = if closed { libc::POLLNVAL } else { 0 };
                }
                break;
            }
            _ => std::process::abort(),
        }
    }
    for pollfd in fds {
        if pollfd.revents & libc::POLLNVAL == 0 {
            continue;
        }
        // SAFETY: a NUL-terminated path; the lowest free number, the closed one, is taken.
        if unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR, 0) } == -1 {
            std::process::abort();
        }
    }
}

/// The process's arguments, `argv[0]` first: those [`start`] remembered, or std's where
/// the process began with std's start.
pub fn args_os() -> Vec<OsString> {
    let argc = ARGC.load(Ordering::Relaxed);
    let argv = ARGV.load(Ordering::Relaxed);
    if argc < 0 || argv.is_null() {
        return std::env::args_os().collect();
    }
    (0..argc as usize)
        .map(|i| {
            // SAFETY: `start`'s contract: `argc` valid strings for the process's lifetime.
            let arg = unsafe { CStr::from_ptr(*argv.add(i)) };
            OsString::from_vec(arg.to_bytes().to_vec())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without `start` (a test binary begins with std's start) the arguments are std's.
    #[test]
    fn without_start_the_arguments_are_std_s() {
        assert_eq!(args_os(), std::env::args_os().collect::<Vec<_>>());
    }
}
