//! Credential locations that no profile can make readable.

use std::path::{Path, PathBuf};

/// Paths under the user's home that hold credentials. A trailing `*` matches any suffix
/// of the last component (`.cargo/credentials*` covers `credentials` and `credentials.toml`).
pub const HOME_CREDENTIALS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/git/credentials",
    ".config/gh",
    ".config/hub",
    ".npmrc",
    ".yarnrc",
    ".pypirc",
    ".cargo/credentials*",
    ".gem/credentials",
    ".m2/settings-security.xml",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".password-store",
    ".local/share/keyrings",
    ".config/op",
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    // Database, storage and cloud clients' passwords and tokens.
    ".pgpass",
    ".my.cnf",
    ".s3cfg",
    ".oci",
    ".terraformrc",
    ".config/rclone/rclone.conf",
    ".config/containers/auth.json",
    ".cache/huggingface/token",
    ".huggingface/token",
    // Other coding agents' logins (the Gemini CLI's also reaches chitti's own provider).
    ".gemini",
    ".codex/auth.json",
    ".claude/.credentials.json",
];

/// Variables that name where a tool keeps its credentials instead of its default place
/// (a directory hidden whole, or a file), and a trailing-`*` name within it where only
/// that is a credential.
const NAMED_BY_VARIABLES: &[(&str, Option<&str>)] = &[
    ("GNUPGHOME", None),
    ("GH_CONFIG_DIR", None),
    ("DOCKER_CONFIG", None),
    ("AZURE_CONFIG_DIR", None),
    ("CLOUDSDK_CONFIG", None),
    ("PASSWORD_STORE_DIR", None),
    ("AWS_SHARED_CREDENTIALS_FILE", None),
    ("AWS_CONFIG_FILE", None),
    ("GOOGLE_APPLICATION_CREDENTIALS", None),
    ("REGISTRY_AUTH_FILE", None),
    ("PGPASSFILE", None),
    ("NPM_CONFIG_USERCONFIG", None),
    ("RCLONE_CONFIG", None),
    ("HF_TOKEN_PATH", None),
    ("TF_CLI_CONFIG_FILE", None),
    ("NETRC", None),
    ("CARGO_HOME", Some("credentials*")),
    ("XDG_RUNTIME_DIR", Some("containers/auth.json")),
    ("HF_HOME", Some("token")),
    ("CODEX_HOME", Some("auth.json")),
    ("CLAUDE_CONFIG_DIR", Some(".credentials.json")),
];

/// The XDG base directories, with the place under the home each stands for.
const XDG_BASES: &[(&str, &str)] = &[
    ("XDG_CONFIG_HOME", ".config/"),
    ("XDG_DATA_HOME", ".local/share/"),
    ("XDG_CACHE_HOME", ".cache/"),
];

/// Credential locations the user's environment moves elsewhere (`var` reads it): the
/// built-in entries under `.config`, `.local/share` and `.cache` under the XDG base
/// directories when those are set, and the places tools' own variables name
/// (`GNUPGHOME`, `KUBECONFIG`'s files, ...). Only absolute paths: tools read relative ones
/// from wherever they run. Read once, before any fork; each call hides those that exist
/// as it starts.
pub fn named_by_environment(
    home: &Path,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Vec<PathBuf> {
    // Absolute, or from the home (`~/...`, which many of these tools expand themselves);
    // spelled as its components (`dir/`, `dir/.`: a trailing slash would make a link on
    // the way look like what it leads to).
    let absolute = |value: std::ffi::OsString| {
        let path = PathBuf::from(value);
        let path = match path.strip_prefix("~") {
            Ok(rest) => home.join(rest),
            Err(_) => path,
        };
        path.is_absolute()
            .then(|| path.components().collect::<PathBuf>())
    };
    let mut out = Vec::new();
    for (name, default) in XDG_BASES {
        let Some(base) = var(name).and_then(absolute) else {
            continue;
        };
        if base == home.join(default.trim_end_matches('/')) {
            continue;
        }
        for entry in HOME_CREDENTIALS {
            if let Some(rest) = entry.strip_prefix(default) {
                expand_into(&base.join(rest), &mut out);
            }
        }
    }
    for (name, within) in NAMED_BY_VARIABLES {
        if let Some(place) = var(name).and_then(absolute) {
            match within {
                None => out.push(place),
                Some(within) => expand_into(&place.join(within), &mut out),
            }
        }
    }
    // A list of files, as `PATH` lists directories.
    if let Some(list) = var("KUBECONFIG") {
        out.extend(std::env::split_paths(&list).filter_map(|p| absolute(p.into_os_string())));
    }
    out
}

/// Secrets outside every home that only root may read. A sandbox started by root is still
/// uid 0, their owner, and dropping capabilities does not change that; so they are hidden
/// when chitti runs as root. (For anyone else, their modes already keep them out.)
pub const ROOT_ONLY: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh/ssh_host_*",
    "/etc/ssl/private",
    "/etc/security/opasswd",
    // Keys and passwords system services keep (Kerberos, Wi-Fi and VPN, PPP, TLS
    // certificates from certbot, answers given to debconf).
    "/etc/krb5.keytab",
    "/etc/NetworkManager/system-connections",
    "/etc/wpa_supplicant/wpa_supplicant*",
    "/etc/ipsec.secrets",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/letsencrypt/archive",
    "/etc/letsencrypt/keys",
    "/var/cache/debconf/passwords.dat",
];

