//! Policy → a Seatbelt (macOS `sandbox-exec`) profile: the base policy from
//! `profiles/seatbelt-base.sbpl` plus generated sections. Pure, so it is tested on every
//! OS; `sandbox::macos` runs it.
//!
//! Paths reach the profile only as `-D NAME=value` parameters referenced with
//! `(param "NAME")`, so a workspace path full of quotes and parentheses cannot inject
//! rules. Seatbelt compares canonical paths (/tmp is /private/tmp), and the policy's paths
//! are canonical already.

use std::path::{Path, PathBuf};

use crate::policy::Policy;

pub const BASE: &str = include_str!("../../profiles/seatbelt-base.sbpl");

/// The absolute path chitti runs; never looked up through PATH.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generated {
    pub profile: String,
    /// `(name, value)` pairs passed as `-D name=value`.
    pub params: Vec<(String, PathBuf)>,
}

/// Builds the profile for `policy`, with `tmpdir` as the private temporary directory.
pub fn generate(policy: &Policy, tmpdir: Option<&Path>) -> Generated {
    let mut params: Vec<(String, PathBuf)> = Vec::new();
    let mut param = |name: String, value: &Path| {
        params.push((name.clone(), value.to_path_buf()));
        format!("(param \"{name}\")")
    };
    let mut text = String::from(BASE);

    text.push_str("\n; Reads: everything except credential locations and raw disks.\n");
    let mut read_excl = vec!["(require-not (regex #\"^/dev/r?disk\"))".to_string()];
    for (i, path) in policy.deny_read.iter().enumerate() {
        read_excl.push(format!(
            "(require-not (subpath {}))",
            param(format!("DENY_READ_{i}"), path)
        ));
    }
    text.push_str(&format!(
        "(allow file-read*\n  (require-all\n    (subpath \"/\")\n    {}))\n",
        read_excl.join("\n    ")
    ));

    text.push_str("\n; Writes: the writable roots, minus protected paths; the private TMPDIR.\n");
    for (i, root) in policy.writable.iter().enumerate() {
        let root_ref = param(format!("WRITABLE_ROOT_{i}"), root);
        let mut excl = Vec::new();
        for (j, ro) in policy
            .read_only
            .iter()
            .filter(|p| p.starts_with(root))
            .enumerate()
        {
            excl.push(format!(
                "(require-not (subpath {}))",
                param(format!("WRITABLE_ROOT_{i}_READ_ONLY_{j}"), ro)
            ));
        }
        // The protected directory itself may not be renamed or replaced.
        for (j, pin) in policy
            .pinned
            .iter()
            .filter(|p| p.starts_with(root))
            .enumerate()
        {
            excl.push(format!(
                "(require-not (literal {}))",
                param(format!("WRITABLE_ROOT_{i}_PINNED_{j}"), pin)
            ));
        }
        if excl.is_empty() {
            text.push_str(&format!("(allow file-write* (subpath {root_ref}))\n"));
        } else {
            text.push_str(&format!(
                "(allow file-write*\n  (require-all\n    (subpath {root_ref})\n    {}))\n",
                excl.join("\n    ")
            ));
        }
    }
    if let Some(tmp) = tmpdir {
        let tmp_ref = param("TMPDIR".into(), tmp);
        text.push_str(&format!("(allow file-write* (subpath {tmp_ref}))\n"));
    }

    if policy.network {
        text.push_str(
            "\n; Network on: IP only. Unix sockets (docker, ssh-agent) stay unreachable.\n\
             (allow network-outbound (remote ip))\n\
             (allow network-inbound (local ip))\n\
             (allow network-bind (local ip))\n\
             (allow system-socket)\n\
             (allow mach-lookup\n  (global-name \"com.apple.dnssd.service\")\n  (global-name \"com.apple.mDNSResponder\")\n  (global-name \"com.apple.trustd.agent\"))\n",
        );
    } else {
        text.push_str(
            "\n; Network off: no network rule, so (deny default) refuses every socket operation.\n",
        );
    }
    Generated {
        profile: text,
        params,
    }
}

