//! Shared helpers for the integration tests: running the real `chitti` binary, building
//! workspaces and decoy homes, and observing effects from outside the sandbox.
//!
//! Two environment variables let `scripts/test.sh` run copies of the test binaries as an
//! unprivileged user who cannot read the build tree: `CHITTI_BIN` (the chitti binary) and
//! `CHITTI_TEST_TMPDIR` (where fixtures are created). Both default to Cargo's values.

#![allow(dead_code)] // Each test binary uses its own subset.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The PATH given to chitti (and so to the sandboxed command): system directories only,
/// so that tests do not depend on the caller's shims (pyenv, asdf) or their HOME.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// `git` with an identity, for commits made inside the sandbox: the sandbox's environment
/// allow-list drops GIT_* variables and the decoy HOME has no .gitconfig.
pub const SANDBOX_GIT: &str =
    "git -c user.name=chitti-test -c user.email=chitti-test@example.invalid -c commit.gpgsign=false";

pub fn chitti_bin() -> PathBuf {
    std::env::var_os("CHITTI_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_chitti")))
}

/// Where fixtures live. Not /tmp: bwrap mounts a private /tmp, which would hide host
/// files for the wrong reason and make masking tests pass vacuously.
pub fn scratch_root() -> PathBuf {
    let root = std::env::var_os("CHITTI_TEST_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&root).expect("create the scratch root");
    root
}

pub fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("read /dev/urandom");
    u64::from_ne_bytes(bytes)
}

/// A string that appears nowhere unless this test put it there.
pub fn marker(tag: &str) -> String {
    format!("CHITTI-{tag}-{:016x}", random_u64())
}

/// A `sleep` duration unique to this test run, so that process scans find only our own
/// processes even when tests run in parallel.
pub fn unique_sleep() -> String {
    (3_000_000 + random_u64() % 1_000_000).to_string()
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

pub fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A private tree under the scratch root:
/// `root/home` is a decoy HOME, `root/home/proj` the workspace, `root/outside` a host
/// directory the sandbox must not write.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub ws: PathBuf,
    pub outside: PathBuf,
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("sbx-")
            .tempdir_in(scratch_root())
            .expect("create a fixture directory");
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        let ws = home.join("proj");
        let outside = root.join("outside");
        for d in [&home, &ws, &outside] {
            std::fs::create_dir_all(d).unwrap();
        }
        Fixture {
            _dir: dir,
            root,
            home,
            ws,
            outside,
        }
    }

    /// A path inside the workspace.
    pub fn ws(&self, rel: &str) -> PathBuf {
        self.ws.join(rel)
    }

    /// `chitti sandbox exec --backend <backend> -w <workspace>`, with HOME = the decoy home.
    pub fn chitti(&self, backend: &str) -> Chitti {
        Chitti {
            backend: backend.to_string(),
            home: self.home.clone(),
            cwd: self.ws.clone(),
            workspace: Some(self.ws.clone().into()),
            opts: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Runs git on the host (outside any sandbox) in the workspace.
    pub fn git(&self, args: &[&str]) -> String {
        let out = host_git(&self.ws, &self.home, args);
        assert!(
            out.status.success(),
            "host `git {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `git init` in the workspace with one commit whose message is `message`.
    pub fn init_repo(&self, message: &str) {
        self.git(&["init", "-q", "-b", "main"]);
        write(&self.ws("README"), "readme\n");
        self.git(&["add", "README"]);
        self.git(&["commit", "-q", "-m", message]);
    }
}

/// git on the host, with an identity and the decoy HOME, ignoring the system config.
pub fn host_git(dir: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "chitti-test")
        .env("GIT_AUTHOR_EMAIL", "chitti-test@example.invalid")
        .env("GIT_COMMITTER_NAME", "chitti-test")
        .env("GIT_COMMITTER_EMAIL", "chitti-test@example.invalid")
        .stdin(Stdio::null())
        .output()
        .expect("run git")
}

/// A `chitti sandbox exec` invocation being built.
pub struct Chitti {
    backend: String,
    home: PathBuf,
    cwd: PathBuf,
    workspace: Option<OsString>,
    opts: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

impl Chitti {
    /// An option placed before `--` (e.g. `--json`, `-p read-only`).
    pub fn opt(mut self, opt: impl AsRef<OsStr>) -> Self {
        self.opts.push(opt.as_ref().to_os_string());
        self
    }

    pub fn opts<S: AsRef<OsStr>>(mut self, opts: &[S]) -> Self {
        self.opts
            .extend(opts.iter().map(|o| o.as_ref().to_os_string()));
        self
    }

    /// Replaces the fixture's workspace (`-w`).
    pub fn workspace(mut self, workspace: impl AsRef<OsStr>) -> Self {
        self.workspace = Some(workspace.as_ref().to_os_string());
        self
    }

    /// An extra variable in chitti's own environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    /// chitti with every option but no `--` and no command. The caller's environment is
    /// not inherited: only PATH, HOME (the decoy), LANG and what `env` added.
    fn base(&self) -> Command {
        let mut cmd = Command::new(chitti_bin());
        cmd.args(["sandbox", "exec", "--backend", &self.backend]);
        if let Some(ws) = &self.workspace {
            cmd.arg("-w").arg(ws);
        }
        cmd.args(&self.opts)
            .current_dir(&self.cwd)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        cmd
    }

    /// The full command line, ready to spawn; fails the test if the backend is unusable.
    pub fn command<S: AsRef<OsStr>>(&self, argv: &[S]) -> Command {
        ensure_backend(&self.backend);
        let mut cmd = self.base();
        cmd.arg("--").args(argv);
        cmd
    }

    pub fn run<S: AsRef<OsStr>>(&self, argv: &[S]) -> Ran {
        Ran::from_command(self.command(argv))
    }

    /// `sh -c script` in the sandbox.
    pub fn sh(&self, script: &str) -> Ran {
        self.run(&["sh", "-c", script])
    }

    /// `python3 -c script` in the sandbox.
    pub fn python(&self, script: &str) -> Ran {
        self.run(&["python3", "-c", script])
    }

    /// chitti without any command after its options.
    pub fn run_without_command(&self) -> Ran {
        ensure_backend(&self.backend);
        Ran::from_command(self.base())
    }
}

/// What a finished chitti call left behind.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Ran {
    fn from_command(mut cmd: Command) -> Ran {
        let started = Instant::now();
        let out = cmd.output().expect("spawn chitti");
        Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            elapsed: started.elapsed(),
        }
    }

    /// stdout and stderr together.
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("chitti --json printed invalid JSON ({e}):\n{self}"))
    }
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cut = |s: &str| -> String {
            if s.len() > 4000 {
                let head: String = s.chars().take(4000).collect();
                format!("{head}... ({} bytes in all)", s.len())
            } else {
                s.to_string()
            }
        };
        write!(
            f,
            "chitti exit {:?} after {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.elapsed,
            cut(&self.stdout),
            cut(&self.stderr)
        )
    }
}

