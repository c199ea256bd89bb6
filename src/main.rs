fn main() {
    chitti::name_service::builtin_sources_only();
    let cli = chitti::cli::parse(std::env::args_os().collect());
    std::process::exit(chitti::cli::run(cli));
}
