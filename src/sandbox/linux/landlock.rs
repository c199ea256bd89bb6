//! Applies the planned rules (`sandbox::landlock_rules`) as a Landlock ruleset.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use landlock::{
    make_bitflags, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};
use nix::NixPath;

use crate::sandbox::landlock_rules::{Grant, Rule};

/// The ABI chitti is tested against. V6 is the first with signal and abstract-socket
/// scoping; newer kernels are used at this level (their extra rights stay unhandled).
pub const PINNED_ABI: ABI = ABI::V6;
pub const PINNED_ABI_NUMBER: i32 = 6;

#[derive(Debug, thiserror::Error)]
#[error("landlock: {0}")]
pub struct LandlockError(String);

fn err(context: &str) -> impl FnOnce(landlock::RulesetError) -> LandlockError + '_ {
    move |e| LandlockError(format!("{context}: {e}"))
}

fn read_dir_access() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{ ReadFile | ReadDir | Execute })
}

fn read_file_access() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{ ReadFile | Execute })
}

fn device_rw_access() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{ ReadFile | WriteFile | Truncate | IoctlDev })
}

/// Builds (but does not enforce) the ruleset. Enforcement happens in the command
/// between fork and exec (`landlock_restrict_self` on the ruleset's descriptor).
pub fn build(rules: &[Rule]) -> Result<RulesetCreated, LandlockError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(PINNED_ABI))
        .map_err(err("handling filesystem access"))?
        .scope(Scope::from_all(PINNED_ABI))
        .map_err(err("scoping signals and abstract sockets"))?
        .create()
        .map_err(err("creating the ruleset"))?;
    for rule in rules {
        let (is_dir, access) = match rule.grant {
            Grant::List => (true, AccessFs::ReadDir.into()),
            Grant::ReadTree => (true, read_dir_access()),
            Grant::ReadFile => (false, read_file_access()),
            Grant::Device => (false, device_rw_access()),
            Grant::Write => (true, AccessFs::from_all(PINNED_ABI)),
        };
        // The read allow-list names the siblings of every directory on the way to a hidden
        // path, listed moments ago; one of them may be gone by now (another program
        // removed it). A rule that only allows reading can be left out then: without it
        // the path is denied, the safe side. A writable root must exist.
        let optional = !matches!(rule.grant, Grant::Write);
        ruleset = add(ruleset, &rule.path, is_dir, access, optional)?;
    }
    Ok(ruleset)
}

/// Opens `path` only to name it in a rule (`O_PATH`): no read permission is needed, and a
/// device or a FIFO is not actually opened. Not landlock's `PathFd::new`, which goes
/// through std's `OpenOptions`: on musl, std drops `O_PATH` from custom flags (musl's
/// `O_ACCMODE` includes it), so `/dev/tty` was opened for reading, which fails without a
/// controlling terminal, and a FIFO would block. The system call itself, not libc's
/// `open`: musl follows an `O_CLOEXEC` open with an `fcntl` for kernels older than 2.6.23,
/// one more system call per rule (about 200 rules per call as root).
fn open_path(path: &Path) -> nix::Result<OwnedFd> {
    let fd = path.with_nix_path(|path| unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC,
        )
    })?;
    if fd < 0 {
        return Err(nix::errno::Errno::last());
    }
    // SAFETY: a descriptor the kernel has just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn add(
    ruleset: RulesetCreated,
    path: &Path,
    is_dir: bool,
    access: BitFlags<AccessFs>,
    optional: bool,
) -> Result<RulesetCreated, LandlockError> {
    let fd = match open_path(path) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT) if optional => return Ok(ruleset),
        Err(e) => {
            return Err(LandlockError(format!(
                "cannot open {}: {}",
                path.display(),
                std::io::Error::from(e)
            )))
        }
    };
    let access = if is_dir {
        access
    } else {
        access & AccessFs::from_file(PINNED_ABI)
    };
    ruleset
        .add_rule(PathBeneath::new(fd, access))
        .map_err(|e| LandlockError(format!("rule for {}: {e}", path.display())))
}

/// The kernel's Landlock ABI version, or why there is none.
pub fn kernel_abi() -> Result<i32, String> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v >= 0 {
        return Ok(v as i32);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => Err(
            "Landlock is built into this kernel but disabled: add `landlock` to the `lsm=` \
             kernel parameter"
                .into(),
        ),
        _ => Err(
            "this kernel has no Landlock (needs Linux 5.13 or newer with CONFIG_SECURITY_LANDLOCK)"
                .into(),
        ),
    }
}

/// Why the landlock backend cannot enforce chitti's guarantees here, if it cannot.
pub fn abi_blocker(abi: i32) -> Option<String> {
    (abi < PINNED_ABI_NUMBER).then(|| {
        format!(
            "kernel Landlock ABI {abi} is older than {PINNED_ABI_NUMBER} (Linux 6.12): it cannot \
             keep signals and abstract unix sockets inside the sandbox; install bubblewrap or \
             upgrade the kernel"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::fcntl::OFlag;
    use nix::sys::stat::Mode;

    /// A temporary directory and a path in it that does not exist; None, after saying
    /// SKIP, where this kernel's Landlock cannot be used.
    fn missing_path_where_landlock_works() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
        if let Some(why) = kernel_abi().map_or_else(Some, abi_blocker) {
            eprintln!("SKIP: {why}");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        Some((dir, gone))
    }

    fn rule(path: &Path, grant: Grant) -> Rule {
        Rule {
            path: path.to_path_buf(),
            grant,
        }
    }

    /// A directory listed while planning and removed before the ruleset is built (another
    /// program's temporary directory, say) costs its read rule, not the whole call.
    #[test]
    fn a_read_rule_for_a_vanished_path_is_left_out() {
        let Some((dir, gone)) = missing_path_where_landlock_works() else {
            return;
        };
        for grant in [Grant::List, Grant::ReadTree, Grant::ReadFile, Grant::Device] {
            let rules = [rule(dir.path(), Grant::Write), rule(&gone, grant)];
            assert!(build(&rules).is_ok(), "{grant:?}");
        }
    }

    #[test]
    fn a_missing_writable_root_is_an_error() {
        let Some((_dir, gone)) = missing_path_where_landlock_works() else {
            return;
        };
        let message = build(&[rule(&gone, Grant::Write)])
            .err()
            .unwrap()
            .to_string();
        assert!(message.contains("gone"), "{message}");
    }

    /// A rule names its path with an `O_PATH` descriptor, which opens nothing: a FIFO
    /// (opened for reading, it would wait for a writer) and a file nobody may read are
    /// named all the same.
    #[test]
    fn rule_paths_are_opened_as_paths_only() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let sealed = dir.path().join("sealed");
        std::fs::write(&sealed, "x").unwrap();
        std::fs::set_permissions(&sealed, std::os::unix::fs::PermissionsExt::from_mode(0o000))
            .unwrap();
        for path in [&fifo, &sealed, &dir.path().to_path_buf()] {
            let fd = open_path(path).unwrap();
            let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL).unwrap();
            assert!(
                OFlag::from_bits_truncate(flags).contains(OFlag::O_PATH),
                "{} opened with {flags:#o}",
                path.display()
            );
        }
    }
}
