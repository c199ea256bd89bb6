use clap::Parser;

fn main() {
    chitti::name_service::builtin_sources_only();
    let cli = chitti::cli::Cli::parse();
    std::process::exit(chitti::cli::run(cli));
}
