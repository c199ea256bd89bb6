/// With musl, Rust's allocations go to dlmalloc (Cargo.toml says why).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() {
    chitti::name_service::builtin_sources_only();
    let cli = chitti::cli::parse(std::env::args_os().collect());
    std::process::exit(chitti::cli::run(cli));
}
