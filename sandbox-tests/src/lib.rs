//! The harness of chitti's escape-attempt suite.
//!
//! Every test runs the real `chitti` binary (`chitti sandbox exec --backend <b> ...`) on a
//! Linux backend and judges by what can be seen from **outside** the sandbox: a host file
//! that appeared or changed, a host listener that got a connection, a host process that
//! was killed, stopped or traced, a decoy secret in the captured output.
//!
//! * chitti: `$CHITTI_BIN`, else `chitti` in the test executable's profile directory
//!   (`target/debug/deps/escape_fs-HASH` -> `target/debug/chitti`).
//! * fixtures: under `$CHITTI_TEST_TMPDIR`, else Cargo's `CARGO_TARGET_TMPDIR`; never under
//!   /tmp, which bwrap replaces with a private tmpfs (a test would pass for the wrong reason).
//! * tests: `#[backends] fn name(backend: &str)` becomes `name_bwrap` and `name_landlock`;
//!   a backend that cannot run here makes its tests fail with the reason.
//!
//! Safety: every probe is harmless even without a sandbox. Probes write only inside the
//! fixture directory, signal or trace only processes the test started, mount only at
//! paths that do not exist, and never touch the real home directory.

use std::ffi::{CString, OsStr, OsString};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use sandbox_tests_macros::backends;

/// The PATH given to chitti, and so to the sandboxed command.
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The interpreter used for probes that need system calls (ctypes) or sockets.
pub const PYTHON: &str = "/usr/bin/python3";
/// git for commits inside the sandbox: the environment allow-list drops GIT_* and the
/// decoy HOME has no identity.
pub const SANDBOX_GIT: &str =
    "git -c user.name=x -c user.email=y@example.invalid -c commit.gpgsign=false";
/// Every chitti call gets this wall-clock limit unless the test sets its own.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// The harness kills a chitti call that is still running after this long.
const WATCHDOG: Duration = Duration::from_secs(300);

static TARGET_TMPDIR: OnceLock<PathBuf> = OnceLock::new();

/// Entry point of every generated test: remembers Cargo's tmpdir, makes sure the backend
/// works here (fails otherwise), then runs the body.
pub fn run_test(backend: &str, cargo_target_tmpdir: &'static str, body: fn(&str)) {
    let _ = TARGET_TMPDIR.set(PathBuf::from(cargo_target_tmpdir));
    ensure_backend(backend);
    body(backend);
}

/// The chitti binary under test.
pub fn chitti_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("CHITTI_BIN") {
            let bin = PathBuf::from(bin);
            assert!(
                bin.is_file(),
                "CHITTI_BIN={} does not exist: build chitti first: cargo build",
                bin.display()
            );
            return bin;
        }
        let exe = std::env::current_exe().expect("the test executable's path");
        // target/<profile>/deps/<test>-<hash> -> target/<profile>/chitti
        let bin = exe
            .parent()
            .and_then(Path::parent)
            .map(|profile_dir| profile_dir.join("chitti"))
            .unwrap_or_else(|| PathBuf::from("chitti"));
        assert!(
            bin.is_file(),
            "build chitti first: cargo build (no chitti binary at {})",
            bin.display()
        );
        bin
    })
    .clone()
}

/// Where fixtures are created. Never under /tmp.
pub fn scratch_root() -> PathBuf {
    let root = std::env::var_os("CHITTI_TEST_TMPDIR")
        .map(PathBuf::from)
        .or_else(|| TARGET_TMPDIR.get().cloned())
        .expect("no fixture root: set CHITTI_TEST_TMPDIR or run through #[backends]");
    std::fs::create_dir_all(&root)
        .unwrap_or_else(|e| panic!("create the fixture root {}: {e}", root.display()));
    let root = root.canonicalize().expect("canonical fixture root");
    assert!(
        !root.starts_with("/tmp"),
        "the fixture root {} lies under /tmp, which bwrap hides: tests would pass for the \
         wrong reason. Set CHITTI_TEST_TMPDIR elsewhere.",
        root.display()
    );
    root
}

/// Fails (never skips) when `backend` cannot run here, with chitti's own explanation.
pub fn ensure_backend(backend: &str) {
    static BWRAP: OnceLock<Result<(), String>> = OnceLock::new();
    static LANDLOCK: OnceLock<Result<(), String>> = OnceLock::new();
    let cell = match backend {
        "bwrap" => &BWRAP,
        "landlock" => &LANDLOCK,
        other => panic!("unknown backend {other}"),
    };
    if let Err(why) = cell.get_or_init(|| probe_backend(backend)) {
        panic!("the {backend} backend is unusable on this machine, so its tests FAIL: {why}");
    }
}

