//! The user's config file, `~/.config/chitti/config.toml` (`$XDG_CONFIG_HOME/chitti`).
//! It may hold API keys, so it lives in a directory the sandbox cannot read.
//!
//! ```toml
//! provider = "gemini"          # or "openai"
//! approval = "ask"             # or "auto-sandboxed", "auto"
//! profile = "workspace-write"
//! max_steps = 25
//! output_cap = 30000           # characters of each stream of execute_bash shown to the model
//! allow_unsandboxed = false    # may the model ask for `sandbox: false`? (always asks the user)
//! request_timeout_secs = 120   # how long the API may stay silent
//! reply_timeout_secs = 1800    # how long one reply may take, whole
//! max_retries = 3
//!
//! [gemini]
//! api_key = "…"                # GEMINI_API_KEY wins
//! model = "gemini-2.5-flash"
//! base_url = "https://generativelanguage.googleapis.com"
//!
//! [openai]
//! api_key = "…"                # OPENAI_API_KEY wins
//! model = "gpt-4.1-mini"
//! base_url = "http://localhost:11434/v1"
//! ```

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cli::{ApprovalMode, ProviderName};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub provider: Option<ProviderName>,
    pub approval: Option<ApprovalMode>,
    pub profile: Option<String>,
    // Non-zero types: a 0 is refused by the parser itself, whose error names the key,
    // its line and column.
    pub max_steps: Option<NonZeroU32>,
    pub output_cap: Option<NonZeroUsize>,
    #[serde(default)]
    pub allow_unsandboxed: bool,
    pub request_timeout_secs: Option<NonZeroU64>,
    pub reply_timeout_secs: Option<NonZeroU64>,
    pub max_retries: Option<u32>,
    #[serde(default)]
    pub gemini: ProviderConfig,
    #[serde(default)]
    pub openai: ProviderConfig,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub api_key: Option<String>,
    pub model: Option<String>,
    pub base_url: Option<String>,
}

impl Config {
    pub fn path(config_dir: &Path) -> PathBuf {
        config_dir.join("config.toml")
    }

    /// Reads the config file; a missing file is an empty config. Errors say where.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        // toml's own message names the line and column and shows the offending line,
        // as profile errors do.
        let config: Config = toml::from_str(&text).map_err(|e| {
            format!(
                "{}: {}\nFix or remove it: see the config keys in README.md.",
                path.display(),
                e.to_string().trim_end()
            )
        })?;
        Ok(config)
    }

    pub fn provider(&self, name: ProviderName) -> &ProviderConfig {
        match name {
            ProviderName::Gemini => &self.gemini,
            ProviderName::Openai => &self.openai,
        }
    }
}

/// Warns when a config file holding a key can be read by other users.
pub fn warn_if_exposed(path: &Path, config: &Config) {
    use std::os::unix::fs::PermissionsExt;
    let has_key = config.gemini.api_key.is_some() || config.openai.api_key.is_some();
    if let (true, Ok(meta)) = (has_key, std::fs::metadata(path)) {
        if meta.permissions().mode() & 0o077 != 0 {
            eprintln!(
                "chitti: warning: {} holds an API key and other users may read it; run: chmod 600 {}",
                path.display(),
                path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Result<Config, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).unwrap();
        Config::load(&path)
    }

    #[test]
    fn a_full_config_loads() {
        let config = load_text(
            "provider = \"openai\"\napproval = \"auto-sandboxed\"\nmax_steps = 3\n\
             [openai]\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n",
        )
        .unwrap();
        assert_eq!(config.provider, Some(ProviderName::Openai));
        assert_eq!(config.approval, Some(ApprovalMode::AutoSandboxed));
        assert_eq!(config.openai.model.as_deref(), Some("m"));
        assert!(!config.allow_unsandboxed);
    }

    #[test]
    fn a_missing_file_is_an_empty_config() {
        let config = Config::load(Path::new("/nonexistent/chitti/config.toml")).unwrap();
        assert!(config.provider.is_none());
    }

    #[test]
    fn errors_name_the_line_and_column() {
        let e = load_text("provider = \"gemini\"\n\n  approvl = \"ask\"\n").unwrap_err();
        assert!(e.contains("line 3, column 3"), "{e}");
        assert!(e.contains("approvl"), "{e}");
        let e = load_text("provider = \"claude\"\n").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        let e = load_text("[gemini]\napi_key = \n").unwrap_err();
        assert!(e.contains("line 2"), "{e}");
        for key in [
            "max_steps",
            "output_cap",
            "request_timeout_secs",
            "reply_timeout_secs",
        ] {
            let e = load_text(&format!("provider = \"gemini\"\n{key} = 0\n")).unwrap_err();
            assert!(e.contains("line 2, column"), "{key}: {e}");
            assert!(e.contains(key) && e.contains("nonzero"), "{key}: {e}");
        }
    }
}
