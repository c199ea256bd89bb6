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
    // Other coding agents' logins (the Gemini CLI's also reaches chitti's own provider).
    ".gemini",
    ".codex/auth.json",
    ".claude/.credentials.json",
];

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
        expand_into(&home.join(entry), &mut out);
    }
    out.extend(chitti_dirs.iter().cloned());
    out
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
    out.push(parent.join(prefix));
    let listed = crate::dir_entries::for_each_entry(parent, |file_name, _| {
        let candidate = file_name.to_string_lossy();
        if candidate.starts_with(prefix) && candidate != prefix {
            out.push(parent.join(file_name));
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
