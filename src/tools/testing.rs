//! Fixtures for the tools' tests: a decoy home with a credential directory, a workspace
//! inside it that looks like a git repository, and a host directory outside it.
//!
//! They live under a scratch root that is not /tmp: bwrap gives the sandbox a private
//! /tmp, so a workspace there would be invisible to the sandboxed command.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Toolbox;
use crate::policy::{profile, ChittiDirs, Overrides, Policy, PolicySource};
use crate::sandbox::{self, BackendChoice, Capabilities};

/// `CHITTI_TEST_TMPDIR` (set when the suite runs as an unprivileged user), else the
/// crate's `target/tmp`.
pub fn scratch_root() -> PathBuf {
    let root = std::env::var_os("CHITTI_TEST_TMPDIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp"));
    std::fs::create_dir_all(&root).expect("create the scratch root");
    root
}

pub struct Fixture {
    _dir: tempfile::TempDir,
    pub home: PathBuf,
    pub ws: PathBuf,
    pub outside: PathBuf,
    pub policy: Arc<Policy>,
    /// What `policy` was resolved from.
    pub source: PolicySource,
}

impl Fixture {
    /// The default profile on a fresh workspace.
    pub fn new() -> Fixture {
        Fixture::with_profile("workspace-write", |_| {})
    }

    /// `profile` resolved for a fresh workspace, after `prepare` ran on it.
    pub fn with_profile(profile_name: &str, prepare: impl FnOnce(&Path)) -> Fixture {
        let dir = tempfile::Builder::new()
            .prefix("tools-")
            .tempdir_in(scratch_root())
            .expect("create a fixture directory");
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        let ws = home.join("proj");
        let outside = root.join("outside");
        for d in [&ws.join(".git/hooks"), &outside, &home.join(".ssh")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY").unwrap();
        prepare(&ws);
        let dirs = ChittiDirs {
            home: home.clone(),
            config: home.join(".config/chitti"),
            state: home.join(".local/state/chitti"),
            user_home: None,
            named_by_environment: Vec::new(),
        };
        let env: Vec<(OsString, OsString)> = std::env::vars_os()
            .filter(|(k, _)| k != "HOME")
            .chain([("HOME".into(), home.clone().into())])
            .collect();
        let source = PolicySource {
            profile: profile::load(profile_name, None).unwrap(),
            workspace: ws.clone(),
            overrides: Overrides::default(),
            dirs,
            env,
        };
        let policy = source
            .resolve()
            .unwrap_or_else(|e| panic!("resolve the {profile_name} policy: {e}"));
        Fixture {
            _dir: dir,
            home,
            ws,
            outside,
            policy: Arc::new(policy),
            source,
        }
    }

    /// Marks workspace paths as credential locations (no profile can: a writable
    /// workspace may not overlap one, so this edits the resolved policy).
    pub fn deny_read(&mut self, rel: &[&str]) {
        let policy = Arc::make_mut(&mut self.policy);
        policy.deny_read.extend(rel.iter().map(|r| self.ws.join(r)));
    }

    /// A toolbox on the backend `auto` picks here: the real sandbox.
    pub fn toolbox(&self) -> Toolbox {
        self.toolbox_on(BackendChoice::Auto)
            .unwrap_or_else(|e| panic!("no sandbox backend for the tests: {e}"))
    }

    /// A toolbox on `choice`, or why this machine cannot enforce the policy with it.
    pub fn toolbox_on(&self, choice: BackendChoice) -> Result<Toolbox, sandbox::SandboxError> {
        // Shared by all fixtures, so that the bwrap probe is cached once.
        let state = scratch_root().join("state");
        let selection = sandbox::select(choice, Capabilities::get(), &state)?;
        Ok(Toolbox::new(Arc::clone(&self.policy), selection.backend))
    }
}
