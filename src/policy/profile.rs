//! Profiles are data: TOML files compiled in from `profiles/`, or read from the user's
//! config directory or a path. This file turns that text into a [`Profile`]; it does no
//! path resolution (see `policy::resolve`).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::PolicyError;

/// The profiles shipped with chitti, compiled into the binary.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "workspace-write",
        include_str!("../../profiles/workspace-write.toml"),
    ),
    ("read-only", include_str!("../../profiles/read-only.toml")),
    ("network", include_str!("../../profiles/network.toml")),
];

/// The built-in profiles converted to JSON, in `BUILTIN`'s order, which is what a call
/// parses: every sandboxed call loads a profile, and the TOML parser cost ~0.02 ms of it.
/// The test `builtin_profiles_json_is_the_toml` keeps them equal to the TOML
/// (`CHITTI_UPDATE_GOLDEN=1 cargo test builtin_profiles_json` rewrites them).
const BUILTIN_JSON: [&str; 3] = [
    include_str!("golden/workspace-write.json"),
    include_str!("golden/read-only.json"),
    include_str!("golden/network.json"),
];

pub const DEFAULT_PROFILE: &str = "workspace-write";

/// How deep `extends` chains may go; deeper is almost certainly a cycle.
const MAX_EXTENDS_DEPTH: usize = 8;

/// A profile as written. Every field is optional so that `extends` can fill the gaps;
/// unknown keys are errors, so a typo never silently weakens a profile.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    description: Option<String>,
    extends: Option<String>,
    #[serde(default)]
    filesystem: RawFilesystem,
    #[serde(default)]
    network: RawNetwork,
    #[serde(default)]
    environment: RawEnvironment,
    #[serde(default)]
    limits: RawLimits,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilesystem {
    writable: Option<Vec<String>>,
    deny_read: Option<Vec<String>>,
    protect_git: Option<bool>,
    protected: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNetwork {
    enabled: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnvironment {
    allow: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    timeout_seconds: Option<u64>,
    max_processes: Option<u64>,
    max_open_files: Option<u64>,
    max_file_size_mb: Option<u64>,
    max_memory_mb: Option<u64>,
}

/// A complete profile: every field has a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    pub name: String,
    pub description: String,
    pub writable: Vec<String>,
    pub deny_read: Vec<String>,
    pub protect_git: bool,
    pub protected: Vec<String>,
    pub network: bool,
    pub env_allow: Vec<String>,
    pub limits: Limits,
}

/// Resource limits. `None` means "leave the inherited limit alone".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub timeout_seconds: u64,
    pub max_processes: Option<u64>,
    pub max_open_files: Option<u64>,
    pub max_file_size_mb: Option<u64>,
    pub max_memory_mb: Option<u64>,
}

/// Where a profile's text came from, for error messages.
#[derive(Debug, Clone)]
enum Source {
    Builtin(&'static str),
    File(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Builtin(name) => write!(f, "built-in profile `{name}`"),
            Source::File(path) => write!(f, "{}", path.display()),
        }
    }
}

/// Loads a profile by name (built-in, then `<config>/profiles/NAME.toml`) or by path
/// (anything containing `/` or ending in `.toml`).
pub fn load(spec: &str, user_profile_dir: Option<&Path>) -> Result<Profile, PolicyError> {
    load_at_depth(spec, user_profile_dir, 0, None)
}

fn load_at_depth(
    spec: &str,
    user_profile_dir: Option<&Path>,
    depth: usize,
    // `file: extends = "x"` of the profile that named this one, so that a missing or
    // unreadable parent is reported where it is named.
    named_by: Option<&str>,
) -> Result<Profile, PolicyError> {
    if depth > MAX_EXTENDS_DEPTH {
        return Err(PolicyError::Profile(format!(
            "profile `{spec}`: `extends` chain deeper than {MAX_EXTENDS_DEPTH}; is there a cycle?"
        )));
    }
    let (source, text) = locate(spec, user_profile_dir).map_err(|e| match named_by {
        Some(by) => PolicyError::Profile(format!("{by}: {e}")),
        None => e,
    })?;
    let raw: Result<RawProfile, String> = match source {
        Source::Builtin(_) => serde_json::from_str(&text).map_err(|e| e.to_string()),
        Source::File(_) => toml::from_str(&text).map_err(|e| e.to_string()),
    };
    let raw = raw.map_err(|e| {
        PolicyError::Profile(format!(
            "{source}: {}\nFix the profile: see profiles/workspace-write.toml for every allowed key.",
            e.trim_end()
        ))
    })?;
    let name = match &source {
        Source::Builtin(name) => (*name).to_string(),
        Source::File(path) => path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| spec.to_string()),
    };
    let base = match &raw.extends {
        Some(parent) => {
            // A relative path is relative to the file that names it, not to wherever
            // chitti was started.
            let parent_spec = match &source {
                Source::File(file)
                    if looks_like_path(parent) && Path::new(parent).is_relative() =>
                {
                    let dir = file.parent().unwrap_or(Path::new("."));
                    dir.join(parent).to_string_lossy().into_owned()
                }
                _ => parent.clone(),
            };
            let named_by = format!("{source}: extends = \"{parent}\"");
            Some(load_at_depth(
                &parent_spec,
                user_profile_dir,
                depth + 1,
                Some(&named_by),
            )?)
        }
        None => None,
    };
    merge(name, &source, raw, base)
}