/// Fails (never skips) when the backend cannot run here, with chitti's own explanation.
pub fn ensure_backend(backend: &str) {
    static BWRAP: OnceLock<Result<(), String>> = OnceLock::new();
    static LANDLOCK: OnceLock<Result<(), String>> = OnceLock::new();
    let cell = match backend {
        "bwrap" => &BWRAP,
        "landlock" => &LANDLOCK,
        _ => return,
    };
    if let Err(why) = cell.get_or_init(|| probe_backend(backend)) {
        panic!("the {backend} backend is unusable on this machine, so its tests FAIL: {why}");
    }
}

fn probe_backend(backend: &str) -> Result<(), String> {
    if backend == "bwrap" && find_in_path("bwrap").is_none() {
        return Err(format!(
            "bubblewrap is not installed (no `bwrap` in {PATH}): install it, e.g. \
             `apt-get install bubblewrap`"
        ));
    }
    let fx = Fixture::new();
    let mut cmd = fx.chitti(backend).base();
    cmd.args(["--", "true"]);
    let ran = Ran::from_command(cmd);
    if ran.code == Some(0) {
        Ok(())
    } else {
        Err(format!(
            "`chitti sandbox exec --backend {backend} -- true` failed: {ran}"
        ))
    }
}

pub fn find_in_path(program: &str) -> Option<PathBuf> {
    PATH.split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file())
}

/// Polls `cond` every 20 ms until it holds or `limit` passes; returns whether it held.
/// Waits at most `limit` for `child` to exit, and kills it if it has not (a test must
/// neither leave it behind nor hang on it): whether it exited by itself, and its output.
pub fn exited_within(
    mut child: std::process::Child,
    limit: Duration,
) -> (bool, std::process::Output) {
    let exited = wait_until(limit, || child.try_wait().unwrap().is_some());
    if !exited {
        let _ = child.kill();
    }
    (exited, child.wait_with_output().unwrap())
}

pub fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Live (non-zombie) processes whose argv is exactly `argv` (argv[0] compared by its
/// file name), found by scanning /proc.
pub fn pids_with_argv(argv: &[&str]) -> Vec<i32> {
    pids_where(|args| {
        args.len() == argv.len()
            && Path::new(&args[0]).file_name() == Some(OsStr::new(argv[0]))
            && args[1..] == argv[1..]
    })
}

/// Live processes with `needle` in one of their arguments: for a unique token, every
/// process of one sandboxed call (chitti, its supervisor, bwrap, the command tree).
pub fn pids_mentioning(needle: &str) -> Vec<i32> {
    pids_where(|args| args.iter().any(|a| a.contains(needle)))
}

/// Live (non-zombie) processes whose argv satisfies `wanted`, found by scanning /proc.
fn pids_where(wanted: impl Fn(&[String]) -> bool) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.is_empty() && wanted(&args) && !is_zombie(pid) {
            out.push(pid);
        }
    }
    out
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| s[i + 1..].trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// `sleep <secs>` processes, wherever they run (inside a sandbox or not).
pub fn sleepers(secs: &str) -> Vec<i32> {
    pids_with_argv(&["sleep", secs])
}

