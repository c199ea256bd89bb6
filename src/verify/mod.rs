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
    /// A promise that could not be checked here (a probe's tool or host-side set-up was
    /// missing): not passed, and the run does not pass.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
}

impl Check {
    pub fn not_applicable(name: &str, why: &str) -> Check {
        Check {
            name: name.to_string(),
            promise: "n/a".into(),
            observed: why.to_string(),
            passed: true,
            not_applicable: true,
            skipped: false,
        }
    }

    pub fn skipped(name: &str, promise: &str, why: impl Into<String>) -> Check {
        Check {
            name: name.to_string(),
            promise: promise.into(),
            observed: format!("NOT CHECKED: {}", why.into()),
            passed: false,
            not_applicable: false,
            skipped: true,
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
    let mut lab = lab::Lab::new(profile, backend, workspace)?;
    lab.preflight().await?;
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
        } else if c.skipped {
            "SKIP"
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
    let count = |f: fn(&Check) -> bool| report.checks.iter().filter(|c| f(c)).count();
    let applicable = count(|c| !c.not_applicable);
    let passed = count(|c| c.passed && !c.not_applicable);
    let failed = count(|c| !c.passed && !c.skipped);
    let skipped = count(|c| c.skipped);
    let verdict = if failed > 0 {
        ": the sandbox does NOT keep this profile's promises here".to_string()
    } else if skipped > 0 {
        format!(
            "; {skipped} could not be checked here (SKIP, see why above), so this profile \
             is NOT proven on this machine"
        )
    } else {
        String::new()
    };
    out.push_str(&format!(
        "\n{passed} of {applicable} checks passed{verdict}\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(checks: Vec<Check>) -> Report {
        let passed = checks.iter().all(|c| c.passed);
        Report {
            backend: "landlock".into(),
            profile: "workspace-write".into(),
            checks,
            passed,
        }
    }

    fn pass(name: &str) -> Check {
        Check {
            name: name.into(),
            promise: "denied".into(),
            observed: "denied".into(),
            passed: true,
            not_applicable: false,
            skipped: false,
        }
    }

    /// A check that could not run is neither a pass nor a failure of the sandbox: the
    /// run does not pass, and the verdict says the profile is not proven.
    #[test]
    fn skipped_checks_are_counted_apart_and_keep_the_run_from_passing() {
        let r = report(vec![
            pass("a"),
            Check::skipped("b", "blocked", "python3 does not run"),
            Check::not_applicable("c", "not here"),
        ]);
        assert!(!r.passed);
        let text = render(&r);
        assert!(
            text.contains("b      SKIP     blocked / NOT CHECKED: python3"),
            "{text}"
        );
        assert!(
            text.contains("1 of 2 checks passed; 1 could not be checked"),
            "{text}"
        );
        assert!(text.contains("NOT proven"), "{text}");
        assert!(!text.contains("does NOT keep"), "{text}");

        let mut failed = pass("d");
        failed.passed = false;
        let text = render(&report(vec![
            failed,
            Check::skipped("b", "blocked", "no listener"),
        ]));
        assert!(
            text.contains("0 of 2 checks passed: the sandbox does NOT keep"),
            "{text}"
        );

        let text = render(&report(vec![pass("a")]));
        assert!(text.ends_with("1 of 1 checks passed\n"), "{text}");
    }
}
