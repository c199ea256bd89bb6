//! The environment a sandboxed command sees: an allow-list, never the caller's whole
//! environment.

use std::ffi::{OsStr, OsString};

/// Always passed through when set. `LC_*` is matched as a prefix.
const BASE_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
];

/// Substrings of names that are never let through by a pattern (an exact name in a
/// profile is an explicit decision and is honoured).
const SECRET_MARKERS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
    "AUTH",
    "COOKIE",
    "SESSION",
];

/// Names that reach host services; never let through by a pattern.
const HOST_CHANNELS: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "DBUS_SESSION_BUS_ADDRESS",
    "DOCKER_HOST",
    "XDG_RUNTIME_DIR",
    "DISPLAY",
    "WAYLAND_DISPLAY",
];

pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_MARKERS.iter().any(|m| upper.contains(m)) || HOST_CHANNELS.contains(&upper.as_str())
}

/// Validates profile entries: a name, or a prefix ending in `*`.
pub fn validate_allow(entries: &[String]) -> Result<(), String> {
    for entry in entries {
        let stem = entry.strip_suffix('*').unwrap_or(entry);
        let ok = !stem.is_empty()
            && stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !stem.contains('*');
        if !ok {
            return Err(format!(
                "environment.allow: `{entry}` is not a variable name or a `PREFIX_*` pattern"
            ));
        }
    }
    Ok(())
}

fn matches(entry: &str, name: &str) -> bool {
    match entry.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix) && !looks_secret(name),
        None => entry == name,
    }
}

/// Filters `vars` down to the allow-list plus the profile's additions.
pub fn filter<I>(vars: I, extra: &[String]) -> Vec<(OsString, OsString)>
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    vars.into_iter()
        .filter(|(name, _)| {
            let Some(name) = name.to_str() else {
                return false;
            };
            BASE_ALLOW.iter().any(|e| matches(e, name)) || extra.iter().any(|e| matches(e, name))
        })
        .collect()
}

pub fn get<'a>(env: &'a [(OsString, OsString)], name: &str) -> Option<&'a OsStr> {
    env.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_os_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(names: &[&str]) -> Vec<(OsString, OsString)> {
        names
            .iter()
            .map(|n| (OsString::from(n), OsString::from("v")))
            .collect()
    }

    fn names(v: &[(OsString, OsString)]) -> Vec<String> {
        v.iter().map(|(k, _)| k.to_string_lossy().into()).collect()
    }

    #[test]
    fn secrets_never_pass_the_base_list() {
        let out = filter(
            vars(&[
                "PATH",
                "GEMINI_API_KEY",
                "GITHUB_TOKEN",
                "AWS_SECRET_ACCESS_KEY",
                "SSH_AUTH_SOCK",
                "DBUS_SESSION_BUS_ADDRESS",
                "DOCKER_HOST",
                "LC_ALL",
                "MY_PASSWORD",
            ]),
            &[],
        );
        assert_eq!(names(&out), vec!["PATH", "LC_ALL"]);
    }

    #[test]
    fn patterns_skip_secrets_but_exact_names_pass() {
        let out = filter(
            vars(&["CARGO_HOME", "CARGO_REGISTRY_TOKEN", "NPM_TOKEN"]),
            &["CARGO_*".into(), "NPM_TOKEN".into()],
        );
        assert_eq!(names(&out), vec!["CARGO_HOME", "NPM_TOKEN"]);
    }

    #[test]
    fn bad_entries_are_rejected() {
        assert!(validate_allow(&["OK_NAME".into(), "PRE_*".into()]).is_ok());
        assert!(validate_allow(&["*".into()]).is_err());
        assert!(validate_allow(&["A*B".into()]).is_err());
        assert!(validate_allow(&["A B".into()]).is_err());
    }
}
