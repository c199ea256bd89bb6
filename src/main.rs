use clap::Parser;

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // The sandbox helper is chitti re-executed; dispatch before any argument parsing.
    #[cfg(target_os = "linux")]
    if args
        .get(1)
        .is_some_and(|a| a == chitti::sandbox::linux::helper::HELPER_ARG)
    {
        chitti::sandbox::linux::helper::main(args[2..].to_vec());
    }
    let cli = chitti::cli::Cli::parse_from(args);
    std::process::exit(chitti::cli::run(cli));
}
