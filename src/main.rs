//! `chitti`: the sandbox (`sandbox exec`, `sandbox test`, `sandbox profile`) and `doctor`.
//! `run`, `chat` and `mcp` are served by `chitti-agent`, which this binary execs
//! (src/cli/agent_binary.rs says why they are two binaries).

fn main() {
    chitti::name_service::builtin_sources_only();
    let cli = chitti::cli::parse(std::env::args_os().collect());
    std::process::exit(chitti::cli::run(cli));
}
