//! `chitti sandbox test`: prove a profile on this machine with real probes.
//!
//! Every check states what the profile promises, what was observed from outside the
//! sandbox, and a verdict. The run passes only when every applicable promise holds, so
//! `--backend none` fails it: the verifier can fail.

mod lab;
mod probes;

use std::path::Path;

use serde::Serialize;

use crate::policy::Profile;
use crate::sandbox::{Backend, SandboxError};

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub promise: String,
    pub observed: String,
    pub passed: bool,
    /// Not a promise on this machine or workspace (shown, not counted).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub not_applicable: bool,
}

impl Check {
    pub fn not_applicable(name: &str, why: &str) -> Check {
        Check {
            name: name.to_string(),
            promise: "n/a".into(),
            observed: why.to_string(),
            passed: true,
            not_applicable: true,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub backend: String,
    pub profile: String,
    pub checks: Vec<Check>,
    pub passed: bool,
}

/// Runs every probe against `profile` on `backend`.
pub async fn run(
    profile: &Profile,
    backend: Backend,
    workspace: Option<&Path>,
) -> Result<Report, SandboxError> {
    let lab = lab::Lab::new(profile, backend, workspace)?;
    let mut checks = Vec::new();
    probes::writes(&lab, &mut checks).await;
    probes::git(&lab, &mut checks).await;
    probes::reads(&lab, &mut checks).await;
    probes::network(&lab, &mut checks).await;
    probes::environment(&lab, &mut checks).await;
    probes::process(&lab, &mut checks).await;
    probes::syscalls(&lab, &mut checks).await;
    probes::signals(&lab, &mut checks).await;
    probes::lifetime(&lab, &mut checks).await;
    let passed = checks.iter().all(|c| c.passed);
    Ok(Report {
        backend: backend.name().into(),
        profile: profile.name.clone(),
        checks,
        passed,
    })
}

/// The verdict table.
pub fn render(report: &Report) -> String {
    let name_w = report
        .checks
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut out = format!(
        "chitti sandbox test: profile {} on backend {}\n\n",
        report.profile, report.backend
    );
    out.push_str(&format!(
        "{:<name_w$}  {:<7}  promise / observed\n",
        "check", "verdict"
    ));
    for c in &report.checks {
        let verdict = if c.not_applicable {
            "n/a"
        } else if c.passed {
            "PASS"
        } else {
            "FAIL"
        };
        out.push_str(&format!(
            "{:<name_w$}  {:<7}  {} / {}\n",
            c.name, verdict, c.promise, c.observed
        ));
    }
    let failed = report.checks.iter().filter(|c| !c.passed).count();
    let applicable = report.checks.iter().filter(|c| !c.not_applicable).count();
    out.push_str(&format!(
        "\n{} of {} checks passed{}\n",
        applicable - failed,
        applicable,
        if report.passed {
            ""
        } else {
            ": the sandbox does NOT keep this profile's promises here"
        }
    ));
    out
}