fn probe_backend(backend: &str) -> Result<(), String> {
    if backend == "bwrap" && find_in_path("bwrap").is_none() {
        return Err(format!(
            "bubblewrap is not installed (no `bwrap` in {PATH}): install it, e.g. \
             `apt-get install bubblewrap` (scripts/install-deps.sh does)"
        ));
    }
    if !Path::new(PYTHON).is_file() {
        return Err(format!("{PYTHON} is missing: the probes need it"));
    }
    let fx = Fixture::new();
    let ran = fx.chitti(backend).run(&["true"]);
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

/// Fails the test when a tool the probe needs is missing (never a silent pass).
pub fn require_tool(program: &str) -> PathBuf {
    find_in_path(program).unwrap_or_else(|| {
        panic!("`{program}` is not installed (searched {PATH}); this test needs it")
    })
}

pub fn running_as_root() -> bool {
    unsafe { libc::geteuid() == 0 }
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

/// A `sleep` argument unique to this call, so that process scans find only our processes.
pub fn unique_sleep() -> String {
    (3_000_000 + random_u64() % 5_000_000).to_string()
}

/// Shell single-quoting.
pub fn sh_quote(s: impl AsRef<OsStr>) -> String {
    let s = s.as_ref().to_string_lossy();
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A Python string literal for a path or text.
pub fn py_str(s: impl AsRef<OsStr>) -> String {
    let s = s.as_ref().to_string_lossy().into_owned();
    format!("{s:?}")
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

pub fn write(path: &Path, text: impl AsRef<[u8]>) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// Whether anything (even a dangling symlink) exists at `path`, as the host sees it.
pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Polls `cond` every 20 ms until it holds or `limit` passes; returns whether it held.
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

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

/// Credential locations chitti must keep unreadable, as decoys under the decoy HOME.
pub const CREDENTIAL_DECOYS: &[&str] = &[
    ".ssh/id_rsa",
    ".ssh/id_ed25519",
    ".aws/credentials",
    ".netrc",
    ".config/gh/hosts.yml",
    ".cargo/credentials.toml",
    ".cargo/credentials",
    ".config/chitti/config.toml",
    ".docker/config.json",
    ".kube/config",
    ".gnupg/private-keys-v1.d/decoy.key",
    ".git-credentials",
    ".gemini/oauth_creds.json",
    ".codex/auth.json",
    ".claude/.credentials.json",
];

/// A private tree under the fixture root:
/// `root/home` is the decoy HOME, `root/home/proj` the workspace, `root/outside` a host
/// directory the sandbox may read but must not write.
pub struct Fixture {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub home: PathBuf,
    pub ws: PathBuf,
    pub outside: PathBuf,
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("esc-")
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

    pub fn ws(&self, rel: &str) -> PathBuf {
        self.ws.join(rel)
    }

    pub fn outside(&self, rel: &str) -> PathBuf {
        self.outside.join(rel)
    }

    pub fn home(&self, rel: &str) -> PathBuf {
        self.home.join(rel)
    }

    /// `chitti sandbox exec --backend <backend> -w <workspace>`, HOME = the decoy home,
    /// run from the workspace.
    pub fn chitti(&self, backend: &str) -> Chitti {
        Chitti {
            backend: backend.to_string(),
            home: self.home.clone(),
            cwd: self.ws.clone(),
            workspace: Some(self.ws.clone()),
            opts: Vec::new(),
            env: Vec::new(),
            stdin: None,
            timeout_set: false,
        }
    }

    /// A host file outside the workspace with known contents, mode 0644 and an old
    /// mtime, so that any write, chmod or touch shows.
    pub fn victim(&self, name: &str) -> PathBuf {
        let path = self.outside(name);
        write(&path, format!("victim {name} {}\n", marker("victim")));
        set_mode(&path, 0o644);
        set_old_mtime(&path);
        path
    }

    /// Decoy credentials (and a readable, non-secret note) under the decoy HOME.
    pub fn decoys(&self) -> Decoys {
        let secret = marker("SECRET");
        for rel in CREDENTIAL_DECOYS {
            write(&self.home(rel), format!("{secret} {rel}\n"));
        }
        let note = marker("NOTE");
        write(&self.home("notes.txt"), format!("{note}\n"));
        Decoys {
            secret,
            note,
            home: self.home.clone(),
        }
    }

    /// git on the host in the workspace.
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

    /// `git init` in the workspace, with one commit.
    pub fn init_repo(&self) {
        require_tool("git");
        self.git(&["init", "-q", "-b", "main"]);
        write(&self.ws("README"), "readme\n");
        self.git(&["add", "README"]);
        self.git(&["commit", "-q", "-m", "initial"]);
    }

    /// A profile file outside the workspace: `extends = "workspace-write"` plus `body`.
    pub fn profile(&self, name: &str, body: &str) -> PathBuf {
        let path = self.root.join(format!("{name}.toml"));
        write(&path, format!("extends = \"workspace-write\"\n{body}"));
        path
    }
}

/// git on the host (outside any sandbox), with the decoy HOME and no system config.
pub fn host_git(dir: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(require_tool("git"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", home)
        .env("LANG", "C.UTF-8")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "host")
        .env("GIT_AUTHOR_EMAIL", "host@example.invalid")
        .env("GIT_COMMITTER_NAME", "host")
        .env("GIT_COMMITTER_EMAIL", "host@example.invalid")
        .stdin(Stdio::null())
        .output()
        .expect("run git")
}

/// The decoy credentials of a fixture.
pub struct Decoys {
    /// Every credential decoy contains this string.
    pub secret: String,
    /// ~/notes.txt (not a credential, must stay readable) contains this string.
    pub note: String,
    home: PathBuf,
}

impl Decoys {
    pub fn path(&self, rel: &str) -> PathBuf {
        self.home.join(rel)
    }

    pub fn leaked(&self, ran: &Ran) -> bool {
        ran.all().contains(&self.secret)
    }
}

// ---------------------------------------------------------------------------------------
// Running chitti
// ---------------------------------------------------------------------------------------

/// A `chitti sandbox exec` call being built.
pub struct Chitti {
    backend: String,
    home: PathBuf,
    cwd: PathBuf,
    workspace: Option<PathBuf>,
    opts: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    stdin: Option<Vec<u8>>,
    timeout_set: bool,
}

impl Chitti {
    /// An option before `--` (e.g. `--json`, `-p read-only`).
    pub fn opt(mut self, opt: impl AsRef<OsStr>) -> Self {
        let opt = opt.as_ref().to_os_string();
        if opt == "--timeout" || opt.to_string_lossy().starts_with("--timeout=") {
            self.timeout_set = true;
        }
        self.opts.push(opt);
        self
    }

    pub fn opts<S: AsRef<OsStr>>(mut self, opts: &[S]) -> Self {
        for o in opts {
            self = self.opt(o);
        }
        self
    }

    pub fn json(self) -> Self {
        self.opt("--json")
    }

    pub fn timeout(self, secs: u64) -> Self {
        self.opts(&["--timeout".to_string(), secs.to_string()])
    }

    pub fn network_on(self) -> Self {
        self.opts(&["--network", "on"])
    }

    pub fn profile(self, profile: impl AsRef<OsStr>) -> Self {
        self.opt("-p").opt(profile)
    }

    /// An extra variable in chitti's own environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    /// Another workspace (`-w`), started from there.
    pub fn workspace(mut self, dir: impl AsRef<Path>) -> Self {
        self.workspace = Some(dir.as_ref().to_path_buf());
        self.cwd(dir)
    }

    /// The directory chitti is started from.
    pub fn cwd(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = dir.as_ref().to_path_buf();
        self
    }

    /// Bytes piped into chitti's stdin (default: /dev/null).
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// The full command line. The caller's environment is not inherited: only PATH,
    /// HOME (the decoy), LANG and what `env` added.
    pub fn command<S: AsRef<OsStr>>(&self, argv: &[S]) -> Command {
        let mut cmd = Command::new(chitti_bin());
        cmd.args(["sandbox", "exec", "--backend", &self.backend]);
        if let Some(ws) = &self.workspace {
            cmd.arg("-w").arg(ws);
        }
        if !self.timeout_set {
            cmd.args(["--timeout", &DEFAULT_TIMEOUT_SECS.to_string()]);
        }
        cmd.args(&self.opts)
            .arg("--")
            .args(argv)
            .current_dir(&self.cwd)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &self.home)
            .env("LANG", "C.UTF-8")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null());
        cmd
    }

    pub fn run<S: AsRef<OsStr>>(&self, argv: &[S]) -> Ran {
        let cmd = self.command(argv);
        match &self.stdin {
            Some(bytes) => Ran::from_command_with_stdin(cmd, bytes.clone()),
            None => Ran::from_command(cmd),
        }
    }

    /// `sh -c script` in the sandbox.
    pub fn sh(&self, script: &str) -> Ran {
        self.run(&["sh", "-c", script])
    }

    /// `bash -c script` in the sandbox.
    pub fn bash(&self, script: &str) -> Ran {
        require_tool("bash");
        self.run(&["bash", "-c", script])
    }

    /// `python3 -c script args...` in the sandbox.
    pub fn py(&self, script: &str, args: &[&str]) -> Ran {
        let mut argv = vec![PYTHON, "-c", script];
        argv.extend_from_slice(args);
        self.run(&argv)
    }

    /// `sh -c script` in the sandbox, with chitti started in a mount namespace of its
    /// own in which each `(source, target)` is bind-mounted (with what is mounted beneath
    /// the source if `recursive`): a second mount of something on the host, which the
    /// host itself never sees.
    pub fn sh_with_binds(&self, script: &str, binds: &[(&Path, &Path)], recursive: bool) -> Ran {
        let mut cmd = self.command(&["sh", "-c", script]);
        with_bind_mounts(&mut cmd, binds, recursive);
        Ran::from_command(cmd)
    }

    /// Starts the call without waiting for it.
    pub fn spawn<S: AsRef<OsStr>>(&self, argv: &[S]) -> Spawned {
        Spawned::start(self.command(argv), self.stdin.clone())
    }
}

/// Makes `cmd` start in a private mount namespace with the `binds` mounted. Root gets
/// only that; anyone else also gets a user namespace that maps just their own uid and gid
/// (the mounts need it), so that chitti still runs as them, with no capability left after
/// its exec.
pub fn with_bind_mounts(cmd: &mut Command, binds: &[(&Path, &Path)], recursive: bool) {
    use std::os::unix::process::CommandExt;
    let c = |p: &Path| CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let binds: Vec<(CString, CString)> = binds.iter().map(|(s, t)| (c(s), c(t))).collect();
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let user = (uid != 0).then(|| {
        (
            format!("{uid} {uid} 1\n").into_bytes(),
            format!("{gid} {gid} 1\n").into_bytes(),
        )
    });
    // Only system calls on memory prepared above: this runs between fork and exec.
    let setup = move || -> std::io::Result<()> {
        let check = |r: libc::c_int| {
            if r < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        let write_file = |path: &std::ffi::CStr, text: &[u8]| unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            check(fd)?;
            let written = libc::write(fd, text.as_ptr().cast(), text.len());
            let error = std::io::Error::last_os_error();
            libc::close(fd);
            match written {
                n if n == text.len() as isize => Ok(()),
                n if n < 0 => Err(error),
                _ => Err(std::io::Error::from_raw_os_error(libc::EIO)),
            }
        };
        unsafe {
            match &user {
                None => check(libc::unshare(libc::CLONE_NEWNS))?,
                Some((uid_map, gid_map)) => {
                    check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
                    write_file(c"/proc/self/setgroups", b"deny")?;
                    write_file(c"/proc/self/uid_map", uid_map)?;
                    write_file(c"/proc/self/gid_map", gid_map)?;
                }
            }
            let none = std::ptr::null::<libc::c_char>();
            let private = libc::MS_REC | libc::MS_PRIVATE;
            check(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                private,
                std::ptr::null(),
            ))?;
            for (source, target) in &binds {
                let bind = libc::MS_BIND | if recursive { libc::MS_REC } else { 0 };
                check(libc::mount(
                    source.as_ptr(),
                    target.as_ptr(),
                    none,
                    bind,
                    std::ptr::null(),
                ))?;
            }
        }
        Ok(())
    };
    unsafe {
        cmd.pre_exec(setup);
    }
}

/// A finished chitti call.
pub struct Ran {
    pub code: Option<i32>,
    /// The signal that killed chitti itself, if any.
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub elapsed: Duration,
    pub cmdline: String,
}

impl Ran {
    pub fn from_command(cmd: Command) -> Ran {
        Spawned::start(cmd, None).wait()
    }

    pub fn from_command_with_stdin(cmd: Command, stdin: Vec<u8>) -> Ran {
        Spawned::start(cmd, Some(stdin)).wait()
    }

    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    /// stdout and stderr together (lossy UTF-8).
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout_str(), self.stderr_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout_str().trim())
            .unwrap_or_else(|e| panic!("chitti --json printed invalid JSON ({e}):\n{self}"))
    }

    /// Fails the test when chitti could not set the sandbox up (125): nothing ran, so an
    /// escape test would pass for the wrong reason.
    pub fn assert_ran(&self) -> &Self {
        assert!(
            self.code != Some(125) && self.signal.is_none(),
            "the sandbox did not run the probe (exit 125 or chitti killed): {self}"
        );
        self
    }
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cut = |b: &[u8]| -> String {
            let s = String::from_utf8_lossy(b);
            if s.len() > 3000 {
                let head: String = s.chars().take(3000).collect();
                format!("{head}... ({} bytes in all)", b.len())
            } else {
                s.into_owned()
            }
        };
        write!(
            f,
            "`{}`\nchitti exit {:?} (signal {:?}) after {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.cmdline,
            self.code,
            self.signal,
            self.elapsed,
            cut(&self.stdout),
            cut(&self.stderr)
        )
    }
}

