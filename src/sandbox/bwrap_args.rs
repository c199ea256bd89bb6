//! Policy → bubblewrap arguments. A pure function, so the argument list can be checked
//! by golden tests and printed by `chitti sandbox profile`.

use std::ffi::OsString;
use std::os::fd::RawFd;
use std::path::{Path, PathBuf};

use crate::policy::Policy;

/// Per-call inputs that are not part of the policy.
#[derive(Debug, Clone)]
pub struct CallArgs {
    pub cwd: PathBuf,
    /// Descriptors holding raw seccomp programs (`--add-seccomp-fd`).
    pub seccomp_fds: Vec<RawFd>,
    /// Descriptor for bwrap's JSON status (`--json-status-fd`).
    pub status_fd: Option<RawFd>,
}

/// What a masked credential location is, on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    Dir,
    Other,
}

fn kind_of(path: &Path) -> PathKind {
    if path.is_dir() {
        PathKind::Dir
    } else {
        PathKind::Other
    }
}

/// The directories the sandbox gets fresh (`--dev`, `--proc`, `--tmpfs`) instead of the
/// host's: what the host has there is not in the sandbox, unless bound back.
pub const FRESH_DIRS: [&str; 4] = ["/tmp", "/run", "/dev", "/proc"];

pub fn args(policy: &Policy, call: &CallArgs, command: &[OsString]) -> Vec<OsString> {
    args_with(policy, call, command, kind_of)
}

