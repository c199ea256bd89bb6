//! What this machine can enforce, detected once per process, fact by fact.
//!
//! Cheap facts (sysctls, the Landlock ABI, where bwrap is) are read at first use, so a
//! call that names its backend reads only what that backend depends on. Whether bwrap
//! really works (AppArmor, containers, seccomp-less kernels) is only known by running it;
//! that probe's result is cached on disk per boot and bwrap binary, so a CLI call does not
//! pay for it every time.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Serialize;

pub struct Capabilities {
    pub os: &'static str,
    pub arch: &'static str,
    kernel: OnceLock<Option<String>>,
    bwrap: OnceLock<Option<BwrapInfo>>,
    user_namespaces: OnceLock<UsernsInfo>,
    landlock_abi: OnceLock<Result<i32, String>>,
    seccomp: OnceLock<bool>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BwrapInfo {
    pub path: PathBuf,
    pub setuid: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct UsernsInfo {
    /// `user.max_user_namespaces`.
    pub max_user_namespaces: Option<u64>,
    /// Debian's `kernel.unprivileged_userns_clone`.
    pub unprivileged_userns_clone: Option<bool>,
    /// Ubuntu's `kernel.apparmor_restrict_unprivileged_userns`.
    pub apparmor_restrict_unprivileged_userns: Option<bool>,
}

fn read_sysctl(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl Capabilities {
    /// This process's facts, each detected at its first use.
    pub fn get() -> &'static Capabilities {
        static CAPS: Capabilities = Capabilities::undetected();
        &CAPS
    }

    const fn undetected() -> Capabilities {
        Capabilities {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
            kernel: OnceLock::new(),
            bwrap: OnceLock::new(),
            user_namespaces: OnceLock::new(),
            landlock_abi: OnceLock::new(),
            seccomp: OnceLock::new(),
        }
    }

    pub fn kernel(&self) -> Option<&str> {
        self.kernel
            .get_or_init(|| {
                nix::sys::utsname::uname()
                    .ok()
                    .map(|u| u.release().to_string_lossy().into_owned())
            })
            .as_deref()
    }

    pub fn running_as_root(&self) -> bool {
        nix::unistd::geteuid().is_root()
    }

    pub fn bwrap(&self) -> Option<&BwrapInfo> {
        self.bwrap
            .get_or_init(|| {
                which::which("bwrap").ok().map(|path| {
                    use std::os::unix::fs::PermissionsExt;
                    let setuid = std::fs::metadata(&path)
                        .map(|m| m.permissions().mode() & 0o4000 != 0)
                        .unwrap_or(false);
                    BwrapInfo { path, setuid }
                })
            })
            .as_ref()
    }

    pub fn user_namespaces(&self) -> &UsernsInfo {
        self.user_namespaces.get_or_init(|| UsernsInfo {
            max_user_namespaces: read_sysctl("/proc/sys/user/max_user_namespaces"),
            unprivileged_userns_clone: read_sysctl("/proc/sys/kernel/unprivileged_userns_clone")
                .map(|v| v != 0),
            apparmor_restrict_unprivileged_userns: read_sysctl(
                "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            )
            .map(|v| v != 0),
        })
    }

    /// The kernel's Landlock ABI, or why there is none.
    pub fn landlock_abi(&self) -> Result<i32, &str> {
        self.landlock_abi
            .get_or_init(landlock_abi)
            .as_ref()
            .map(|v| *v)
            .map_err(String::as_str)
    }

    pub fn seccomp(&self) -> bool {
        *self.seccomp.get_or_init(seccomp_available)
    }

    pub fn seccomp_arch_supported(&self) -> bool {
        seccomp_arch_supported()
    }

    /// Why bwrap cannot work here, judged from static facts, with the fix.
    pub fn bwrap_static_blocker(&self) -> Option<String> {
        if self.os != "linux" {
            return Some("bubblewrap is a Linux tool".into());
        }
        let Some(bwrap) = self.bwrap() else {
            return Some(
                "bubblewrap is not installed: install it (`sudo apt-get install bubblewrap`, \
                 `sudo dnf install bubblewrap`)"
                    .into(),
            );
        };
        if let Some(why) = self.seccomp_blocker() {
            return Some(why);
        }
        if bwrap.setuid || self.running_as_root() {
            return None;
        }
        let ns = self.user_namespaces();
        if ns.max_user_namespaces == Some(0) {
            return Some(
                "user namespaces are disabled (user.max_user_namespaces = 0): run \
                 `sudo sysctl -w user.max_user_namespaces=15000`"
                    .into(),
            );
        }
        if ns.unprivileged_userns_clone == Some(false) {
            return Some(
                "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0): \
                 run `sudo sysctl -w kernel.unprivileged_userns_clone=1`"
                    .into(),
            );
        }
        if ns.apparmor_restrict_unprivileged_userns == Some(true) {
            return Some(
                "AppArmor restricts unprivileged user namespaces \
                 (kernel.apparmor_restrict_unprivileged_userns = 1, Ubuntu 23.10+): run \
                 `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or install an \
                 AppArmor profile that allows userns for bwrap"
                    .into(),
            );
        }
        None
    }

    pub fn seccomp_blocker(&self) -> Option<String> {
        if self.os != "linux" {
            return Some("seccomp is a Linux feature".into());
        }
        if !self.seccomp_arch_supported() {
            return Some(format!(
                "chitti has no seccomp filter for the {} architecture",
                self.arch
            ));
        }
        if !self.seccomp() {
            return Some(
                "this kernel has no seccomp filter support (CONFIG_SECCOMP_FILTER)".into(),
            );
        }
        None
    }

    pub fn landlock_blocker(&self) -> Option<String> {
        if self.os != "linux" {
            return Some("Landlock is a Linux feature".into());
        }
        if let Some(why) = self.seccomp_blocker() {
            return Some(why);
        }
        match self.landlock_abi() {
            Err(why) => Some(why.to_string()),
            Ok(abi) => landlock_abi_blocker(abi),
        }
    }

    pub fn seatbelt_blocker(&self) -> Option<String> {
        if self.os != "macos" {
            return Some("Seatbelt (sandbox-exec) exists only on macOS".into());
        }
        if !Path::new(crate::sandbox::seatbelt::SANDBOX_EXEC).exists() {
            return Some(format!(
                "{} is missing",
                crate::sandbox::seatbelt::SANDBOX_EXEC
            ));
        }
        None
    }
}

#[cfg(target_os = "linux")]
fn landlock_abi() -> Result<i32, String> {
    crate::sandbox::linux::landlock::kernel_abi()
}

#[cfg(not(target_os = "linux"))]
fn landlock_abi() -> Result<i32, String> {
    Err("Landlock is a Linux feature".into())
}

#[cfg(target_os = "linux")]
fn landlock_abi_blocker(abi: i32) -> Option<String> {
    crate::sandbox::linux::landlock::abi_blocker(abi)
}

#[cfg(not(target_os = "linux"))]
fn landlock_abi_blocker(_abi: i32) -> Option<String> {
    Some("Landlock is a Linux feature".into())
}

#[cfg(target_os = "linux")]
fn seccomp_arch_supported() -> bool {
    crate::sandbox::linux::seccomp::arch_supported()
}

#[cfg(not(target_os = "linux"))]
fn seccomp_arch_supported() -> bool {
    false
}

/// `seccomp(SECCOMP_GET_ACTION_AVAIL)` tells whether filters are supported.
#[cfg(not(target_os = "linux"))]
fn seccomp_available() -> bool {
    false
}

#[cfg(target_os = "linux")]
fn seccomp_available() -> bool {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    let action: u32 = libc::SECCOMP_RET_ERRNO;
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        )
    };
    r == 0
}

/// Runs bwrap with the isolation chitti asks for and a trivial command. Returns bwrap's
/// error text on failure.
pub fn probe_bwrap(bwrap: &Path) -> Result<(), String> {
    let mut cmd = std::process::Command::new(bwrap);
    // bwrap names its child, so that chitti reaps it instead of leaving it to PID 1.
    #[cfg(target_os = "linux")]
    let named = crate::sandbox::linux::bwrap_init::name_child(&mut cmd)
        .map_err(|e| format!("cannot create a pipe: {e}"))?;
    let out = cmd
        .args([
            "--unshare-user",
            "--disable-userns",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-ipc",
            "--unshare-uts",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--remount-ro",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--",
            "true",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
    #[cfg(target_os = "linux")]
    crate::sandbox::linux::bwrap_init::reap_after(named);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The on-disk memo of a successful probe: valid for one boot, one uid, one bwrap binary.
pub struct ProbeCache {
    path: PathBuf,
    key: String,
}

impl ProbeCache {
    pub fn new(state_dir: &Path, bwrap: &Path) -> ProbeCache {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let mtime = std::fs::metadata(bwrap)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
            .unwrap_or(0);
        ProbeCache {
            path: ProbeCache::path(state_dir),
            // `probe`: bumped when the probe's own flags change, so that a memo of an
            // older probe is not taken for this one.
            key: format!(
                "probe=2 boot={} uid={} bwrap={} mtime={mtime}\n",
                boot.trim(),
                nix::unistd::geteuid(),
                bwrap.display()
            ),
        }
    }

    /// Where the memo is kept.
    pub fn path(state_dir: &Path) -> PathBuf {
        state_dir.join("bwrap-probe-ok")
    }

    pub fn holds(&self) -> bool {
        std::fs::read_to_string(&self.path).is_ok_and(|s| s == self.key)
    }

    pub fn record(&self) {
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::write(&self.path, &self.key);
    }

    pub fn forget(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A call that names the landlock backend reads only what Landlock depends on: where
    /// bwrap is and how user namespaces are configured stay undetected.
    #[test]
    fn an_explicit_landlock_backend_detects_only_what_it_needs() {
        use crate::sandbox::{select, Backend, BackendChoice};
        let caps = Capabilities::undetected();
        let state = tempfile::tempdir().unwrap();
        let selected = select(BackendChoice::Landlock, &caps, state.path());
        if let Ok(s) = &selected {
            assert_eq!(s.backend, Backend::Landlock);
        }
        assert!(caps.landlock_abi.get().is_some());
        assert!(caps.seccomp.get().is_some());
        assert!(caps.bwrap.get().is_none(), "bwrap was looked up");
        assert!(caps.user_namespaces.get().is_none(), "sysctls were read");
        assert!(caps.kernel.get().is_none(), "uname was called");

        // Auto selection does look for bwrap first.
        let caps = Capabilities::undetected();
        let _ = select(BackendChoice::Auto, &caps, state.path());
        assert!(caps.bwrap.get().is_some());
    }
}
