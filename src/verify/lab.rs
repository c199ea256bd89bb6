//! The throw-away world `chitti sandbox test` probes in: a decoy home full of decoy
//! credentials, a workspace with a git repository, a directory outside it, and helpers to
//! run a script in the sandbox and to look at the host from outside.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::canonical::canonicalize;
use crate::exec::{self, Input, Outcome, Output};
use crate::policy::{ChittiDirs, Overrides, Policy, Profile};
use crate::sandbox::{self, Backend, SandboxError};

/// Credential decoys: (path under the decoy home, group name used in check names).
pub const DECOYS: &[(&str, &str)] = &[
    (".ssh/id_ed25519", "ssh"),
    (".gnupg/private-keys-v1.d/key.key", "ssh"),
    (".aws/credentials", "cloud"),
    (".azure/accessTokens.json", "cloud"),
    (".config/gcloud/credentials.db", "cloud"),
    (".kube/config", "cloud"),
    (".docker/config.json", "cloud"),
    (".netrc", "tokens"),
    (".git-credentials", "tokens"),
    (".config/gh/hosts.yml", "tokens"),
    (".npmrc", "tokens"),
    (".pypirc", "tokens"),
    (".cargo/credentials.toml", "tokens"),
    (".gemini/oauth_creds.json", "tokens"),
    (".config/chitti/config.toml", "chitti"),
];

/// Secret-looking variables put into the caller's environment.
pub const SECRET_VARS: &[&str] = &[
    "GEMINI_API_KEY",
    "OPENAI_API_KEY",
    "GITHUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "DB_PASSWORD",
    "SSH_AUTH_SOCK",
    "DBUS_SESSION_BUS_ADDRESS",
    "DOCKER_HOST",
];

pub struct Lab {
    _root: tempfile::TempDir,
    /// With `--workspace DIR`: the probes' own directory inside DIR, removed afterwards.
    _in_workspace: Option<tempfile::TempDir>,
    pub root: PathBuf,
    pub home: PathBuf,
    pub workspace: PathBuf,
    /// A host directory outside every writable root.
    pub outside: PathBuf,
    /// Unique per run: decoys and markers contain it, so a leak is unmistakable.
    pub marker: String,
    pub policy: Policy,
    pub backend: Backend,
    /// Whether python3 runs in the sandbox (the probes of system calls and sockets need
    /// it); found by [`Lab::preflight`].
    pub python: bool,
}

/// Where the lab lives: not under /tmp, which bwrap replaces with a private tmpfs (the
/// decoys must be hidden by masking, not by that accident).
fn lab_parent() -> PathBuf {
    for candidate in ["/var/tmp", "/tmp"] {
        let p = Path::new(candidate);
        if tempfile::tempdir_in(p).is_ok() {
            return p.to_path_buf();
        }
    }
    std::env::temp_dir()
}