/// A chitti call running in the background; its output is collected by threads.
pub struct Spawned {
    child: Child,
    started: Instant,
    cmdline: String,
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
}

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| {
            let s = a.to_string_lossy();
            if s.chars()
                .any(|c| c.is_whitespace() || c == '\'' || c == '"')
            {
                sh_quote(a)
            } else {
                s.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Spawned {
    fn start(mut cmd: Command, stdin: Option<Vec<u8>>) -> Spawned {
        let cmdline = describe(&cmd);
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let started = Instant::now();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn chitti ({cmdline}): {e}"));
        if let Some(bytes) = stdin {
            let mut pipe = child.stdin.take().expect("piped stdin");
            std::thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            });
        }
        let mut out = child.stdout.take().expect("piped stdout");
        let mut err = child.stderr.take().expect("piped stderr");
        Spawned {
            child,
            started,
            cmdline,
            out: Some(std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = out.read_to_end(&mut v);
                v
            })),
            err: Some(std::thread::spawn(move || {
                let mut v = Vec::new();
                let _ = err.read_to_end(&mut v);
                v
            })),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal` to chitti itself.
    pub fn signal(&self, signal: i32) {
        unsafe { libc::kill(self.pid(), signal) };
    }

    pub fn finished(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_some()
    }

    /// Waits for chitti (killing it after the watchdog limit) and collects its output.
    pub fn wait(mut self) -> Ran {
        let deadline = self.started + WATCHDOG;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "chitti still ran after {WATCHDOG:?}; killed by the test harness: {}",
                    self.cmdline
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let elapsed = self.started.elapsed();
        let stdout = self.out.take().unwrap().join().unwrap_or_default();
        let stderr = self.err.take().unwrap().join().unwrap_or_default();
        let ran = Ran {
            code: status.code(),
            signal: status.signal(),
            stdout,
            stderr,
            elapsed,
            cmdline: std::mem::take(&mut self.cmdline),
        };
        show(&ran);
        ran
    }

    /// [`Spawned::wait`], also returning how long chitti and the processes that carry out
    /// its call were ready to run but left waiting for a CPU: the run-queue wait
    /// (`schedstat`) of every thread of chitti, of its children (its bwrap, or a landlock
    /// call's supervisor; its bwrap's child once adopted) and of their children named
    /// `bwrap`, the last seen of each; chitti's own is read once more after it exits,
    /// before it is reaped.
    ///
    /// Why: a family forking as fast as it can makes this 2-CPU virtual machine's
    /// scheduler leave ordinary tasks waiting for whole seconds: chitti's timer fired up to
    /// 57 s late, and unrelated sleeping processes (root's, the test's) were held up by
    /// about as much, up to 17 s at a time (CI saw a 2 s timeout end after 33 s so). A
    /// bound on the time such a call takes is then a bound on that time less this wait:
    /// the time chitti ran, or slept by its own choice. (The waits of tasks that waited
    /// at once are summed, which can say more than the call lost; without a stall the sum
    /// stays under half a second, and such a bound holds as strictly as before.)
    pub fn wait_counting_cpu_waits(self) -> (Ran, Duration) {
        let pid = self.pid();
        let mut waited = std::collections::HashMap::new();
        loop {
            let exited = exited_unreaped(pid);
            for (task, wait) in run_queue_waits(pid) {
                let seen = waited.entry(task).or_insert(0);
                *seen = wait.max(*seen);
            }
            if exited || self.started.elapsed() >= WATCHDOG {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let ran = self.wait();
        (ran, Duration::from_nanos(waited.values().sum()))
    }
}

/// Whether the child `pid` has exited, leaving it unreaped (its /proc entries stay).
fn exited_unreaped(pid: i32) -> bool {
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let found = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    found == 0 && unsafe { info.si_pid() } == pid
}

/// The run-queue wait so far, in nanoseconds, of each thread of `pid`, of its children
/// and of their children named `bwrap`, by (process, thread)
/// ([`Spawned::wait_counting_cpu_waits`]).
fn run_queue_waits(pid: i32) -> Vec<((i32, i32), u64)> {
    let read = |path: String| std::fs::read_to_string(path).unwrap_or_default();
    let mut waits = Vec::new();
    // Each process with its depth below `pid`; every thread is read once, for its wait
    // and, above the last depth, for its children.
    let mut carriers = vec![(pid, 0)];
    while let Some((process, depth)) = carriers.pop() {
        let Ok(threads) = std::fs::read_dir(format!("/proc/{process}/task")) else {
            continue;
        };
        for tid in threads
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
        {
            let task = format!("/proc/{process}/task/{tid}");
            let stat = read(format!("{task}/schedstat"));
            if let Some(wait) = stat.split_whitespace().nth(1).and_then(|w| w.parse().ok()) {
                waits.push(((process, tid), wait));
            }
            if depth == 2 {
                continue;
            }
            for child in read(format!("{task}/children"))
                .split_whitespace()
                .filter_map(|c| c.parse().ok())
            {
                let is_bwrap = || read(format!("/proc/{child}/comm")).trim() == "bwrap";
                if depth == 0 || is_bwrap() {
                    carriers.push((child, depth + 1));
                }
            }
        }
    }
    waits
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Observing host files
// ---------------------------------------------------------------------------------------

/// Everything about a host path that a write, chmod, chown, touch or setxattr changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileState {
    pub kind: &'static str,
    pub bytes: Vec<u8>,
    pub link_target: Option<PathBuf>,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub ino: u64,
    pub nlink: u64,
    pub mtime: (i64, i64),
    pub xattrs: Vec<(String, Vec<u8>)>,
}

/// The host's view of `path` (not following a final symlink); None when nothing is there.
pub fn file_state(path: &Path) -> Option<FileState> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let ft = meta.file_type();
    let kind = if ft.is_file() {
        "file"
    } else if ft.is_dir() {
        "dir"
    } else if ft.is_symlink() {
        "symlink"
    } else {
        "special"
    };
    Some(FileState {
        kind,
        bytes: if ft.is_file() {
            std::fs::read(path).unwrap_or_default()
        } else {
            Vec::new()
        },
        link_target: std::fs::read_link(path).ok(),
        mode: meta.mode(),
        uid: meta.uid(),
        gid: meta.gid(),
        ino: meta.ino(),
        nlink: meta.nlink(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        xattrs: xattrs(path),
    })
}

/// The extended attributes of `path` (not following symlinks).
pub fn xattrs(path: &Path) -> Vec<(String, Vec<u8>)> {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let mut names = vec![0u8; 4096];
    let n = unsafe { libc::llistxattr(c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for name in names[..n as usize]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
    {
        let cname = CString::new(name).unwrap();
        let mut value = vec![0u8; 4096];
        let len = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                cname.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        value.truncate(len.max(0) as usize);
        out.push((String::from_utf8_lossy(name).into_owned(), value));
    }
    out.sort();
    out
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

/// Sets the mtime (and atime) of `path` to 2001-09-09, so that a touch shows.
pub fn set_old_mtime(path: &Path) {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let old = libc::timespec {
        tv_sec: 1_000_000_000,
        tv_nsec: 0,
    };
    let times = [old, old];
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat {}", path.display());
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

/// Every path under `dir` (any type), relative, sorted.
pub fn tree(dir: &Path) -> Vec<PathBuf> {
    fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
            return;
        };
        for e in entries.flatten() {
            let r = rel.join(e.file_name());
            out.push(r.clone());
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                walk(root, &r, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, Path::new(""), &mut out);
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------
// Observing the host network: listeners the sandbox must not reach
// ---------------------------------------------------------------------------------------

/// A host TCP listener on loopback.
pub struct TcpTrap {
    listener: std::net::TcpListener,
    pub port: u16,
}

impl TcpTrap {
    pub fn v4() -> TcpTrap {
        Self::bind("127.0.0.1:0")
    }

    /// Fails the test when this machine has no IPv6 loopback.
    pub fn v6() -> TcpTrap {
        Self::bind("[::1]:0")
    }

    fn bind(addr: &str) -> TcpTrap {
        let listener = std::net::TcpListener::bind(addr)
            .unwrap_or_else(|e| panic!("cannot listen on {addr} on the host: {e}"));
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        TcpTrap { listener, port }
    }

    /// Connections accepted so far (completed handshakes wait in the backlog).
    pub fn connections(&self) -> usize {
        let mut n = 0;
        while self.listener.accept().is_ok() {
            n += 1;
        }
        n
    }
}

/// A host UDP socket on loopback.
pub struct UdpTrap {
    socket: std::net::UdpSocket,
    pub port: u16,
}

impl UdpTrap {
    pub fn v4() -> UdpTrap {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a host UDP socket");
        socket.set_nonblocking(true).unwrap();
        let port = socket.local_addr().unwrap().port();
        UdpTrap { socket, port }
    }

    pub fn datagrams(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok((n, _)) = self.socket.recv_from(&mut buf) {
            out.push(buf[..n].to_vec());
        }
        out
    }
}

/// A host unix stream listener, at a path or an abstract name.
pub struct UnixTrap {
    listener: std::os::unix::net::UnixListener,
    /// The path, or `@name` for an abstract socket.
    pub address: String,
}

impl UnixTrap {
    pub fn path(path: &Path) -> UnixTrap {
        let listener = std::os::unix::net::UnixListener::bind(path)
            .unwrap_or_else(|e| panic!("bind a host unix socket at {}: {e}", path.display()));
        listener.set_nonblocking(true).unwrap();
        UnixTrap {
            listener,
            address: path.display().to_string(),
        }
    }

    pub fn abstract_name(name: &str) -> UnixTrap {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .expect("abstract address");
        let listener = std::os::unix::net::UnixListener::bind_addr(&addr)
            .unwrap_or_else(|e| panic!("bind a host abstract socket @{name}: {e}"));
        listener.set_nonblocking(true).unwrap();
        UnixTrap {
            listener,
            address: format!("@{name}"),
        }
    }

    pub fn connections(&self) -> usize {
        let mut n = 0;
        while self.listener.accept().is_ok() {
            n += 1;
        }
        n
    }
}

/// A host unix datagram socket, at a path or an abstract name.
pub struct UnixDgramTrap {
    socket: std::os::unix::net::UnixDatagram,
    pub address: String,
}

impl UnixDgramTrap {
    pub fn path(path: &Path) -> UnixDgramTrap {
        let socket = std::os::unix::net::UnixDatagram::bind(path)
            .unwrap_or_else(|e| panic!("bind a host datagram socket at {}: {e}", path.display()));
        socket.set_nonblocking(true).unwrap();
        UnixDgramTrap {
            socket,
            address: path.display().to_string(),
        }
    }

    pub fn abstract_name(name: &str) -> UnixDgramTrap {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .expect("abstract address");
        let socket = std::os::unix::net::UnixDatagram::bind_addr(&addr)
            .unwrap_or_else(|e| panic!("bind a host abstract datagram socket @{name}: {e}"));
        socket.set_nonblocking(true).unwrap();
        UnixDgramTrap {
            socket,
            address: format!("@{name}"),
        }
    }

    pub fn datagrams(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(n) = self.socket.recv(&mut buf) {
            out.push(buf[..n].to_vec());
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Observing host processes
// ---------------------------------------------------------------------------------------

/// A process the test started on the host (outside any sandbox), killed when dropped.
pub struct HostProcess {
    child: Child,
    pub pid: i32,
    stdout: Option<std::io::BufReader<std::process::ChildStdout>>,
}

impl HostProcess {
    /// `sleep <unique>` with `env` added to a minimal environment.
    pub fn sleep_with_env(env: &[(&str, &str)]) -> HostProcess {
        let mut cmd = Command::new(require_tool("sleep"));
        cmd.arg(unique_sleep())
            .env_clear()
            .env("PATH", PATH)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let child = cmd.spawn().expect("start a host sleep");
        HostProcess {
            pid: child.id() as i32,
            child,
            stdout: None,
        }
    }

    pub fn sleep() -> HostProcess {
        Self::sleep_with_env(&[])
    }

    /// `sleep <unique>` whose working directory is `dir` (inside the fixture).
    pub fn sleep_in(dir: &Path) -> HostProcess {
        let child = Command::new(require_tool("sleep"))
            .arg(unique_sleep())
            .current_dir(dir)
            .env_clear()
            .env("PATH", PATH)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start a host sleep");
        HostProcess {
            pid: child.id() as i32,
            child,
            stdout: None,
        }
    }

    /// `python3 -c script` on the host; `stdin_line` is written to it (a secret that then
    /// lives only in its memory), and the first line it prints is returned.
    pub fn python(script: &str, stdin_line: &str) -> (HostProcess, String) {
        use std::io::BufRead;
        let mut child = Command::new(PYTHON)
            .args(["-c", script])
            .env_clear()
            .env("PATH", PATH)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a host python");
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{stdin_line}").unwrap();
        drop(stdin);
        let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        reader
            .read_line(&mut line)
            .expect("read the host python's first line");
        let pid = child.id() as i32;
        assert!(!line.trim().is_empty(), "the host python printed nothing");
        (
            HostProcess {
                child,
                pid,
                stdout: Some(reader),
            },
            line.trim().to_string(),
        )
    }

    /// Whether it is still running (a dead one is reaped here).
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// The state letter of /proc/<pid>/stat (R, S, T for stopped, t for traced, Z...).
    pub fn state(&self) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).unwrap_or_default();
        stat.rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next())
            .unwrap_or('?')
    }

    /// A field of /proc/<pid>/status, e.g. `TracerPid`.
    pub fn status_field(&self, name: &str) -> String {
        status_field(self.pid, name).unwrap_or_default()
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        unsafe { libc::kill(self.pid, libc::SIGCONT) };
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.stdout.take();
    }
}

/// A field of /proc/<pid>/status.
pub fn status_field(pid: i32, name: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
}

/// Live (non-zombie) processes whose argv is exactly `argv` (argv[0] compared by its
/// file name), found by scanning /proc.
pub fn pids_with_argv(argv: &[&str]) -> Vec<i32> {
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
        if args.len() != argv.len() || args.is_empty() {
            continue;
        }
        let first_matches = Path::new(&args[0]).file_name() == Some(OsStr::new(argv[0]));
        if first_matches && args[1..] == argv[1..] && !is_zombie(pid) {
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

/// How many processes (zombies included: they still count against RLIMIT_NPROC) belong
/// to this test's real uid.
pub fn processes_of_my_uid() -> usize {
    let uid = unsafe { libc::getuid() }.to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<i32>().is_ok())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().next())
                == Some(uid.as_str())
        })
        .count()
}

/// `sleep <secs>` processes, wherever they run (inside a sandbox or not).
pub fn sleepers(secs: &str) -> Vec<i32> {
    pids_with_argv(&["sleep", secs])
}

/// Kills any `sleep <secs>` left when a test ends, so that a failing test leaves nothing
/// behind.
pub struct SleepReaper(pub Vec<String>);

impl SleepReaper {
    pub fn new(secs: &[&String]) -> SleepReaper {
        SleepReaper(secs.iter().map(|s| s.to_string()).collect())
    }
}

impl Drop for SleepReaper {
    fn drop(&mut self) {
        for secs in &self.0 {
            for pid in sleepers(secs) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// Asserts that no `sleep <secs>` survives the call, allowing `grace` for the kernel to
/// finish killing; reports how many were seen.
pub fn assert_no_survivors(secs: &[&String], grace: Duration, what: &str, ran: &Ran) {
    let alive = || -> Vec<i32> { secs.iter().flat_map(|s| sleepers(s)).collect() };
    let first = alive();
    if first.is_empty() {
        return;
    }
    let gone = wait_until(grace, || alive().is_empty());
    assert!(
        gone,
        "ESCAPE ({what}): sandboxed processes outlived the call: pids {:?} still alive \
         {grace:?} after chitti returned\n{ran}",
        alive()
    );
}

// ---------------------------------------------------------------------------------------
// Terminals
// ---------------------------------------------------------------------------------------

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

    /// Bytes waiting in the terminal's input queue (what TIOCSTI would have pushed).
    pub fn pending_input(&self) -> i32 {
        let mut n: libc::c_int = 0;
        let rc = unsafe { libc::ioctl(self.slave.as_raw_fd(), libc::FIONREAD, &mut n) };
        assert_eq!(rc, 0, "FIONREAD: {}", std::io::Error::last_os_error());
        n
    }

    /// Everything written to the terminal so far (non-blocking read of the master).
    pub fn drain_output(&self) -> Vec<u8> {
        let fd = self.master.as_raw_fd();
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Python probes
// ---------------------------------------------------------------------------------------

/// Prepended to probes that make raw system calls: `call(nr, *args)` returns
/// `(result, errno name)`.
pub const PY_SYSCALL: &str = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(nr, *args):
    conv = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *conv)
    e = ctypes.get_errno()
    return r, (errno.errorcode.get(e, str(e)) if r < 0 else "OK")
"#;

/// `PY_SYSCALL` followed by `body`.
pub fn py_syscalls(body: &str) -> String {
    format!("{PY_SYSCALL}\n{body}")
}

/// Runs `python3 -c script` on the host, unsandboxed (for baselines that show a probe
/// would work without the sandbox). Returns stdout+stderr and the exit status.
pub fn host_python(script: &str, args: &[&str], cwd: &Path) -> (String, std::process::ExitStatus) {
    let out = Command::new(PYTHON)
        .arg("-c")
        .arg(script)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", PATH)
        .stdin(Stdio::null())
        .output()
        .expect("run the host python");
    (
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        out.status,
    )
}

// ---------------------------------------------------------------------------------------
// Verdicts
// ---------------------------------------------------------------------------------------

/// Printed by every probe script after its attempts, so that a test knows the probe ran
/// to its end (an escape test must not pass because its probe never ran).
pub const DONE: &str = "PROBE-DONE";

/// `script` followed by `echo PROBE-DONE`.
pub fn probe(script: &str) -> String {
    format!("{script}\necho {DONE}")
}

impl Ran {
    /// Fails unless the probe script reached its end inside a working sandbox.
    pub fn assert_probe_ran(&self) -> &Self {
        self.assert_ran();
        assert!(
            self.stdout_str().contains(DONE),
            "the probe did not run to its end, so the test cannot judge: {self}"
        );
        self
    }
}

fn summary(state: &Option<FileState>) -> String {
    match state {
        None => "absent".into(),
        Some(s) => format!(
            "{} mode {:o} uid {} gid {} ino {} nlink {} mtime {}.{:09} xattrs {:?} link {:?} \
             contents {:?}",
            s.kind,
            s.mode,
            s.uid,
            s.gid,
            s.ino,
            s.nlink,
            s.mtime.0,
            s.mtime.1,
            s.xattrs
                .iter()
                .map(|(k, v)| format!("{k}={}", String::from_utf8_lossy(v)))
                .collect::<Vec<_>>(),
            s.link_target,
            String::from_utf8_lossy(&s.bytes.iter().copied().take(200).collect::<Vec<_>>())
        ),
    }
}

/// ESCAPE unless nothing exists at `path` on the host.
pub fn assert_absent(path: &Path, technique: &str, ran: &Ran) {
    let state = file_state(path);
    assert!(
        state.is_none(),
        "ESCAPE ({technique}): {} exists on the host after the call: {}\n{ran}",
        path.display(),
        summary(&state)
    );
}

/// ESCAPE unless `path` is exactly as it was before the call (contents, mode, owner,
/// inode, link count, mtime, xattrs).
/// Says loudly that a backend cannot keep a promise here and that the test checks the
/// weaker guarantee the README documents instead. Every caller names the README section.
pub fn known_limit(backend: &str, what: &str) {
    eprintln!("KNOWN LIMIT ({backend}): {what} (README: Known limits); checking the documented guarantee instead");
}

/// Like `assert_unchanged`, for the contents (and type) only: metadata may change.
pub fn assert_contents_unchanged(
    path: &Path,
    before: &Option<FileState>,
    technique: &str,
    ran: &Ran,
) {
    let after = file_state(path);
    let key = |s: &Option<FileState>| {
        s.as_ref()
            .map(|s| (s.kind, s.bytes.clone(), s.link_target.clone(), s.ino))
    };
    assert!(
        key(&after) == key(before),
        "ESCAPE ({technique}): the contents of {} changed on the host\n  before: {}\n  after:  {}\n{ran}",
        path.display(),
        summary(before),
        summary(&after)
    );
}

pub fn assert_unchanged(path: &Path, before: &Option<FileState>, technique: &str, ran: &Ran) {
    let after = file_state(path);
    assert!(
        after == *before,
        "ESCAPE ({technique}): {} changed on the host\n  before: {}\n  after:  {}\n{ran}",
        path.display(),
        summary(before),
        summary(&after)
    );
}

/// ESCAPE if the decoy secret appears in the call's output.
/// The probe ran to its end, read the non-secret `note` (reads work at all), and nothing
/// of `secret` reached its output.
pub fn assert_hidden(ran: &Ran, secret: &str, note: &str, technique: &str) {
    ran.assert_probe_ran();
    assert!(
        ran.stdout_str().contains(note),
        "control: the non-secret note must stay readable ({technique})\n{ran}"
    );
    assert_no_secret(secret, technique, ran);
}

pub fn assert_no_secret(secret: &str, technique: &str, ran: &Ran) {
    assert!(
        !ran.all().contains(secret),
        "ESCAPE ({technique}): the secret {secret} is in the sandboxed command's output\n{ran}"
    );
}

/// With `SANDBOX_TESTS_VERBOSE=1`, every call is printed (run with `--nocapture`), so that
/// a reviewer can see what each probe really attempted and what the sandbox answered.
pub fn show(ran: &Ran) {
    if std::env::var_os("SANDBOX_TESTS_VERBOSE").is_some_and(|v| v != "0") {
        eprintln!(
            "=== {:?}\n{ran}\n",
            std::thread::current().name().unwrap_or("?")
        );
    }
}

/// Runs `cmd` with the stdio it was given (e.g. a terminal), collecting only what was
/// left piped.
pub fn run_with_own_stdio(mut cmd: Command) -> Ran {
    let cmdline = describe(&cmd);
    let started = Instant::now();
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn chitti ({cmdline}): {e}"));
    let ran = Ran {
        code: out.status.code(),
        signal: out.status.signal(),
        stdout: out.stdout,
        stderr: out.stderr,
        elapsed: started.elapsed(),
        cmdline,
    };
    show(&ran);
    ran
}
