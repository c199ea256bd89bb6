//! Applies the planned rules (`sandbox::landlock_rules`) as a Landlock ruleset.

use std::os::fd::OwnedFd;
use std::path::Path;

use landlock::{
    make_bitflags, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};

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
/// device or a FIFO is not actually opened. Every planned path is canonical (writable
/// roots, the ancestors of hidden paths, and their non-symlink entries), so any symlink met
/// on the way was put there after planning: following it would grant whatever it points
/// at, a hidden path included. `openat2` with `RESOLVE_NO_SYMLINKS` refuses such a path
/// (ELOOP) in any component. (Not landlock's `PathFd::new`, which goes through std's
/// `OpenOptions`: on musl, std drops `O_PATH` from custom flags.)
fn open_path(path: &Path) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
    match nix::fcntl::openat2(nix::fcntl::AT_FDCWD, path, how) {
        // A container's seccomp filter may not know openat2 (Landlock ABI 6 means Linux
        // 6.12 or newer, which has it): check the last component at least.
        Err(nix::errno::Errno::ENOSYS) => open_path_without_openat2(path),
        other => other,
    }
}

fn open_path_without_openat2(path: &Path) -> nix::Result<OwnedFd> {
    let fd = nix::fcntl::open(
        path,
        OFlag::O_PATH | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW,
        nix::sys::stat::Mode::empty(),
    )?;
    if nix::sys::stat::fstat(&fd)?.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return Err(nix::errno::Errno::ELOOP);
    }
    Ok(fd)
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
        // Replaced by (or moved under) a symlink since planning: no grant, the safe side.
        Err(nix::errno::Errno::ELOOP) if optional => return Ok(ruleset),
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

    /// Runs `sh -c script` in `dir` under `rules` (Landlock only, in the child between
    /// fork and exec) and returns its exit status.
    fn run_restricted(rules: &[Rule], dir: &Path, script: &str) -> std::process::ExitStatus {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let ruleset: Option<OwnedFd> = build(rules).unwrap().into();
        let ruleset = ruleset.unwrap();
        let fd = ruleset.as_raw_fd();
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.args(["-c", script]).current_dir(dir);
        // SAFETY: only system calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    || libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.status().unwrap()
    }

    /// Planning lists a hidden file's siblings; one of them replaced by a symlink to the
    /// hidden file before the ruleset is built must not carry its grant over to the
    /// target. Decided by what reaches the writable directory.
    #[test]
    fn a_sibling_swapped_for_a_symlink_after_planning_grants_nothing() {
        let Some((dir, _)) = missing_path_where_landlock_works() else {
            return;
        };
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("hidden")).unwrap();
        std::fs::write(root.join("hidden/key"), "SECRET\n").unwrap();
        std::fs::create_dir_all(root.join("sibling")).unwrap();
        std::fs::write(root.join("sibling/key"), "public\n").unwrap();
        let out = root.join("out");
        std::fs::create_dir(&out).unwrap();
        // As planned for a hidden `hidden`: its sibling, the writable directory, and the
        // system directories sh and cat need; the directory holding them is only listed.
        let rules = [
            rule(Path::new("/usr"), Grant::ReadTree),
            rule(Path::new("/bin"), Grant::ReadTree),
            rule(Path::new("/lib"), Grant::ReadTree),
            rule(Path::new("/lib64"), Grant::ReadTree),
            rule(Path::new("/etc"), Grant::ReadTree),
            rule(&root, Grant::List),
            rule(&root.join("sibling"), Grant::ReadTree),
            rule(&out, Grant::Write),
        ];
        let copy = "cat sibling/key > out/copy";
        // The control: the sibling as planned is readable, so the probe can succeed.
        run_restricted(&rules, &root, copy);
        assert_eq!(
            std::fs::read_to_string(out.join("copy")).unwrap(),
            "public\n"
        );
        std::fs::remove_file(out.join("copy")).unwrap();

        std::fs::rename(root.join("sibling"), root.join("old-sibling")).unwrap();
        std::os::unix::fs::symlink(root.join("hidden"), root.join("sibling")).unwrap();
        run_restricted(&rules, &root, copy);
        let copied = std::fs::read_to_string(out.join("copy")).unwrap_or_default();
        assert!(
            !copied.contains("SECRET"),
            "the swapped-in symlink granted the hidden file"
        );
    }

    #[test]
    fn without_openat2_a_symlink_in_the_last_component_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("link")).unwrap();
        assert!(open_path_without_openat2(&dir.path().join("real")).is_ok());
        assert_eq!(
            open_path_without_openat2(&dir.path().join("link")).err(),
            Some(nix::errno::Errno::ELOOP)
        );
        assert_eq!(
            open_path(&dir.path().join("link/x")).err(),
            Some(nix::errno::Errno::ELOOP)
        );
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
