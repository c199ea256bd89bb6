//! `chitti sandbox test`: the verdict table for a profile on this machine.

use super::{report_error, SandboxOpts};
use crate::policy::{profile, ChittiDirs};
use crate::sandbox::{self, Backend, Capabilities, SandboxError};
use crate::verify;

#[inline(never)] // see cli::run
pub fn run(opts: SandboxOpts, json: bool) -> i32 {
    match run_inner(&opts, json) {
        Ok(passed) => {
            if passed {
                0
            } else {
                1
            }
        }
        Err(e) => {
            report_error(&e.to_string());
            e.exit_code()
        }
    }
}

fn run_inner(opts: &SandboxOpts, json: bool) -> Result<bool, SandboxError> {
    let bad = |e: crate::policy::PolicyError| SandboxError::Unavailable(e.to_string());
    let dirs = ChittiDirs::from_env().map_err(bad)?;
    let profile = profile::load(&opts.profile, Some(&dirs.user_profiles())).map_err(bad)?;
    let selection = sandbox::select(opts.backend, Capabilities::get(), &dirs.state)?;
    if selection.backend == Backend::None {
        eprintln!(
            "chitti: --backend none: nothing is enforced, so these checks are expected to fail"
        );
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SandboxError::Unavailable(format!("cannot start the runtime: {e}")))?;
    let report = runtime.block_on(verify::run(
        &profile,
        selection.backend,
        opts.workspace.as_deref(),
    ))?;
    if json {
        super::out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        ));
    } else {
        super::out(&verify::render(&report));
    }
    Ok(report.passed)
}
