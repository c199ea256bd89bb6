//! Files generated from the code and shipped in the tree (`src/*/golden/`), read with
//! `include_bytes!` so that a call need not generate them: tests hold each one to what the
//! code generates now.

/// Fails unless `shipped` (the file at `path`, as compiled in) is `generated`; with
/// `CHITTI_UPDATE_GOLDEN` set it rewrites the file instead. `what` says what the file
/// must be, `test` names the test to rerun.
pub fn check(path: &str, shipped: &[u8], generated: &[u8], what: &str, test: &str) {
    if shipped == generated {
        return;
    }
    if std::env::var_os("CHITTI_UPDATE_GOLDEN").is_some() {
        std::fs::write(path, generated).unwrap_or_else(|e| panic!("rewriting {path}: {e}"));
        return;
    }
    panic!(
        "{path} is not {what}; rewrite it with `CHITTI_UPDATE_GOLDEN=1 cargo test {test}` \
         and rebuild"
    );
}