/// Kills any `sleep <secs>` left when a test ends, so that a failing test does not leave
/// processes behind for days.
pub struct SleepReaper(pub String);

impl Drop for SleepReaper {
    fn drop(&mut self) {
        for pid in sleepers(&self.0) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A `sleep` started on the host by the test, killed when dropped.
pub struct HostSleep {
    child: std::process::Child,
}

impl HostSleep {
    pub fn start() -> HostSleep {
        let child = Command::new("sleep")
            .arg(unique_sleep())
            .stdin(Stdio::null())
            .spawn()
            .expect("start a host sleep");
        HostSleep { child }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running (a dead one is reaped here).
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// A field of /proc/<pid>/status, e.g. `TracerPid`.
    pub fn status_field(&self, name: &str) -> String {
        let status = read(Path::new(&format!("/proc/{}/status", self.pid())));
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in /proc/{}/status", self.pid()))
            .trim()
            .to_string()
    }
}

impl Drop for HostSleep {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pseudo-terminal in raw mode (so FIONREAD counts every queued byte). The slave end
/// is handed to chitti; the test keeps both ends to look at the input queue afterwards.
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

impl Pty {
    pub fn open() -> Pty {
        unsafe {
            let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
            let master = OwnedFd::from_raw_fd(m);
            assert_eq!(libc::grantpt(m), 0, "grantpt");
            assert_eq!(libc::unlockpt(m), 0, "unlockpt");
            let mut name = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
            let s = libc::open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            );
            assert!(
                s >= 0,
                "open the pty slave: {}",
                std::io::Error::last_os_error()
            );
            let slave = OwnedFd::from_raw_fd(s);
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(s, &mut t), 0);
            libc::cfmakeraw(&mut t);
            assert_eq!(libc::tcsetattr(s, libc::TCSANOW, &t), 0);
            Pty { master, slave }
        }
    }

    pub fn slave_stdio(&self) -> Stdio {
        Stdio::from(self.slave.try_clone().expect("dup the pty slave"))
    }

    /// Everything written to the terminal so far (chitti has exited; the test still
    /// holds the slave end, so the output waits in the master's queue).
    pub fn drain(&self) -> String {
        let mut shown = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let mut poll = libc::pollfd {
                fd: self.master.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            if unsafe { libc::poll(&mut poll, 1, 100) } <= 0 {
                break;
            }
            let n =
                unsafe { libc::read(self.master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            shown.extend_from_slice(&buf[..n as usize]);
        }
        String::from_utf8_lossy(&shown).into_owned()
    }

    /// Bytes waiting in the terminal's input queue (what TIOCSTI would have pushed).
    pub fn pending_input(&self) -> i32 {
        let mut n: libc::c_int = 0;
        let rc = unsafe { libc::ioctl(self.slave.as_raw_fd(), libc::FIONREAD, &mut n) };
        assert_eq!(rc, 0, "FIONREAD: {}", std::io::Error::last_os_error());
        n
    }
}

/// Whether the test process runs as root (some guarantees only apply then).
pub fn running_as_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Every regular file under `dir` whose contents include `needle`.
pub fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            found.extend(files_containing(&path, needle));
        } else if meta.is_file()
            && std::fs::read(&path)
                .map(|b| String::from_utf8_lossy(&b).contains(needle))
                .unwrap_or(false)
        {
            found.push(path);
        }
    }
    found
}

/// The 64-bit ID of the mount namespace process `pid` is in, and whether that is another
/// namespace than this process's: `None` where the kernel cannot say (Linux 6.11) or the
/// process is gone. The namespace is not held once this returns.
#[cfg(target_os = "linux")]
pub fn mount_namespace_of(pid: i32) -> Option<(u64, bool)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::File::open(format!("/proc/{pid}/ns/mnt")).ok()?;
    let own = std::fs::metadata("/proc/self/ns/mnt").ok()?;
    let other = file.metadata().ok()?.ino() != own.ino();
    let id = chitti::sandbox::linux::namespace_release::namespace_id(file.as_fd())?;
    Some((id, other))
}

/// Whether the mount namespace with ID `id` exists (see `namespace_release`).
#[cfg(target_os = "linux")]
pub fn mount_namespace_exists(id: u64) -> std::io::Result<bool> {
    chitti::sandbox::linux::namespace_release::namespace_exists(id)
}
