//! Path canonicalisation without a heap round trip in libc.
//!
//! `std::fs::canonicalize` calls `realpath(path, NULL)`, which makes libc allocate the
//! result and Rust free it. With musl that allocation comes from musl's own allocator
//! (Rust's goes to dlmalloc), which maps a fresh page for it and unmaps it again on free:
//! about 8 µs per call, and a sandboxed call resolves a dozen paths (workspace, home,
//! state directory, private TMPDIR, ...). Handing `realpath` a buffer of our own avoids
//! both. Same resolution, same errors. The buffer comes from Rust's allocator, not the
//! stack: realpath's own frame already takes 8 KiB of stack, and every further page of
//! stack a call reaches is a page fault.

use std::io;
use std::path::{Path, PathBuf};

/// The device and inode `path` names, without following a final link: what Landlock's
/// rules attach to, the same whatever name (or mount) reaches it.
#[cfg(unix)]
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// The absolute path with every symbolic link, `.` and `..` resolved, like
/// [`std::fs::canonicalize`].
#[cfg(unix)]
pub fn canonicalize(path: &Path) -> io::Result<PathBuf> {
    use std::ffi::{CStr, CString, OsStr};
    use std::os::unix::ffi::OsStrExt;

    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // realpath writes at most PATH_MAX bytes, the terminating NUL included.
    let mut buf: Vec<libc::c_char> = Vec::with_capacity(libc::PATH_MAX as usize);
    // SAFETY: `c_path` is NUL-terminated and `buf` has room for PATH_MAX bytes, which is
    // what realpath may write.
    let resolved = unsafe { libc::realpath(c_path.as_ptr(), buf.as_mut_ptr()) };
    if resolved.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success realpath returned `buf`, now a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_bytes();
    Ok(PathBuf::from(OsStr::from_bytes(bytes)))
}

/// `path` (absolute) with `.` and `..` applied, provided that no component on the way is a
/// symbolic link: for a path read from a file the sandbox could have changed the target
/// of, where following a planted link would reach outside the directories it may write.
/// Every component must exist.
pub fn resolve_without_symlinks(path: &Path) -> io::Result<PathBuf> {
    use std::path::Component;
    if !path.is_absolute() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not an absolute path", path.display()),
        ));
    }
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => {
                out.push(name);
                if std::fs::symlink_metadata(&out)?.file_type().is_symlink() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{} is a symbolic link", out.display()),
                    ));
                }
            }
            // Only real directories were passed so far: their `..` is the lexical parent.
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

#[cfg(not(unix))]
pub fn canonicalize(path: &Path) -> io::Result<PathBuf> {
    std::fs::canonicalize(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Agrees with std on what exists (through a symlink and `..`) and on what does not.
    #[test]
    fn resolves_like_std() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        for path in [
            dir.path().to_path_buf(),
            dir.path().join("link"),
            dir.path().join("link/../real/."),
        ] {
            assert_eq!(
                canonicalize(&path).unwrap(),
                std::fs::canonicalize(&path).unwrap(),
                "{}",
                path.display()
            );
        }
        let missing = dir.path().join("missing");
        assert_eq!(
            canonicalize(&missing).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            canonicalize(Path::new("a\0b")).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn a_symlink_anywhere_on_the_way_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("link")).unwrap();
        assert_eq!(
            resolve_without_symlinks(&root.join("a/b/../b/./")).unwrap(),
            root.join("a/b")
        );
        assert!(resolve_without_symlinks(&root.join("link/b")).is_err());
        assert!(resolve_without_symlinks(&root.join("link")).is_err());
        assert!(resolve_without_symlinks(&root.join("a/missing")).is_err());
        assert!(resolve_without_symlinks(Path::new("a/b")).is_err());
    }
}
