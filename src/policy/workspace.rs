//! A writable root must be a real directory that is neither the whole system nor the
//! user's home: granting those would make the sandbox pointless.

use std::path::{Path, PathBuf};

use crate::canonical::canonicalize;

use super::PolicyError;

/// Directories that are never a writable root, nor may a writable root contain them.
const SYSTEM_DIRS: &[&str] = &[
    "/",
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/var",
    "/var/tmp",
    "/var/run",
    "/var/lib",
    "/var/log",
    "/usr/local",
    "/usr/bin",
    "/usr/lib",
    "/snap",
    "/nix",
    "/private",
    "/System",
    "/Library",
    "/Applications",
    "/Users",
];

/// Trees in which no writable root may lie: kernel interfaces, boot and system
/// configuration, and runtime sockets.
const SYSTEM_TREES: &[&str] = &["/proc", "/sys", "/dev", "/boot", "/etc", "/run", "/var/run"];

/// What to do about a refused directory, by what it was meant to be: the workspace
/// (`-w`), an extra writable root (`--writable`), or a profile's writable root.
fn how_to_fix(what: &str, missing: bool) -> &'static str {
    match (what, missing) {
        ("workspace", true) => "Pass an existing directory with -w/--workspace.",
        ("workspace", false) => "Pass a project directory instead, e.g. -w ~/src/myproject.",
        ("--writable directory", true) => "Pass an existing directory with --writable.",
        ("--writable directory", false) => {
            "Give --writable only a directory the command must write besides the workspace, \
             e.g. --writable ~/.cache/myproject."
        }
        (_, true) => "Create it, or change that entry of the profile.",
        (_, false) => "Change that entry of the profile.",
    }
}

/// Checks a directory and returns its canonical form. `home` must be canonical already:
/// a policy resolves it once for all its writable roots.
pub fn validate(path: &Path, home: &Path, what: &str) -> Result<PathBuf, PolicyError> {
    let meta = std::fs::metadata(path).map_err(|e| {
        PolicyError::Workspace(format!(
            "{what} {} does not exist or cannot be read ({e}).\n{}",
            path.display(),
            how_to_fix(what, true)
        ))
    })?;
    if !meta.is_dir() {
        return Err(PolicyError::Workspace(format!(
            "{what} {} is not a directory.\nPass a directory.",
            path.display()
        )));
    }
    let canonical = canonicalize(path).map_err(|e| {
        PolicyError::Workspace(format!("cannot resolve {what} {}: {e}", path.display()))
    })?;
    let refuse = |why: &str| {
        Err(PolicyError::Workspace(format!(
            "refusing {what} {}: {why}.\n{}",
            canonical.display(),
            how_to_fix(what, false)
        )))
    };
    if home.starts_with(&canonical) {
        return refuse(if canonical == home {
            "it is your home directory ($HOME)"
        } else {
            "it contains your home directory"
        });
    }
    for dir in SYSTEM_DIRS {
        if canonical == Path::new(dir) {
            return refuse("it is a system directory");
        }
    }
    for tree in SYSTEM_TREES {
        if canonical.starts_with(tree) {
            return refuse(&format!("it lies inside the system directory {tree}"));
        }
    }
    Ok(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_root_home_and_system_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        for bad in ["/", "/usr", "/etc", "/tmp", "/proc/self"] {
            let err = validate(Path::new(bad), &home, "workspace");
            assert!(err.is_err(), "{bad} accepted");
        }
        let err = validate(Path::new("/etc"), &home, "--writable directory")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--writable ~/") && !err.contains("-w ~/"),
            "{err}"
        );
        let err = validate(
            Path::new("/nonexistent-chitti"),
            &home,
            "--writable directory",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("with --writable") && !err.contains("-w/"),
            "{err}"
        );
        let err = validate(&home, &home, "workspace").unwrap_err().to_string();
        assert!(err.contains("home directory"), "{err}");
        let parent = home.parent().unwrap();
        let err = validate(parent, &home, "workspace")
            .unwrap_err()
            .to_string();
        assert!(err.contains("contains your home directory"), "{err}");
    }

    #[test]
    fn missing_and_non_directory() {
        let home = tempfile::tempdir().unwrap();
        let missing = home.path().join("nope");
        let err = validate(&missing, Path::new("/nonexistent-home"), "workspace")
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
        let file = home.path().join("f");
        std::fs::write(&file, "").unwrap();
        let err = validate(&file, Path::new("/nonexistent-home"), "workspace")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a directory"), "{err}");
    }

    #[test]
    fn project_directory_is_accepted() {
        let home = tempfile::tempdir().unwrap();
        let proj = home.path().join("proj");
        std::fs::create_dir(&proj).unwrap();
        assert_eq!(
            validate(&proj, home.path(), "workspace").unwrap(),
            proj.canonicalize().unwrap()
        );
    }
}