/// Expands the built-in list for `home`, plus chitti's own config and state directories
/// (they hold API keys and conversation logs). Globs are expanded against the directory
/// as it is now; a path that does not exist is returned as-is so that callers can decide.
pub fn builtin(home: &Path, chitti_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::with_capacity(HOME_CREDENTIALS.len() + chitti_dirs.len());
    for entry in HOME_CREDENTIALS {
        expand_into(&super::joined(home, entry), &mut out);
    }
    out.extend(chitti_dirs.iter().cloned());
    out
}

/// The symbolic links inside the hidden directory `dir` (two levels deep, the first 256
/// entries), which lead to the same secrets under their other names. A dotfiles
/// manager links each file of `~/.ssh` on its own where the directory itself is real, and
/// `~/.kube/config` is often a link to one cluster's file. Targets that hold the home
/// (a link to `~` or `/`) are left out: no secret store, and hiding them would hide
/// everything. A link that leads nowhere now is not followed.
pub fn links_within(dir: &Path, home: &Path) -> Vec<PathBuf> {
    let mut targets = Vec::new();
    let mut budget = 256usize;
    let mut dirs = vec![(dir.to_path_buf(), 0)];
    while let Some((at, depth)) = dirs.pop() {
        crate::dir_entries::for_each_entry(&at, |name, kind| {
            if budget == 0 {
                return;
            }
            budget -= 1;
            let path = super::joined(&at, name);
            match kind {
                // The link itself, which the search follows name by name as it follows
                // any location: a link on the way in a workspace, or one leading nowhere
                // into it, is refused there.
                crate::dir_entries::EntryKind::Symlink => match std::fs::canonicalize(&path) {
                    Ok(target) if home.starts_with(&target) || target.starts_with(dir) => {}
                    _ => targets.push(path),
                },
                crate::dir_entries::EntryKind::Dir if depth < 1 => dirs.push((path, depth + 1)),
                _ => {}
            }
        });
    }
    targets
}