/// A profile spec naming a file rather than a built-in or user profile.
fn looks_like_path(spec: &str) -> bool {
    spec.contains('/') || spec.ends_with(".toml")
}

fn locate(spec: &str, user_profile_dir: Option<&Path>) -> Result<(Source, String), PolicyError> {
    if looks_like_path(spec) {
        let path = PathBuf::from(spec);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            PolicyError::Profile(format!(
                "cannot read profile file {}: {e}\nPass an existing TOML file, or a profile name: {}.",
                path.display(),
                builtin_names()
            ))
        })?;
        return Ok((Source::File(path), text));
    }
    if let Some(index) = BUILTIN.iter().position(|(name, _)| *name == spec) {
        let json = BUILTIN_JSON[index];
        return Ok((Source::Builtin(BUILTIN[index].0), json.to_string()));
    }
    if let Some(dir) = user_profile_dir {
        let path = dir.join(format!("{spec}.toml"));
        match std::fs::read_to_string(&path) {
            Ok(text) => return Ok((Source::File(path), text)),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(PolicyError::Profile(format!(
                    "cannot read profile file {}: {e}",
                    path.display()
                )))
            }
            Err(_) => {}
        }
    }
    let user_hint = user_profile_dir
        .map(|d| format!(", or a file {}/{spec}.toml", d.display()))
        .unwrap_or_default();
    Err(PolicyError::Profile(format!(
        "unknown profile `{spec}`.\nUse one of: {}{user_hint}; or pass a path to a TOML file.",
        builtin_names()
    )))
}

