//! `chitti`: the sandbox (`sandbox exec`, `sandbox test`, `sandbox profile`) and `doctor`.
//! `run`, `chat` and `mcp` are served by `chitti-agent`, which this binary execs
//! (src/cli/agent_binary.rs says why they are two binaries).

// A C `main` instead of std's start: src/process_start.rs says why, and does what of that
// start chitti needs.
#![no_main]

use std::ffi::{c_char, c_int};
use std::io::Write;

#[unsafe(no_mangle)]
extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    // SAFETY: the arguments C's start hands to `main`; no other thread exists yet.
    unsafe { chitti::process_start::start(argc, argv) };
    chitti::name_service::builtin_sources_only();
    let cli = chitti::cli::parse(chitti::process_start::args_os());
    let code = chitti::cli::run(cli);
    // What `std::process::exit` does, less unmapping the main thread's signal stack, which
    // the exit unmaps anyway: a `munmap` flushes the TLB of each CPU chitti ran on (an
    // interrupt to the other CPU on a virtual machine), on every sandboxed call. stderr is
    // unbuffered; chitti registers no C `atexit` handlers.
    let _ = std::io::stdout().flush();
    // A call's supervisor may still be exiting: the outcome was printed meanwhile.
    chitti::exec::reap_exiting_supervisors();
    // SAFETY: ends the process; nothing runs after it.
    unsafe { libc::_exit(code) }
}
