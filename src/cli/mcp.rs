//! `chitti mcp`: the sandboxed tools served over MCP on stdio.

use super::sandbox_exec::{setup, termination_signal, RECEIVED_SIGNAL};
use super::{report_error, McpArgs};
use crate::policy::Overrides;
use crate::sandbox::BackendChoice;
use crate::tools::Toolbox;

/// Exit status when the server could not be set up (nothing was served).
const SETUP_FAILED: i32 = 125;

pub fn run(args: McpArgs) -> i32 {
    // An MCP client cannot be asked before each command, so there is no unsandboxed mode.
    if args.sandbox.backend == BackendChoice::None {
        report_error(
            "chitti mcp always runs commands in a sandbox; --backend none is not accepted \
             (use auto, bwrap, landlock or seatbelt)",
        );
        return SETUP_FAILED;
    }
    let setup = match setup(&args.sandbox, &Overrides::default()) {
        Ok(setup) => setup,
        Err(e) => {
            report_error(&format!("chitti mcp cannot start: {e}"));
            return SETUP_FAILED;
        }
    };
    let toolbox = Toolbox::resolving_each_call(setup.policy, setup.source, setup.backend);
    // One thread is enough: calls wait on processes, not on the CPU, and skipping the
    // hand-offs between worker threads makes each call measurably faster (bench.sh).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            report_error(&format!("cannot start the runtime: {e}"));
            return SETUP_FAILED;
        }
    };
    eprintln!(
        "chitti mcp: serving on stdio · workspace {} · profile {} · sandbox {}{}",
        toolbox.policy.workspace.display(),
        toolbox.policy.profile,
        toolbox.backend.name(),
        if args.allow_write_tools {
            " · write tools on"
        } else {
            ""
        }
    );
    let served = runtime.block_on(crate::mcp::serve(
        toolbox,
        args.allow_write_tools,
        termination_signal(),
    ));
    // A blocking stdin read (when stdin is not a pipe) must not hold the exit up.
    runtime.shutdown_background();
    match served {
        // Stopped by a signal: 128+N, as `sandbox exec` and a shell say it.
        Ok(()) => match RECEIVED_SIGNAL.load(std::sync::atomic::Ordering::Relaxed) {
            0 => 0,
            signal => 128 + signal,
        },
        Err(e) => {
            report_error(&e);
            1
        }
    }
}