impl Lab {
    pub fn new(
        profile: &Profile,
        backend: Backend,
        workspace: Option<&Path>,
    ) -> Result<Lab, SandboxError> {
        let err = |what: &str, e: std::io::Error| {
            SandboxError::Unavailable(format!("sandbox test: {what}: {e}"))
        };
        let root_dir = tempfile::Builder::new()
            .prefix("chitti-sandbox-test-")
            .tempdir_in(lab_parent())
            .map_err(|e| err("cannot create the test directory", e))?;
        let root = canonicalize(root_dir.path())
            .map_err(|e| err("cannot resolve the test directory", e))?;
        let marker = format!(
            "chitti-decoy-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let home = root.join("home");
        let outside = root.join("outside");
        for (rel, _) in DECOYS {
            let path = home.join(rel);
            std::fs::create_dir_all(path.parent().expect("decoys have parents"))
                .map_err(|e| err("cannot create decoys", e))?;
            std::fs::write(&path, format!("secret {marker}\n"))
                .map_err(|e| err("cannot create decoys", e))?;
        }
        std::fs::write(home.join("notes.txt"), format!("readable {marker}\n"))
            .map_err(|e| err("cannot create decoys", e))?;
        std::fs::create_dir_all(&outside).map_err(|e| err("cannot create directories", e))?;
        // `--workspace DIR` tests the sandbox on DIR's file system, never on DIR's files:
        // the probes commit, rename `.git` and write through `..`, and must stay harmless
        // even under `--backend none`. So they get a fresh repository two levels below DIR.
        let in_workspace = match workspace {
            Some(dir) => Some(
                tempfile::Builder::new()
                    .prefix(".chitti-sandbox-test-")
                    .tempdir_in(dir)
                    .map_err(|e| {
                        err(
                            &format!(
                                "cannot create the probe directory in --workspace {}",
                                dir.display()
                            ),
                            e,
                        )
                    })?,
            ),
            None => None,
        };
        let ws_parent = match &in_workspace {
            Some(dir) => canonicalize(dir.path())
                .map_err(|e| err("cannot resolve the probe directory", e))?,
            None => home.clone(),
        };
        let workspace = ws_parent.join("project");
        std::fs::create_dir_all(&workspace).map_err(|e| err("cannot create the workspace", e))?;
        init_repo(&workspace)
            .map_err(|e| err("cannot create a git repository (is git installed?)", e))?;
        // Everything the probes need later must be visible to an unprivileged sandbox.
        let dirs = ChittiDirs {
            home: home.clone(),
            config: home.join(".config/chitti"),
            state: home.join(".local/state/chitti"),
            user_home: None,
            named_by_environment: Vec::new(),
        };
        let mut env: Vec<(OsString, OsString)> =
            std::env::vars_os().filter(|(k, _)| k != "HOME").collect();
        env.push(("HOME".into(), home.clone().into()));
        for var in SECRET_VARS {
            env.push(((*var).into(), marker.clone().into()));
        }
        let policy = Policy::resolve(profile, &workspace, &Overrides::default(), &dirs, env)
            .map_err(|e| SandboxError::Unavailable(e.to_string()))?;
        Ok(Lab {
            _root: root_dir,
            _in_workspace: in_workspace,
            root,
            home,
            workspace: policy.workspace.clone(),
            outside,
            marker,
            policy,
            backend,
            python: false,
        })
    }

    /// Before any probe: the sandbox must start a command at all, or every row would
    /// blame it for what is a failure to set it up (and rows that look for an attack's
    /// effect would pass for a command that never ran). Also finds whether python3 runs.
    pub async fn preflight(&mut self) -> Result<(), SandboxError> {
        let alive = format!("{}-started", self.marker);
        let ran = self
            .run(&format!(
                "echo {alive}; python3 -c 'print(\"python\" + \"-ok\")'"
            ))
            .await?;
        let stdout = String::from_utf8_lossy(&ran.stdout.bytes);
        if !stdout.contains(&alive) {
            let stderr = String::from_utf8_lossy(&ran.stderr.bytes);
            let said = match stderr.trim() {
                "" => "it printed nothing".to_string(),
                said => format!("it printed: {said}"),
            };
            return Err(SandboxError::Unavailable(format!(
                "sandbox test: a first command (`sh -c 'echo ...'`) did not run in the sandbox \
                 on the {} backend with the `{}` profile (exit code {}; {said}), so nothing \
                 was checked: no verdict can be given",
                self.backend.name(),
                self.policy.profile,
                ran.exit_code,
            )));
        }
        self.python = stdout.contains("python-ok");
        Ok(())
    }

    /// Runs `sh -c script` in the sandbox, in the workspace, output captured.
    pub async fn run(&self, script: &str) -> Result<Outcome, SandboxError> {
        self.run_with_timeout(script, Duration::from_secs(30)).await
    }

    pub async fn run_with_timeout(
        &self,
        script: &str,
        timeout: Duration,
    ) -> Result<Outcome, SandboxError> {
        // git must never look above the workspace: once a probe has moved `.git` away
        // (and nothing stopped it, as under `--backend none`), git would otherwise commit
        // into whatever repository holds `--workspace DIR`. The ceiling arrives as `$0`.
        let ceiling = self.workspace.parent().unwrap_or(&self.workspace);
        let command: Vec<OsString> = vec![
            "sh".into(),
            "-c".into(),
            format!("GIT_CEILING_DIRECTORIES=\"$0\"; export GIT_CEILING_DIRECTORIES\n{script}")
                .into(),
            ceiling.into(),
        ];
        let prepared = sandbox::prepare(self.backend, &self.policy, &command, &self.workspace)?;
        exec::run(
            prepared,
            Input::Null,
            Output::Capture {
                max_bytes: 256 * 1024,
            },
            timeout,
            std::future::pending(),
        )
        .await
    }

    pub fn workspace_writable(&self) -> bool {
        self.policy.is_writable(&self.workspace.join("probe"))
    }
}

fn init_repo(ws: &Path) -> std::io::Result<()> {
    let git = |args: &[&str]| -> std::io::Result<()> {
        let status = Command::new("git")
            .args(args)
            .current_dir(ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", ws)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()?;
        if status.success() {
            Ok(())
        } else {
            Err(std::io::Error::other(format!("git {args:?} failed")))
        }
    };
    git(&["init", "-q"])?;
    std::fs::write(ws.join("README"), "probe\n")?;
    git(&["add", "README"])?;
    git(&[
        "-c",
        "user.name=chitti",
        "-c",
        "user.email=chitti@localhost",
        "commit",
        "-qm",
        "initial",
    ])?;
    Ok(())
}

/// Processes on the host whose command line starts with `needle` (so that bwrap's own
/// process, whose arguments contain the command, does not count).
#[cfg(target_os = "linux")]
pub fn find_processes(needle: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id() as i32;
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .starts_with(needle)
                })
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(not(target_os = "linux"))]
pub fn find_processes(needle: &str) -> Vec<i32> {
    let out = Command::new("ps").args(["-axo", "pid=,args="]).output();
    let Ok(out) = out else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (pid, args) = l.trim_start().split_once(' ')?;
            if args.trim_start().starts_with(needle) {
                pid.parse().ok()
            } else {
                None
            }
        })
        .collect()
}

/// A field of /proc/PID/status, read from the host.
pub fn status_field(pid: i32, field: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}

/// A host process that must survive the sandbox: a `sleep` with a unique duration.
pub struct Decoy {
    child: std::process::Child,
}

impl Decoy {
    pub fn start() -> std::io::Result<Decoy> {
        let child = Command::new("sleep")
            .arg("3600")
            .stdin(std::process::Stdio::null())
            .spawn()?;
        Ok(Decoy { child })
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Decoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
