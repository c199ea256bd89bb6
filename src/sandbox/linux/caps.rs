//! Dropping every capability, for a helper started by root.
//!
//! Order matters: securebits and the bounding set need CAP_SETPCAP, so they go first,
//! and the capability sets are cleared last. With SECBIT_NOROOT locked and an empty
//! bounding set, exec'ing anything (even a setuid-root file) grants nothing back.

use std::io;

const SECBITS_LOCKED_DOWN: libc::c_ulong = 0x01 // SECBIT_NOROOT
    | 0x02 // SECBIT_NOROOT_LOCKED
    | 0x04 // SECBIT_NO_SETUID_FIXUP
    | 0x08 // SECBIT_NO_SETUID_FIXUP_LOCKED
    | 0x20 // SECBIT_KEEP_CAPS_LOCKED
    | 0x40 // SECBIT_NO_CAP_AMBIENT_RAISE
    | 0x80; // SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
const CAP_SETPCAP: u32 = 8;

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Whether capability number `cap` is in the calling process's effective set (no when
/// the kernel does not say).
pub fn effective(cap: u32) -> bool {
    let word = (cap / 32) as usize;
    capget().is_ok_and(|data| word < data.len() && data[word].effective & (1 << (cap % 32)) != 0)
}

fn has_setpcap() -> io::Result<bool> {
    let data = capget()?;
    Ok(data[0].effective & (1 << CAP_SETPCAP) != 0)
}

fn capget() -> io::Result<[CapData; 2]> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    check(unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) as i32 })?;
    Ok(data)
}

/// Drops every capability of the calling process. Async-signal-safe (syscalls only), so
/// it can run between fork and exec. A process without CAP_SETPCAP cannot shrink its
/// bounding set (so it does not look up how large it is); with no_new_privs set it
/// cannot gain anything from it either.
pub fn drop_all() -> io::Result<()> {
    if has_setpcap()? {
        check(unsafe { libc::prctl(libc::PR_SET_SECUREBITS, SECBITS_LOCKED_DOWN, 0, 0, 0) })?;
        // Every capability the kernel knows: up to the first number it answers EINVAL
        // for (one call more than there are capabilities, instead of looking up their
        // number first). EINVAL for CAP_CHOWN, which every kernel knows, means something
        // answers in the kernel's place: then the set cannot be trusted to be empty.
        for cap in 0..64 {
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } < 0 {
                let error = io::Error::last_os_error();
                if cap == 0 || error.raw_os_error() != Some(libc::EINVAL) {
                    return Err(error);
                }
                break;
            }
        }
    }
    check(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    })?;
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    check(unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) as i32 })?;
    let after = capget()?;
    if after
        .iter()
        .any(|d| d.effective != 0 || d.permitted != 0 || d.inheritable != 0)
    {
        return Err(io::Error::other("capabilities remain after capset"));
    }
    Ok(())
}

pub fn set_no_new_privs() -> io::Result<()> {
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In a forked child (root with CAP_SETPCAP: CI), every capability the kernel knows
    /// leaves the bounding set; anyone else keeps it (and cannot use it: no_new_privs).
    #[test]
    fn the_bounding_set_is_emptied_up_to_the_kernel_s_last_capability() {
        let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap") else {
            eprintln!("SKIP: no /proc/sys/kernel/cap_last_cap to compare with");
            return;
        };
        let last: u32 = text.trim().parse().unwrap();
        let can_drop = has_setpcap().unwrap();
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // System calls only: this process has other threads.
            let ok = drop_all().is_ok();
            let kept = |cap: u32| unsafe {
                libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0)
            };
            let code = if !ok {
                1
            } else if can_drop && (0..=last).any(|cap| kept(cap) != 0) {
                2
            } else if !can_drop && (0..=last).all(|cap| kept(cap) == 0) {
                3
            } else {
                0
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status), "{status:#x}");
        let code = libc::WEXITSTATUS(status);
        assert_eq!(code, 0, "1: drop_all failed, 2: a capability was left in the bounding set, 3: one was dropped without CAP_SETPCAP (can drop: {can_drop})");
    }
}