/// As [`args`], with the filesystem lookup injected (tests describe paths that do not exist).
pub fn args_with(
    policy: &Policy,
    call: &CallArgs,
    command: &[OsString],
    kind: impl Fn(&Path) -> PathKind,
) -> Vec<OsString> {
    let mut a = Args::default();
    // Session and lifetime: a new session has no controlling terminal (TIOCSTI,
    // CVE-2017-5226); the sandbox dies with chitti.
    a.flag("--new-session");
    a.flag("--die-with-parent");
    // Namespaces. The user namespace is requested explicitly so that root gets one too,
    // and nested user namespaces are disabled.
    a.flag("--unshare-user");
    a.flag("--disable-userns");
    a.flag("--unshare-pid");
    a.flag("--unshare-ipc");
    a.flag("--unshare-uts");
    a.flag("--unshare-cgroup-try");
    if !policy.network {
        a.flag("--unshare-net");
    }
    // bwrap keeps capabilities for uid 0 unless told otherwise.
    a.flag("--cap-drop");
    a.flag("ALL");

    // The host, read-only, then fresh kernel interfaces and private runtime directories.
    a.pair("--ro-bind", "/", "/");
    a.one("--dev", "/dev");
    a.one("--proc", "/proc");
    // Read-only, as on landlock (whose rules grant no write there): the kernel lets host
    // uid 0 write sysctls (`kernel.core_pattern`, which runs a program as root outside
    // every namespace), IRQ affinities and the like by file mode alone, no capability
    // needed, and run by root the sandbox's uid 0 is host uid 0. bubblewrap 0.8 covers
    // /proc/sys itself only where a write-access probe of the directory succeeds, which
    // procfs always refuses.
    a.one("--remount-ro", "/proc");
    a.one("--tmpfs", "/tmp");
    if !policy.private_tmp {
        a.one("--remount-ro", "/tmp");
    }
    // /run holds host sockets (D-Bus, docker, the user's runtime dir): hide it.
    a.one("--tmpfs", "/run");
    if policy.network {
        // /etc/resolv.conf often points into /run; name resolution needs it.
        a.pair(
            "--ro-bind-try",
            "/run/systemd/resolve",
            "/run/systemd/resolve",
        );
    }
    a.one("--remount-ro", "/run");

    // A workspace that no writable root holds (a read-only profile) is still the
    // command's to read, and to start in, even beneath the fresh /tmp or /run. Bound
    // before the writable roots, which may lie inside it.
    let workspace = &policy.workspace;
    let hidden = [Path::new("/tmp"), Path::new("/run")]
        .iter()
        .any(|fresh| workspace.starts_with(fresh));
    if hidden
        && !policy
            .writable
            .iter()
            .any(|root| workspace.starts_with(root))
    {
        a.pair("--ro-bind", workspace, workspace);
    }
    for root in &policy.writable {
        a.pair("--bind", root, root);
    }
    // A bind mount cannot be renamed or removed (EBUSY), so `.git` stays where it is
    // and a replacement `.git/hooks` cannot be slipped in.
    // Only inside a writable root: a bind is writable, and what lies outside them is
    // read-only (and so cannot be moved) already.
    for pinned in &policy.pinned {
        let inside = policy.writable.iter().any(|root| pinned.starts_with(root));
        if inside && kind(pinned) == PathKind::Dir {
            a.pair("--bind", pinned, pinned);
        }
    }
    for ro in &policy.read_only {
        a.pair("--ro-bind", ro, ro);
    }
    // What lies in the fresh directories is not the host's, unless bound back above
    // (and a mask could not be mounted there: they are read-only).
    let resolve = Path::new("/run/systemd/resolve");
    let shown = |path: &Path| {
        !FRESH_DIRS.iter().any(|dir| path.starts_with(dir))
            || path.starts_with(workspace)
            || policy.writable.iter().any(|root| path.starts_with(root))
            || (policy.network && path.starts_with(resolve))
    };
    for denied in policy.deny_read.iter().filter(|p| shown(p)) {
        match kind(denied) {
            PathKind::Dir => {
                a.one("--tmpfs", denied);
                a.one("--remount-ro", denied);
            }
            PathKind::Other => a.pair("--ro-bind", "/dev/null", denied),
        }
    }

    a.one("--chdir", &call.cwd);
    for fd in &call.seccomp_fds {
        a.one("--add-seccomp-fd", fd.to_string());
    }
    if let Some(fd) = call.status_fd {
        a.one("--json-status-fd", fd.to_string());
    }
    a.flag("--");
    a.0.extend(command.iter().cloned());
    a.0
}

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn flag(&mut self, f: &str) {
        self.0.push(f.into());
    }
    fn one(&mut self, f: &str, v: impl AsRef<std::ffi::OsStr>) {
        self.0.push(f.into());
        self.0.push(v.as_ref().into());
    }
    fn pair(
        &mut self,
        f: &str,
        src: impl AsRef<std::ffi::OsStr>,
        dest: impl AsRef<std::ffi::OsStr>,
    ) {
        self.0.push(f.into());
        self.0.push(src.as_ref().into());
        self.0.push(dest.as_ref().into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Limits;
    use std::time::Duration;

    fn policy(network: bool) -> Policy {
        Policy {
            profile: "workspace-write".into(),
            workspace: "/w".into(),
            writable: vec!["/w".into()],
            private_tmp: true,
            deny_read: vec!["/h/.ssh".into(), "/h/.netrc".into()],
            deny_read_by_inode: false,
            pinned: vec!["/w/.git".into()],
            read_only: vec!["/w/.git/hooks".into(), "/w/.git/config".into()],
            absent: vec![],
            network,
            env: vec![],
            limits: Limits {
                timeout_seconds: 10,
                max_processes: None,
                max_open_files: None,
                max_file_size_mb: None,
                max_memory_mb: None,
            },
            timeout: Duration::from_secs(10),
            state_dir: PathBuf::from("/home/u/.local/state/chitti"),
        }
    }

    fn render(policy: &Policy) -> String {
        let call = CallArgs {
            cwd: "/w/src".into(),
            seccomp_fds: vec![5, 6],
            status_fd: Some(7),
        };
        let kind = |p: &Path| {
            if p.ends_with(".netrc") || p.ends_with("config") {
                PathKind::Other
            } else {
                PathKind::Dir
            }
        };
        args_with(
            policy,
            &call,
            &["sh".into(), "-c".into(), "true".into()],
            kind,
        )
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
    }

    #[test]
    fn golden_workspace_write() {
        assert_eq!(
            render(&policy(false)),
            "--new-session --die-with-parent --unshare-user --disable-userns --unshare-pid \
             --unshare-ipc --unshare-uts --unshare-cgroup-try --unshare-net --cap-drop ALL \
             --ro-bind / / --dev /dev --proc /proc --remount-ro /proc --tmpfs /tmp \
             --tmpfs /run --remount-ro /run \
             --bind /w /w --bind /w/.git /w/.git --ro-bind /w/.git/hooks /w/.git/hooks \
             --ro-bind /w/.git/config /w/.git/config --tmpfs /h/.ssh --remount-ro /h/.ssh \
             --ro-bind /dev/null /h/.netrc --chdir /w/src --add-seccomp-fd 5 \
             --add-seccomp-fd 6 --json-status-fd 7 -- sh -c true"
        );
    }

    #[test]
    fn network_profile_keeps_the_network_namespace_and_resolver() {
        let out = render(&policy(true));
        assert!(!out.contains("--unshare-net"));
        assert!(out.contains("--ro-bind-try /run/systemd/resolve /run/systemd/resolve"));
    }

    #[test]
    fn read_only_tmp_when_profile_has_no_tmp() {
        let mut p = policy(false);
        p.private_tmp = false;
        assert!(render(&p).contains("--tmpfs /tmp --remount-ro /tmp"));
    }

    /// A read-only profile binds no writable root; a workspace beneath the fresh /tmp or
    /// /run would then be hidden (bwrap could not even start in it).
    #[test]
    fn a_read_only_workspace_beneath_a_fresh_tmpfs_is_bound_read_only() {
        for (dir, bound) in [("/tmp/w", true), ("/run/user/1/w", true), ("/w", false)] {
            let mut p = policy(false);
            p.workspace = dir.into();
            p.writable = vec![];
            let out = render(&p);
            let bind = format!("--ro-bind {dir} {dir}");
            assert_eq!(out.contains(&bind), bound, "{dir}: {out}");
            if bound {
                // After the tmpfs it would be hidden by, before the masks inside it.
                let at = out.find(&bind).unwrap();
                assert!(out.find("--remount-ro /run").unwrap() < at, "{out}");
                assert!(at < out.find("--tmpfs /h/.ssh").unwrap(), "{out}");
            }
        }
        // A writable root inside it stays writable: bound after it.
        let mut p = policy(false);
        p.workspace = "/tmp/w".into();
        p.writable = vec!["/tmp/w/out".into()];
        let out = render(&p);
        let (ro, rw) = (
            out.find("--ro-bind /tmp/w /tmp/w").unwrap(),
            out.find("--bind /tmp/w/out /tmp/w/out").unwrap(),
        );
        assert!(ro < rw, "{out}");
        // Writable: its own bind is enough.
        let mut p = policy(false);
        p.workspace = "/tmp/w".into();
        p.writable = vec!["/tmp/w".into()];
        assert!(!render(&p).contains("--ro-bind /tmp/w"));
    }

    /// A hidden path beneath the fresh /tmp, /run, /dev or /proc is not the host's there
    /// (a second mount of a credential location on the host's /tmp, say), and bwrap could
    /// not mount over it in a read-only tmpfs; beneath a directory bound back it is.
    #[test]
    fn hidden_paths_are_masked_only_where_the_sandbox_shows_the_host() {
        let mut p = policy(true);
        p.workspace = "/tmp/w".into();
        p.writable = vec!["/tmp/w/out".into()];
        p.deny_read = [
            "/tmp/alias/.ssh",
            "/run/user/0/keys",
            "/dev/shm/keys",
            "/proc/1/root",
            "/tmp/w/keys",
            "/run/systemd/resolve/keys",
            "/mnt/disk/.aws",
        ]
        .map(PathBuf::from)
        .to_vec();
        let out = render(&p);
        for hidden in ["/tmp/alias", "/run/user", "/dev/shm", "/proc/1"] {
            assert!(!out.contains(hidden), "{hidden}: {out}");
        }
        for masked in ["/tmp/w/keys", "/run/systemd/resolve/keys", "/mnt/disk/.aws"] {
            assert!(
                out.contains(&format!("--tmpfs {masked}")),
                "{masked}: {out}"
            );
        }
        p.network = false;
        assert!(!render(&p).contains("resolve/keys"));
    }

    #[test]
    fn a_pinned_directory_outside_the_writable_roots_is_not_bound() {
        let mut p = policy(false);
        p.pinned.push("/elsewhere/.git".into());
        let out = render(&p);
        assert!(!out.contains("/elsewhere"), "{out}");
        assert!(out.contains("--bind /w/.git /w/.git"), "{out}");
    }
}
