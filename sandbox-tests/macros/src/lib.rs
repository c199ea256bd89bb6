//! `#[backends]` turns one test body, `fn name(backend: &str) { ... }`, into two `#[test]`
//! functions, `name_bwrap` and `name_landlock`, each of which first makes sure its backend
//! really works on this machine (failing, never skipping, when it does not).
//!
//! Written against `proc_macro` alone (no syn/quote), so the suite needs no new crates.

use proc_macro::{TokenStream, TokenTree};

/// The Linux backends every escape test runs on.
const BACKENDS: &[&str] = &["bwrap", "landlock"];

#[proc_macro_attribute]
pub fn backends(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return compile_error("#[backends] takes no arguments");
    }
    let mut name = None;
    let mut after_fn = false;
    for tree in item.clone() {
        if let TokenTree::Ident(ident) = &tree {
            let text = ident.to_string();
            if after_fn {
                name = Some(text);
                break;
            }
            after_fn = text == "fn";
        }
    }
    let Some(name) = name else {
        return compile_error("#[backends] goes on a function `fn name(backend: &str)`");
    };
    let mut out = item;
    for backend in BACKENDS {
        let wrapper = format!(
            "#[test]\n\
             fn {name}_{backend}() {{\n\
                 ::sandbox_tests::run_test(\"{backend}\", env!(\"CARGO_TARGET_TMPDIR\"), {name});\n\
             }}"
        );
        out.extend(
            wrapper
                .parse::<TokenStream>()
                .expect("the generated wrapper parses"),
        );
    }
    out
}

fn compile_error(message: &str) -> TokenStream {
    format!("compile_error!({message:?});")
        .parse()
        .expect("compile_error! parses")
}
