//! Reading a file the sandbox may have written, without trusting its size.
//!
//! A sandboxed command can make any file in a writable root as large as its limits allow
//! (gigabytes, sparse), or a FIFO: what chitti reads from there after a call, or before the
//! next (git's own small files: `.git`, `commondir`, config), is read up to a limit and
//! never waited on.

use std::path::Path;

/// What [`read_at_most`] read.
pub enum Bounded {
    Whole(Vec<u8>),
    /// The file goes on past the limit: its first bytes, as many as the limit.
    Start(Vec<u8>),
}

/// At most `limit` bytes of the file at `path` (symlinks followed, as git opens such
/// files), opened without waiting on a FIFO.
pub fn read_at_most(path: &Path, limit: u64) -> std::io::Result<Bounded> {
    use std::io::Read;
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    Ok(if bytes.len() as u64 > limit {
        bytes.truncate(limit as usize);
        Bounded::Start(bytes)
    } else {
        Bounded::Whole(bytes)
    })
}

/// The regular file at `path` (symlinks followed, as git opens its files), opened without
/// waiting: anything else is refused (InvalidData). A FIFO, or a link to one or to a pipe
/// of chitti's own (`/proc/self/fd/0`, a session's requests), must be neither waited on
/// nor read: a review froze a session's server with a FIFO for `.git/index`, and had a
/// link to its stdin swallow its requests.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO, with or without a writer, and a link to one, are refused at once; a
    /// regular file behind a link is read.
    #[test]
    fn only_regular_files_are_opened_and_nothing_waits() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&fifo, &link).unwrap();
        for path in [&fifo, &link] {
            let e = open_regular(path).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidData, "{path:?}");
            assert!(read_at_most(path, 10).is_err(), "{path:?}");
        }
        // A pipe with a writer and data (chitti's own stdin, say) is not read either.
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&write_end, b"request").unwrap();
        let own = std::path::PathBuf::from(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&read_end)
        ));
        assert!(open_regular(&own).is_err());
        let mut left = [0u8; 16];
        assert_eq!(
            nix::unistd::read(&read_end, &mut left).unwrap(),
            7,
            "it was read"
        );
        let file = dir.path().join("file");
        std::fs::write(&file, "text").unwrap();
        let linked = dir.path().join("to-file");
        std::os::unix::fs::symlink(&file, &linked).unwrap();
        assert!(matches!(read_at_most(&linked, 10), Ok(Bounded::Whole(b)) if b == b"text"));
    }
}
