//! Removing a directory the sandbox wrote into (the private TMPDIR).
//!
//! The command may have left directories it cannot be removed from (`chmod 500 dir`), and
//! a plain `remove_dir_all` then stops half-way. Its leftovers would outlive the call, so
//! on failure the tree's directories are made writable again (without following
//! symlinks) and the removal retried; what still fails is reported, never ignored.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Removes `dir` and everything beneath it.
pub fn remove_tree(dir: &Path) -> Result<(), String> {
    // Most commands leave their TMPDIR empty: one rmdir, where remove_dir_all opens and
    // lists the directory first. Already gone (the supervisor removed it): done.
    match std::fs::remove_dir(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(_) => {}
    }
    if std::fs::remove_dir_all(dir).is_ok() || std::fs::symlink_metadata(dir).is_err() {
        return Ok(());
    }
    make_dirs_writable(dir);
    std::fs::remove_dir_all(dir)
        .map_err(|e| format!("could not remove the private TMPDIR {}: {e}", dir.display()))
}

/// Removes everything beneath `dir`, keeping `dir` itself (a reused TMPDIR).
pub fn empty_dir(dir: &Path) -> Result<(), String> {
    let failed =
        |e: std::io::Error| format!("could not empty the private TMPDIR {}: {e}", dir.display());
    for entry in std::fs::read_dir(dir).map_err(failed)? {
        let entry = entry.map_err(failed)?;
        // The entry's own type: a symlink is removed as such, never followed.
        if entry.file_type().map_err(failed)?.is_dir() {
            remove_tree(&entry.path())?;
        } else {
            std::fs::remove_file(entry.path()).map_err(failed)?;
        }
    }
    Ok(())
}

fn make_dirs_writable(dir: &Path) {
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        // symlink_metadata: a symlink is removed as such, never followed.
        let is_dir = std::fs::symlink_metadata(&d).is_ok_and(|m| m.is_dir());
        if !is_dir {
            continue;
        }
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(&d) {
            todo.extend(entries.flatten().map(|e| e.path()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_directories_left_without_write_or_search_permission() {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("tmp");
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/file"), "x").unwrap();
        std::fs::create_dir(dir.join("c")).unwrap();
        std::os::unix::fs::symlink(base.path(), dir.join("c/up")).unwrap();
        for (path, mode) in [("a/b", 0o500), ("a", 0o000), ("c", 0o555)] {
            std::fs::set_permissions(dir.join(path), std::fs::Permissions::from_mode(mode))
                .unwrap();
        }
        let base_mode = std::fs::metadata(base.path()).unwrap().permissions().mode();
        remove_tree(&dir).unwrap();
        assert!(std::fs::symlink_metadata(&dir).is_err());
        // Removing it again is no error: the supervisor and chitti both clean up.
        remove_tree(&dir).unwrap();
        // The symlink's target was not chmodded.
        let after = std::fs::metadata(base.path()).unwrap().permissions().mode();
        assert_eq!(after, base_mode);
    }
}
