//! Leaving the teardown of a root call's masks namespace to the kernel.
//!
//! A root `sandbox exec` makes its masks' mount namespace in chitti's own process
//! (`masks`, `supervisor::spawn`), so chitti's exit drops the namespace's last reference,
//! and the teardown becomes part of that exit: unmounting its some 35 mounts, an expedited
//! RCU grace period, freeing them. That is about 0.1 ms of every such call here, and the
//! caller waits for it, as it waits for chitti's exit.
//!
//! A process that held the namespace past chitti's exit would outlive the call, and would
//! be left to PID 1 to reap: where PID 1 reaps nothing, as in many containers, a zombie
//! per call. So the namespace is held by a file instead, registered with an io_uring:
//! chitti's exit closes the ring, and the kernel releases a closed ring's files from a
//! worker of its own. That worker drops the namespace's last reference a few milliseconds
//! after chitti has exited, and tears it down there. Nothing runs in the namespace by
//! then (the command's processes are dead before chitti exits), and no process is left.
//!
//! A session's root call gets the same (`supervisor::spawn`): its namespace is made by a
//! thread that ends once the command has joined it, so the command's exit, which the
//! supervisor waits for, would tear it down. The thread leaves a ring holding it to the
//! call, which keeps the ring until the call is over.
//!
//! Where io_uring cannot be had (a kernel before 5.1, `kernel.io_uring_disabled`, a
//! seccomp filter that refuses it), nothing changes: the namespace goes with chitti's
//! exit, as before.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::OnceLock;

/// The ring holding the namespace, kept open until the process exits.
static RING: OnceLock<OwnedFd> = OnceLock::new();

/// Has the calling thread's mount namespace released by the kernel after this process
/// exits, rather than by the exit itself. `own_pidfd` is a pidfd of this process, if at
/// hand (it spares a lookup in /proc). Whether it was done; once per process.
///
/// Only for a chitti with a single thread that made the namespace for one call and exits
/// after it (`MasksMadeBy::Chitti`): the namespace then stays until the process ends.
pub fn at_exit(own_pidfd: Option<BorrowedFd>) -> bool {
    if RING.get().is_some() {
        return false;
    }
    match ring_holding_own(own_pidfd) {
        Some(ring) => RING.set(ring).is_ok(),
        None => false,
    }
}

/// A ring holding the calling thread's mount namespace: once the ring is closed, the
/// kernel drops that hold from a worker of its own. A session's masks thread, whose
/// namespace the command has joined, leaves one to its call, closed when the call is over
/// (the last process in the namespace would otherwise tear it down in its exit).
pub fn ring_holding_own(own_pidfd: Option<BorrowedFd>) -> Option<OwnedFd> {
    ring_holding(&current_namespace(own_pidfd)?)
}

/// `PIDFD_GET_MNT_NAMESPACE`, `_IO(0xFF, 3)` (Linux 6.11).
const PIDFD_GET_MNT_NAMESPACE: u32 = 0xFF03;

