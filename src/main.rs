use clap::Parser;

fn main() {
    let cli = chitti::cli::Cli::parse();
    std::process::exit(chitti::cli::run(cli));
}