/// `sandbox-exec` arguments: the profile file, the parameters, then the command.
pub fn args(generated: &Generated, profile_file: &Path) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = vec!["-f".into(), profile_file.into()];
    for (name, value) in &generated.params {
        let mut kv = std::ffi::OsString::from(format!("{name}="));
        kv.push(value);
        out.push("-D".into());
        out.push(kv);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Limits;
    use std::time::Duration;

    fn policy(ws: &str, network: bool) -> Policy {
        Policy {
            profile: "workspace-write".into(),
            workspace: ws.into(),
            writable: vec![ws.into()],
            private_tmp: true,
            deny_read: vec!["/Users/me/.ssh".into(), "/Users/me/.netrc".into()],
            deny_read_by_inode: false,
            pinned: vec![format!("{ws}/.git").into()],
            read_only: vec![
                format!("{ws}/.git/hooks").into(),
                format!("{ws}/.git/config").into(),
            ],
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

    const GOLDEN: &str = "src/sandbox/golden/seatbelt-workspace-write.sbpl";

    #[test]
    fn golden_workspace_write() {
        let g = generate(
            &policy("/Users/me/proj", false),
            Some(Path::new("/private/var/folders/x/T/chitti-1")),
        );
        crate::golden::check(
            GOLDEN,
            include_bytes!("golden/seatbelt-workspace-write.sbpl"),
            g.profile.as_bytes(),
            "the profile generate() writes for this policy (review the diff)",
            "golden_workspace_write",
        );
        let names: Vec<&str> = g.params.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "DENY_READ_0",
                "DENY_READ_1",
                "WRITABLE_ROOT_0",
                "WRITABLE_ROOT_0_READ_ONLY_0",
                "WRITABLE_ROOT_0_READ_ONLY_1",
                "WRITABLE_ROOT_0_PINNED_0",
                "TMPDIR"
            ]
        );
    }

    #[test]
    fn hostile_paths_cannot_inject_rules() {
        let hostile = "/Users/me/a\") (allow file-write* (subpath \"/\")) (\"\n(allow default)";
        let g = generate(&policy(hostile, false), None);
        assert!(!g.profile.contains(hostile));
        assert!(!g.profile.contains("(allow default)"));
        assert!(
            !g.profile.contains("/Users/me"),
            "no path is interpolated into the text"
        );
        assert!(g.params.iter().any(|(_, v)| v == Path::new(hostile)));
        // Every parameter reference is to a generated name.
        for line in g.profile.lines() {
            for part in line.split("(param \"").skip(1) {
                let name = part.split('"').next().unwrap();
                assert!(
                    name.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn every_guarantee_has_its_rule() {
        let off = generate(&policy("/w", false), Some(Path::new("/t")));
        assert!(off.profile.contains("(deny default)"));
        assert!(!off.profile.contains("(allow default)"));
        assert!(
            !off.profile.contains("(allow network"),
            "network off has no network rule"
        );
        assert!(off
            .profile
            .contains("(require-not (subpath (param \"DENY_READ_0\")))"));
        assert!(off
            .profile
            .contains("(require-not (subpath (param \"DENY_READ_1\")))"));
        assert!(off
            .profile
            .contains("(require-not (regex #\"^/dev/r?disk\"))"));
        assert!(off
            .profile
            .contains("(require-not (subpath (param \"WRITABLE_ROOT_0_READ_ONLY_0\")))"));
        assert!(off
            .profile
            .contains("(require-not (literal (param \"WRITABLE_ROOT_0_PINNED_0\")))"));
        assert!(off
            .profile
            .contains("(allow file-write* (subpath (param \"TMPDIR\")))"));
        assert!(off.profile.contains("(allow signal (target same-sandbox))"));
        // The only unconditional file-write rules are for harmless devices.
        for line in off.profile.lines().filter(|l| l.contains("file-write")) {
            assert!(
                line.contains("(param")
                    || line.contains("file-write-data file-ioctl")
                    || line.trim() == "(allow file-write*",
                "unexpected write rule: {line}"
            );
        }
        let on = generate(&policy("/w", true), None);
        assert!(on.profile.contains("(allow network-outbound (remote ip))"));
        assert!(
            !on.profile.contains("unix-socket"),
            "unix sockets stay denied"
        );
    }

    #[test]
    fn args_pass_the_profile_file_and_parameters() {
        let g = generate(&policy("/w", false), None);
        let a = args(&g, Path::new("/p/profile.sb"));
        assert_eq!(a[0], "-f");
        assert_eq!(a[1], "/p/profile.sb");
        assert_eq!(a[2], "-D");
        assert_eq!(a[3], "DENY_READ_0=/Users/me/.ssh");
    }
}
