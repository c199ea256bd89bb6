//! Policy → Landlock ruleset.
//!
//! Landlock is an allow-list whose grants are inherited by everything beneath a granted
//! directory, so "read everything except ~/.ssh" is built by granting the siblings of
//! every denied path along its ancestry, instead of an ancestor itself. Ancestors only get
//! directory listing. /dev is treated as an ancestor of everything in it, so only the
//! listed harmless devices are granted. Writes are granted on the writable roots alone.

use std::path::{Path, PathBuf};

use landlock::{
    make_bitflags, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};

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

/// The only device nodes granted: they reach nothing outside the process. Everything
/// else in /dev (raw disks, /dev/mem, /dev/port, other terminals) stays unreadable, like
/// bubblewrap's minimal /dev.
const SAFE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

fn read_dir_access() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{ ReadFile | ReadDir | Execute })
}

fn read_file_access() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{ ReadFile | Execute })
}

fn device_rw_access() -> BitFlags<AccessFs> {
    make_bitflags!(AccessFs::{ ReadFile | WriteFile | Truncate | IoctlDev })
}

/// What the ruleset is built from.
pub struct RulesetSpec<'a> {
    /// Directories with full access.
    pub writable: &'a [PathBuf],
    /// Canonical paths that must stay unreadable.
    pub deny_read: &'a [PathBuf],
    /// Terminal devices the command was handed as stdio; it may keep using them.
    pub terminals: &'a [PathBuf],
}

/// Builds (but does not enforce) the ruleset. Enforcement happens in the child between
/// fork and exec with [`RulesetCreated::restrict_self`].
pub fn build(spec: &RulesetSpec) -> Result<RulesetCreated, LandlockError> {
    let deny = spec.deny_read;
    // /dev is never granted as a whole: only SAFE_DEVICES below.
    let mut ancestors: Vec<PathBuf> = vec![PathBuf::from("/"), PathBuf::from("/dev")];
    for path in deny {
        let mut cur = path.parent();
        while let Some(dir) = cur {
            if !ancestors.iter().any(|a| a == dir) {
                ancestors.push(dir.to_path_buf());
            }
            cur = dir.parent();
        }
    }

    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(PINNED_ABI))
        .map_err(err("handling filesystem access"))?
        .scope(Scope::from_all(PINNED_ABI))
        .map_err(err("scoping signals and abstract sockets"))?
        .create()
        .map_err(err("creating the ruleset"))?;

    for dir in &ancestors {
        ruleset = add(ruleset, dir, true, AccessFs::ReadDir.into())?;
        if dir == Path::new("/dev") {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let child = entry.path();
            if ancestors.contains(&child) || deny.contains(&child) {
                continue;
            }
            let Ok(file_type) = entry.file_type() else {
                continue;
            };
            // A symlink is followed when used and then checked at its target; granting
            // the link's target here could re-open a denied path.
            if file_type.is_symlink() {
                continue;
            }
            let is_dir = file_type.is_dir();
            let access = if is_dir {
                read_dir_access()
            } else {
                read_file_access()
            };
            ruleset = add(ruleset, &child, is_dir, access)?;
        }
    }
    for dev in SAFE_DEVICES {
        if Path::new(dev).exists() {
            ruleset = add(ruleset, Path::new(dev), false, device_rw_access())?;
        }
    }
    for tty in spec.terminals {
        ruleset = add(ruleset, tty, false, device_rw_access())?;
    }
    for root in spec.writable {
        ruleset = add(ruleset, root, true, AccessFs::from_all(PINNED_ABI))?;
    }
    Ok(ruleset)
}

fn add(
    ruleset: RulesetCreated,
    path: &Path,
    is_dir: bool,
    access: BitFlags<AccessFs>,
) -> Result<RulesetCreated, LandlockError> {
    let fd = PathFd::new(path)
        .map_err(|e| LandlockError(format!("cannot open {}: {e}", path.display())))?;
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
pub fn blocker() -> Option<String> {
    match kernel_abi() {
        Err(e) => Some(e),
        Ok(v) if v < PINNED_ABI_NUMBER => Some(format!(
            "kernel Landlock ABI {v} is older than {PINNED_ABI_NUMBER} (Linux 6.12): it cannot keep \
             signals and abstract unix sockets inside the sandbox; install bubblewrap or upgrade \
             the kernel"
        )),
        Ok(_) => None,
    }
}
