//! `chitti-agent`: the agent (`chitti run`, `chitti chat`) and the MCP server (`chitti mcp`),
//! which the `chitti` binary execs for those commands (src/cli/agent_binary.rs says why they
//! are two binaries). Given any other command, it does what `chitti` does.

fn main() {
    if let Err(why) = chitti::cli::agent_binary::built_with_its_chitti() {
        eprintln!("chitti: {why}");
        std::process::exit(126);
    }
    chitti::name_service::builtin_sources_only();
    let cli = chitti::cli::parse(std::env::args_os().collect());
    std::process::exit(chitti::cli::run_agent(cli));
}