/// Expands a trailing-`*` glob in the last component; other paths pass through.
pub fn expand_into(pattern: &Path, out: &mut Vec<PathBuf>) {
    let Some(name) = pattern.file_name().and_then(|n| n.to_str()) else {
        out.push(pattern.to_path_buf());
        return;
    };
    let Some(prefix) = name.strip_suffix('*') else {
        out.push(pattern.to_path_buf());
        return;
    };
    let parent = pattern.parent().unwrap_or(Path::new("/"));
    // Keep the bare prefix too: if it is created later it must still be covered where the
    // backend can cover a missing path.
    out.push(super::joined(parent, prefix));
    let listed = crate::dir_entries::for_each_entry(parent, |file_name, _| {
        let candidate = file_name.to_string_lossy();
        if candidate.starts_with(prefix) && candidate != prefix {
            out.push(super::joined(parent, file_name));
        }
    });
    // A directory that is there but cannot be listed (mode --x) may hold matches nobody
    // can name in advance: it is hidden whole.
    if !listed && std::fs::metadata(parent).is_ok_and(|m| m.is_dir()) {
        out.push(parent.to_path_buf());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Links inside a hidden directory lead to its secrets under other names: their
    /// targets are credential locations too (a review read a stow-managed `~/.ssh` key and
    /// a linked `~/.kube/config` through them).
    #[test]
    fn links_inside_a_hidden_directory_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let home = base.join("home");
        let ssh = home.join(".ssh");
        let dotfiles = home.join("dotfiles/ssh");
        std::fs::create_dir_all(ssh.join("keys")).unwrap();
        std::fs::create_dir_all(&dotfiles).unwrap();
        std::fs::write(dotfiles.join("id_ed25519"), "x").unwrap();
        std::fs::write(dotfiles.join("deep"), "x").unwrap();
        std::os::unix::fs::symlink("../dotfiles/ssh/id_ed25519", ssh.join("id_ed25519")).unwrap();
        std::os::unix::fs::symlink(dotfiles.join("deep"), ssh.join("keys/deep")).unwrap();
        std::os::unix::fs::symlink("nowhere", ssh.join("dangling")).unwrap();
        std::os::unix::fs::symlink(&home, ssh.join("home")).unwrap();
        std::os::unix::fs::symlink("/", ssh.join("root")).unwrap();
        std::fs::write(ssh.join("known_hosts"), "x").unwrap();
        std::os::unix::fs::symlink("known_hosts", ssh.join("inside")).unwrap();
        let mut found = links_within(&ssh, &home);
        found.sort();
        assert_eq!(
            found,
            [
                ssh.join("dangling"),
                ssh.join("id_ed25519"),
                ssh.join("keys/deep")
            ]
        );
    }

    /// Tools told by the environment to keep their credentials elsewhere have them hidden
    /// there too (a review read gh's token under `XDG_CONFIG_HOME`, and a cargo token
    /// under `CARGO_HOME`).
    #[test]
    fn locations_the_environment_names_are_credential_locations() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let cargo = dir.path().join("cargo");
        std::fs::create_dir_all(&cargo).unwrap();
        std::fs::write(cargo.join("credentials.toml"), "x").unwrap();
        for there in ["xdg/gh", "xdg/git", "xdg/rclone", "gpg"] {
            std::fs::create_dir_all(dir.path().join(there)).unwrap();
        }
        for there in ["xdg/git/credentials", "xdg/rclone/rclone.conf", "k1"] {
            std::fs::write(dir.path().join(there), "x").unwrap();
        }
        let vars: std::collections::HashMap<&str, PathBuf> = [
            ("XDG_CONFIG_HOME", dir.path().join("xdg")),
            ("XDG_DATA_HOME", home.join(".local/share")),
            ("GNUPGHOME", dir.path().join("gpg")),
            ("CARGO_HOME", cargo.clone()),
            ("DOCKER_CONFIG", PathBuf::from("relative/docker")),
            (
                "KUBECONFIG",
                std::env::join_paths([dir.path().join("k1"), PathBuf::from("k2")])
                    .unwrap()
                    .into(),
            ),
        ]
        .into_iter()
        .collect();
        let found = named_by_environment(&home, |name| {
            vars.get(name).map(|p| p.clone().into_os_string())
        });
        for expected in [
            dir.path().join("xdg/gh"),
            dir.path().join("xdg/git/credentials"),
            dir.path().join("xdg/rclone/rclone.conf"),
            dir.path().join("gpg"),
            cargo.join("credentials.toml"),
            dir.path().join("k1"),
        ] {
            assert!(found.contains(&expected), "{expected:?} not in {found:?}");
        }
        // The defaults are in the built-in list already; relative places are not taken.
        assert!(!found.iter().any(|p| p.starts_with(&home)), "{found:?}");
        assert!(!found.iter().any(|p| p.is_relative()), "{found:?}");
    }

    #[test]
    fn glob_expands_matching_siblings() {
        let dir = tempfile::tempdir().unwrap();
        let cargo = dir.path().join(".cargo");
        std::fs::create_dir(&cargo).unwrap();
        std::fs::write(cargo.join("credentials.toml"), "x").unwrap();
        std::fs::write(cargo.join("config.toml"), "x").unwrap();
        let list = builtin(dir.path(), &[]);
        assert!(list.contains(&cargo.join("credentials.toml")));
        assert!(list.contains(&cargo.join("credentials")));
        assert!(!list.contains(&cargo.join("config.toml")));
        assert!(list.contains(&dir.path().join(".ssh")));
        assert!(
            !list.contains(&cargo),
            "a directory that can be listed is not hidden whole"
        );
    }

    /// Where the directory cannot be listed, what the glob would match is unknown: the
    /// directory is hidden whole. (Root lists it whatever its mode, and finds the match:
    /// either way the credential is covered.)
    #[test]
    fn a_glob_in_a_directory_that_cannot_be_listed_hides_the_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cargo = dir.path().join(".cargo");
        std::fs::create_dir(&cargo).unwrap();
        std::fs::write(cargo.join("credentials.toml"), "x").unwrap();
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o100)).unwrap();
        let list = builtin(dir.path(), &[]);
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
        if nix::unistd::geteuid().is_root() {
            assert!(list.contains(&cargo.join("credentials.toml")), "{list:?}");
        } else {
            assert!(list.contains(&cargo), "{list:?}");
        }
        // A missing one is not there to hide.
        let list = builtin(&dir.path().join("elsewhere"), &[]);
        assert!(!list.iter().any(|p| p.ends_with(".cargo")));
    }
}
