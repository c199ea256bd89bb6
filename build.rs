//! Lays out the chitti binary so that a sandboxed call's code sits together.
//!
//! `scripts/startup-order.txt` lists the functions a call runs, in the order they first
//! run (scripts/startup-order.sh regenerates it). Handed to the linker, it puts them side
//! by side at the start of the code, so a call faults in a few hundred KiB of contiguous
//! code rather than pages spread over the whole binary. The names hold from one build to
//! the next (the release profile's fat LTO adds no per-build suffix to them) until the
//! compiler or a dependency changes; names the binary no longer has are skipped without a
//! warning here (the order is an optimisation, never a requirement), and scripts/test.sh
//! fails where too many are gone.
//!
//! Only where the linker is known to be LLD, which takes `--symbol-ordering-file`: Rust's
//! own for x86_64-unknown-linux-gnu since Rust 1.90, and for x86_64-unknown-linux-musl
//! (the target scripts/rust-target.sh builds for) the same LLD, asked for here. A
//! configured linker is left alone.

use std::path::{Path, PathBuf};

fn main() {
    source_id();
    let order = Path::new("scripts/startup-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    let target = std::env::var("TARGET").unwrap_or_default();
    if std::env::var_os("RUSTC_LINKER").is_some()
        || chooses_linker(&std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default())
    {
        return;
    }
    let mut link_args = Vec::new();
    match target.as_str() {
        // Rust links this target with its own LLD already.
        "x86_64-unknown-linux-gnu" => {}
        // This one is linked by the C compiler with the system's GNU ld, which has no
        // --symbol-ordering-file (binutils before 2.43). Rust ships LLD with a wrapper the
        // C compiler can be pointed at, the way rustc does it for the gnu target.
        "x86_64-unknown-linux-musl" => match bundled_lld_dir() {
            Some(dir) => {
                link_args.push("-fuse-ld=lld".to_string());
                link_args.push(format!("-B{}", dir.display()));
                // The ~4600 pointer fix-ups a position-independent chitti applies to
                // itself at every start, as a 1 KiB bitmap (DT_RELR) instead of a 110 KiB
                // table read page by page. Only here: the musl linked in is the
                // toolchain's own (musl applies DT_RELR since 1.2.4), while a static glibc
                // is the build machine's, and one older than 2.36 would start unrelocated.
                link_args.push("-Wl,-z,pack-relative-relocs".to_string());
            }
            None => return,
        },
        _ => return,
    }
    let Ok(order) = std::fs::canonicalize(order) else {
        return;
    };
    for arg in link_args {
        println!("cargo:rustc-link-arg-bin=chitti={arg}");
    }
    // -Xlinker passes each argument whole (a path may hold a comma, which -Wl splits at).
    for arg in [
        format!("--symbol-ordering-file={}", order.display()),
        "--no-warn-symbol-ordering".to_string(),
    ] {
        println!("cargo:rustc-link-arg-bin=chitti=-Xlinker");
        println!("cargo:rustc-link-arg-bin=chitti={arg}");
    }
}

/// Names the sources this build is made from (`CHITTI_SOURCE_ID`, a hash of every file
/// under `src/` and `profiles/` and of the manifest and lock file): `chitti` and
/// `chitti-agent`, two binaries, must come from one build, or a session (`chitti mcp`)
/// would run older sandbox code than `chitti sandbox exec` after a partial upgrade.
fn source_id() {
    use std::hash::Hasher;
    let mut files = Vec::new();
    for top in ["src", "profiles", "Cargo.toml", "Cargo.lock", "build.rs"] {
        println!("cargo:rerun-if-changed={top}");
        collect_files(Path::new(top), &mut files);
    }
    files.sort();
    // FNV-1a: the same on every toolchain (std's hasher may change between releases).
    let mut hash = Fnv(0xcbf2_9ce4_8422_2325);
    for file in &files {
        hash.write(file.to_string_lossy().as_bytes());
        hash.write(&std::fs::read(file).unwrap_or_default());
    }
    println!("cargo:rustc-env=CHITTI_SOURCE_ID={:016x}", hash.finish());
}

struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

fn collect_files(path: &Path, out: &mut Vec<PathBuf>) {
    match std::fs::read_dir(path) {
        Ok(entries) => {
            for entry in entries.flatten() {
                collect_files(&entry.path(), out);
            }
        }
        Err(_) if path.is_file() => out.push(path.to_path_buf()),
        Err(_) => {}
    }
}

/// The directory holding the toolchain's `ld.lld` wrapper for C compiler drivers
/// (`<sysroot>/lib/rustlib/<host>/bin/gcc-ld`), if this toolchain has one.
fn bundled_lld_dir() -> Option<PathBuf> {
    let rustc = std::env::var_os("RUSTC")?;
    let host = std::env::var("HOST").ok()?;
    let output = std::process::Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    let sysroot = String::from_utf8(output.stdout).ok()?;
    let dir = Path::new(sysroot.trim()).join(format!("lib/rustlib/{host}/bin/gcc-ld"));
    dir.join("ld.lld").is_file().then_some(dir)
}

/// Whether the rustflags pick a linker other than the default one.
fn chooses_linker(encoded_rustflags: &str) -> bool {
    encoded_rustflags.split('\x1f').any(|flag| {
        ["linker", "link-self-contained", "fuse-ld"]
            .iter()
            .any(|word| flag.contains(word))
    })
}
