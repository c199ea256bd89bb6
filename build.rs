//! Lays out the chitti binary so that a sandboxed call's code sits together.
//!
//! `scripts/startup-order.txt` lists the functions a call runs, in the order they first
//! run (scripts/startup-order.sh regenerates it). Handed to the linker, it puts them side
//! by side at the start of the code, so a call faults in a few hundred KiB of contiguous
//! code rather than pages spread over the whole binary. Names the binary no longer has
//! (after a compiler or dependency update) are skipped without a warning: the order is an
//! optimisation, never a requirement.
//!
//! Only where the linker is known to be LLD, which takes `--symbol-ordering-file`: Rust's
//! own for x86_64-unknown-linux-gnu since Rust 1.90. A configured linker is left alone.

use std::path::Path;

fn main() {
    let order = Path::new("scripts/startup-order.txt");
    println!("cargo:rerun-if-changed={}", order.display());
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if std::env::var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu")
        || std::env::var_os("RUSTC_LINKER").is_some()
        || chooses_linker(&std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default())
    {
        return;
    }
    let Ok(order) = std::fs::canonicalize(order) else {
        return;
    };
    // -Xlinker passes each argument whole (a path may hold a comma, which -Wl splits at).
    for arg in [
        format!("--symbol-ordering-file={}", order.display()),
        "--no-warn-symbol-ordering".to_string(),
    ] {
        println!("cargo:rustc-link-arg-bin=chitti=-Xlinker");
        println!("cargo:rustc-link-arg-bin=chitti={arg}");
    }
}

/// Whether the rustflags pick a linker other than the default one.
fn chooses_linker(encoded_rustflags: &str) -> bool {
    encoded_rustflags.split('\x1f').any(|flag| {
        ["linker", "link-self-contained", "fuse-ld"]
            .iter()
            .any(|word| flag.contains(word))
    })
}