fn builtin_names() -> String {
    BUILTIN
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Fills the gaps of `raw` from `base`. A profile without `extends` must state everything
/// that has no safe default; lists replace (not append to) the parent's lists.
fn merge(
    name: String,
    source: &Source,
    raw: RawProfile,
    base: Option<Profile>,
) -> Result<Profile, PolicyError> {
    let missing = |key: &str| {
        PolicyError::Profile(format!(
            "{source}: missing `{key}` (a profile without `extends` must set it, \
             or add `extends = \"workspace-write\"`)"
        ))
    };
    let fs = raw.filesystem;
    let limits = raw.limits;
    let b = base.as_ref();
    let profile = Profile {
        name,
        description: raw
            .description
            .or_else(|| b.map(|b| b.description.clone()))
            .unwrap_or_default(),
        writable: fs
            .writable
            .or_else(|| b.map(|b| b.writable.clone()))
            .ok_or_else(|| missing("filesystem.writable"))?,
        deny_read: fs
            .deny_read
            .or_else(|| b.map(|b| b.deny_read.clone()))
            .unwrap_or_default(),
        // Protecting git is the safe default, so it needs no base.
        protect_git: fs.protect_git.or(b.map(|b| b.protect_git)).unwrap_or(true),
        protected: fs
            .protected
            .or_else(|| b.map(|b| b.protected.clone()))
            .unwrap_or_default(),
        network: raw
            .network
            .enabled
            .or(b.map(|b| b.network))
            .ok_or_else(|| missing("network.enabled"))?,
        env_allow: raw
            .environment
            .allow
            .or_else(|| b.map(|b| b.env_allow.clone()))
            .unwrap_or_default(),
        limits: Limits {
            timeout_seconds: limits
                .timeout_seconds
                .or(b.map(|b| b.limits.timeout_seconds))
                .ok_or_else(|| missing("limits.timeout_seconds"))?,
            max_processes: limits
                .max_processes
                .or(b.and_then(|b| b.limits.max_processes)),
            max_open_files: limits
                .max_open_files
                .or(b.and_then(|b| b.limits.max_open_files)),
            max_file_size_mb: limits
                .max_file_size_mb
                .or(b.and_then(|b| b.limits.max_file_size_mb)),
            max_memory_mb: limits
                .max_memory_mb
                .or(b.and_then(|b| b.limits.max_memory_mb)),
        },
    };
    if profile.limits.timeout_seconds == 0 {
        return Err(PolicyError::Profile(format!(
            "{source}: limits.timeout_seconds must be at least 1"
        )));
    }
    // Below these, not even the dynamic loader of `sh` starts (or bubblewrap itself, which
    // runs under the same limits): the command would fail as "not found" for no visible
    // reason, so the profile is refused instead.
    let l = &profile.limits;
    for (key, value, least) in [
        ("max_processes", l.max_processes, 8),
        ("max_open_files", l.max_open_files, 16),
        ("max_file_size_mb", l.max_file_size_mb, 1),
        ("max_memory_mb", l.max_memory_mb, 64),
    ] {
        if let Some(value) = value.filter(|v| *v < least) {
            return Err(PolicyError::Profile(format!(
                "{source}: limits.{key} = {value} is too low for a program to start; use at \
                 least {least}, or leave it out for no limit"
            )));
        }
    }
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<Profile, PolicyError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, text).unwrap();
        load(path.to_str().unwrap(), None)
    }

    #[test]
    fn extends_is_relative_to_the_file_and_errors_name_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("prof")).unwrap();
        std::fs::write(
            dir.path().join("prof/base.toml"),
            "extends = \"workspace-write\"\ndescription = \"base\"\n",
        )
        .unwrap();
        let child = dir.path().join("prof/child.toml");
        std::fs::write(&child, "extends = \"./base.toml\"\n").unwrap();
        let p = load(child.to_str().unwrap(), None).unwrap();
        assert_eq!(p.description, "base");
        std::fs::write(&child, "extends = \"nope\"\n").unwrap();
        let e = load(child.to_str().unwrap(), None).unwrap_err().to_string();
        assert!(e.contains("child.toml: extends = \"nope\""), "{e}");
        assert!(e.contains("unknown profile `nope`"), "{e}");
    }

    #[test]
    fn limits_too_low_to_start_a_program_are_refused() {
        for (key, value) in [
            ("max_open_files", 0),
            ("max_memory_mb", 1),
            ("max_processes", 2),
        ] {
            let e = load_text(&format!(
                "extends = \"workspace-write\"\n[limits]\n{key} = {value}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(&format!("limits.{key} = {value} is too low")),
                "{e}"
            );
        }
        load_text("extends = \"workspace-write\"\n[limits]\nmax_open_files = 64\n").unwrap();
    }

    /// What a call parses (the JSON) is what the profiles say (the TOML).
    #[test]
    fn builtin_profiles_json_is_the_toml() {
        assert_eq!(BUILTIN.len(), BUILTIN_JSON.len());
        for ((name, toml_text), json) in BUILTIN.iter().zip(BUILTIN_JSON) {
            let value: serde_json::Value = toml::from_str(toml_text).unwrap();
            let expected = serde_json::to_string_pretty(&value).unwrap() + "\n";
            crate::golden::check(
                &format!("src/policy/golden/{name}.json"),
                json.as_bytes(),
                expected.as_bytes(),
                &format!("profiles/{name}.toml as JSON"),
                "builtin_profiles_json",
            );
        }
    }

    #[test]
    fn builtins_load() {
        for (name, _) in BUILTIN {
            let p = load(name, None).unwrap();
            assert_eq!(&p.name, name);
        }
        let ww = load("workspace-write", None).unwrap();
        assert!(!ww.network);
        assert!(ww.protect_git);
        assert_eq!(ww.writable, vec!["{workspace}", "{tmp}"]);
        let ro = load("read-only", None).unwrap();
        assert_eq!(ro.writable, vec!["{tmp}"]);
        assert!(!ro.network);
        let net = load("network", None).unwrap();
        assert!(net.network);
        assert_eq!(net.writable, ww.writable);
        assert_eq!(net.limits, ww.limits);
    }

    #[test]
    fn unknown_profile_names_the_choices() {
        let err = load("nope", None).unwrap_err().to_string();
        assert!(err.contains("unknown profile `nope`"), "{err}");
        assert!(err.contains("workspace-write"), "{err}");
    }

    #[test]
    fn malformed_toml_reports_line_and_column() {
        let err = load_text("extends = \"workspace-write\"\n[network\nenabled = true\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("column"), "{err}");
    }

    #[test]
    fn unknown_key_is_an_error_with_position() {
        let err = load_text("extends = \"workspace-write\"\n[network]\nenable = true\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `enable`"), "{err}");
        assert!(err.contains("line 3"), "{err}");
    }

    #[test]
    fn missing_required_without_extends() {
        let err = load_text("[network]\nenabled = false\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("filesystem.writable"), "{err}");
    }

    #[test]
    fn extends_cycle_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.toml"), "extends = \"b\"\n").unwrap();
        std::fs::write(dir.path().join("b.toml"), "extends = \"a\"\n").unwrap();
        let err = load("a", Some(dir.path())).unwrap_err().to_string();
        assert!(err.contains("cycle"), "{err}");
    }

    #[test]
    fn user_profile_overrides_fields_of_its_base() {
        let p = load_text(
            "extends = \"workspace-write\"\n[limits]\ntimeout_seconds = 5\n[environment]\nallow = [\"CARGO_*\"]\n",
        )
        .unwrap();
        assert_eq!(p.limits.timeout_seconds, 5);
        assert_eq!(p.env_allow, vec!["CARGO_*"]);
        assert_eq!(p.writable, vec!["{workspace}", "{tmp}"]);
    }
}