/// The calling thread's mount namespace as a file: from the pidfd (the main thread's:
/// pass one only from the main thread), else from /proc.
fn current_namespace(own_pidfd: Option<BorrowedFd>) -> Option<OwnedFd> {
    if let Some(pidfd) = own_pidfd {
        // SAFETY: the ioctl takes no argument and returns a new descriptor or -1.
        let fd = unsafe { libc::ioctl(pidfd.as_raw_fd(), PIDFD_GET_MNT_NAMESPACE as _, 0) };
        if fd >= 0 {
            // SAFETY: a descriptor the kernel has just given this process.
            return Some(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
    std::fs::File::open("/proc/thread-self/ns/mnt")
        .ok()
        .map(OwnedFd::from)
}

/// A new io_uring (close-on-exec, as every ring is) with `file` registered: until the
/// ring is closed and the kernel's worker has released it, `file` stays open.
fn ring_holding(file: &OwnedFd) -> Option<OwnedFd> {
    let ring = new_ring().ok()?;
    const IORING_REGISTER_FILES: u32 = 2;
    let files = [file.as_raw_fd()];
    // SAFETY: `files` holds one descriptor, as the count says.
    let registered = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            ring.as_raw_fd(),
            IORING_REGISTER_FILES,
            files.as_ptr(),
            1u32,
        )
    };
    (registered == 0).then_some(ring)
}

/// A new io_uring of one entry, or why there is none (a seccomp filter, the sysctl
/// `kernel.io_uring_disabled`, a kernel without io_uring).
fn new_ring() -> std::io::Result<OwnedFd> {
    // `struct io_uring_params` (120 bytes): all zero asks for nothing special.
    let mut params = [0u32; 30];
    // SAFETY: the kernel fills in `params`, which is as large as it expects.
    let ring = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if ring < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel has just given this process.
    Ok(unsafe { OwnedFd::from_raw_fd(ring as RawFd) })
}

/// The 64-bit ID of the mount namespace `namespace` (a `/proc/PID/ns/mnt` file), where the
/// kernel can say (`NS_GET_MNTNS_ID`, Linux 6.11). For tests and diagnostics: a call does
/// not need it.
pub fn namespace_id(namespace: BorrowedFd) -> Option<u64> {
    // _IOR(0xb7, 5, u64)
    const NS_GET_MNTNS_ID: u32 = 0x8008_b705;
    let mut id = 0u64;
    // SAFETY: the kernel writes one u64.
    let r = unsafe { libc::ioctl(namespace.as_raw_fd(), NS_GET_MNTNS_ID as _, &mut id) };
    (r == 0).then_some(id)
}

/// Whether the mount namespace with ID `id` still exists: `listmount` (a namespace named
/// by ID: Linux 6.11) lists its mounts or answers ENOENT. Needs CAP_SYS_ADMIN over the
/// namespace's user namespace. For tests and diagnostics, as [`namespace_id`].
pub fn namespace_exists(id: u64) -> std::io::Result<bool> {
    use crate::policy::mount_aliases::{MountIdRequest, LSMT_ROOT, SYS_STATMOUNT_AND_LISTMOUNT};
    let Some((_, sys_listmount)) = SYS_STATMOUNT_AND_LISTMOUNT else {
        return Err(std::io::Error::from_raw_os_error(libc::ENOSYS));
    };
    let request = MountIdRequest::new(LSMT_ROOT, 0, id);
    let mut ids = [0u64; 64];
    // SAFETY: the kernel writes at most `ids.len()` IDs.
    let n = unsafe { libc::syscall(sys_listmount, &request, ids.as_mut_ptr(), ids.len(), 0) };
    if n >= 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::ENOENT) => Ok(false),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A namespace handed to a ring outlives the process that made it only until the
    /// kernel has released the ring: it goes away on its own, nothing else holding it.
    #[test]
    fn a_namespace_held_by_a_ring_goes_away_after_the_process() {
        // A child with a namespace of its own: as root a mount namespace, as a user
        // inside a user namespace too.
        let flags = if nix::unistd::geteuid().is_root() {
            libc::CLONE_NEWNS
        } else {
            libc::CLONE_NEWUSER | libc::CLONE_NEWNS
        };
        let (report_read, report_write) = nix::unistd::pipe().unwrap();
        let (go_read, go_write) = nix::unistd::pipe().unwrap();
        crate::allocator_survives_fork();
        // SAFETY: the child makes system calls (and opens one file), then `_exit`s.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
        if child == 0 {
            // Whether it made one, the namespace's ID, whether a ring holds it.
            let mut report = [0u8; 10];
            unsafe {
                // The parent's ends: the wait below ends when the parent closes its own.
                libc::close(go_write.as_raw_fd());
                libc::close(report_read.as_raw_fd());
                if libc::unshare(flags) == 0 {
                    report[0] = 1;
                    if let Some(namespace) = current_namespace(None) {
                        let id = namespace_id(namespace.as_fd()).unwrap_or(0);
                        report[1..9].copy_from_slice(&id.to_ne_bytes());
                        // Left open: the exit closes it, as chitti's does.
                        let ring = ring_holding(&namespace).map(std::mem::forget);
                        report[9] = u8::from(ring.is_some());
                    }
                }
                libc::write(
                    report_write.as_raw_fd(),
                    report.as_ptr().cast(),
                    report.len(),
                );
                let mut byte = 0u8;
                libc::read(go_read.as_raw_fd(), (&mut byte as *mut u8).cast(), 1);
                libc::_exit(0);
            }
        }
        drop(report_write);
        drop(go_read);
        let mut report = [0u8; 10];
        let read = nix::unistd::read(&report_read, &mut report).unwrap();
        let reap = || unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        if read != report.len() || report[0] == 0 {
            drop(go_write);
            reap();
            eprintln!("SKIP: a child cannot have a mount namespace of its own here");
            return;
        }
        let id = u64::from_ne_bytes(report[1..9].try_into().unwrap());
        // Seen while its process lives: what follows can tell it gone from hidden.
        let seen = match id {
            0 => Err(std::io::Error::other("no ID")),
            id => namespace_exists(id),
        };
        if !matches!(seen, Ok(true)) {
            drop(go_write);
            reap();
            eprintln!("SKIP: this kernel cannot find a mount namespace by its ID (6.11): {seen:?}");
            return;
        }
        match new_ring() {
            Ok(_) => assert_eq!(
                report[9], 1,
                "io_uring works here, yet no ring took the namespace"
            ),
            Err(e) => eprintln!(
                "SKIP (the ring only): no io_uring here ({e}); the exit releases the namespace"
            ),
        }
        drop(go_write);
        assert_eq!(reap(), child);
        // The kernel's worker runs within milliseconds; a stalled machine gets 10 s.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while namespace_exists(id).unwrap() {
            assert!(
                std::time::Instant::now() < deadline,
                "the namespace is still there 10 s after its process exited"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
