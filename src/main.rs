//! `chitti`: the sandbox (`sandbox exec`, `sandbox test`, `sandbox profile`) and `doctor`.
//! `run`, `chat` and `mcp` are served by `chitti-agent`, which this binary execs
//! (src/cli/agent_binary.rs says why they are two binaries).

// A C `main` instead of std's start: src/process_start.rs says why, and does what of that
// start chitti needs. (The unit-test harness brings its own `main`.)
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
#[unsafe(no_mangle)]
extern "C" fn main(argc: std::ffi::c_int, argv: *const *const std::ffi::c_char) -> std::ffi::c_int {
    use std::io::Write;
    // SAFETY: the arguments C's start hands to `main`; no other thread exists yet.
    unsafe { chitti::process_start::start(argc, argv) };
    chitti::name_service::builtin_sources_only();
    let cli = chitti::cli::parse(chitti::process_start::args_os());
    let code = chitti::cli::run(cli);
    // What `std::process::exit` does, less the C library's exit handlers and finalisers,
    // which chitti does not use: stdout is flushed here, stderr is unbuffered.
    let _ = std::io::stdout().flush();
    // A call's supervisor may still be exiting: the outcome was printed meanwhile.
    chitti::exec::reap_exiting_supervisors();
    // SAFETY: ends the process; nothing runs after it.
    unsafe { libc::_exit(code) }
}
