//! The system instruction: what the model must know about this machine and its limits.

use std::path::Path;

/// Commands worth telling the model about, when they are installed.
const COMMON_TOOLS: &[&str] = &[
    "rg", "fd", "fdfind", "git", "grep", "find", "sed", "awk", "jq", "python3", "node", "npm",
    "cargo", "rustc", "go", "make", "cmake", "gcc", "cc", "clang", "java", "mvn", "ruby", "perl",
    "curl", "tar", "diff", "patch",
];

/// What the sandbox lets a command do, in words.
#[derive(Debug, Clone)]
pub struct SandboxFacts {
    /// "bwrap", "landlock", "seatbelt", or None when commands run unsandboxed.
    pub backend: Option<String>,
    pub network: bool,
    /// Directories writable besides the workspace.
    pub extra_writable: Vec<String>,
}

pub fn system_instruction(workspace: &Path, sandbox: &SandboxFacts, path_var: &str) -> String {
    let found = available_commands(path_var);
    let os = os_name();
    let mut text = format!(
        "You are chitti, a careful coding agent working in the user's project.\n\
         \n\
         - Operating system: {os}.\n\
         - The project (workspace) is {ws}. Relative paths are relative to it.\n",
        ws = workspace.display()
    );
    match &sandbox.backend {
        Some(backend) => {
            let network = if sandbox.network {
                "The network is on."
            } else {
                "The network is off: downloads, package installs and API calls will fail."
            };
            let extra = if sandbox.extra_writable.is_empty() {
                String::new()
            } else {
                format!(" and in {}", sandbox.extra_writable.join(", "))
            };
            text.push_str(&format!(
                "- execute_bash runs `bash -c COMMAND` inside a sandbox ({backend}). Commands can \
                 write only inside the workspace{extra} and $TMPDIR; everything else is \
                 read-only. Credentials (~/.ssh, cloud and package-registry keys) are \
                 unreadable. .git/hooks and .git/config cannot be changed. {network} No process \
                 outlives its call, and each call has a time limit.\n\
                 - \"Permission denied\", \"Read-only file system\" or a network error outside \
                 those bounds is the sandbox at work: do not try to get around it; say what you \
                 could not do.\n"
            ));
        }
        None => text.push_str(
            "- execute_bash runs `bash -c COMMAND` WITHOUT a sandbox on this machine; the user \
             approves every command. Do not touch anything outside the workspace unless asked.\n",
        ),
    }
    if !found.is_empty() {
        text.push_str(&format!(
            "- Installed commands include: {}.\n",
            found.join(", ")
        ));
    }
    text.push_str(
        "- Read and change files with read_file, list_dir, write_file and edit_file; they work \
         only inside the workspace.\n\
         - The user may deny a call. Then do not repeat it unchanged: adapt, or ask.\n\
         - Work step by step, check your results, and finish with a short, plain answer.\n",
    );
    text
}

/// The common commands found on `path_var`.
fn available_commands(path_var: &str) -> Vec<&'static str> {
    let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
    COMMON_TOOLS
        .iter()
        .copied()
        .filter(|name| which::which_in(name, Some(path_var), &cwd).is_ok())
        .collect()
}

/// "Linux (Debian GNU/Linux 12 (bookworm))", "macOS", …
fn os_name() -> String {
    match std::env::consts::OS {
        "linux" => {
            let pretty = std::fs::read_to_string("/etc/os-release")
                .ok()
                .and_then(|text| {
                    text.lines()
                        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                        .map(|v| v.trim_matches('"').to_string())
                });
            match pretty {
                Some(name) => format!("Linux ({name})"),
                None => "Linux".to_string(),
            }
        }
        "macos" => "macOS".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_instruction_names_the_workspace_sandbox_and_tools() {
        let facts = SandboxFacts {
            backend: Some("bwrap".into()),
            network: false,
            extra_writable: vec![],
        };
        let text = system_instruction(Path::new("/work/proj"), &facts, "/usr/bin:/bin");
        assert!(text.contains("/work/proj"), "{text}");
        assert!(text.contains("sandbox (bwrap)"), "{text}");
        assert!(text.contains("network is off"), "{text}");
        assert!(text.contains("git"), "{text}");
    }

    #[test]
    fn without_a_sandbox_the_instruction_says_so() {
        let facts = SandboxFacts {
            backend: None,
            network: true,
            extra_writable: vec![],
        };
        let text = system_instruction(Path::new("/w"), &facts, "/nonexistent");
        assert!(text.contains("WITHOUT a sandbox"), "{text}");
        assert!(!text.contains("Installed commands"), "{text}");
    }
}
