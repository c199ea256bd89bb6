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
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    Ok(if bytes.len() as u64 > limit {
        bytes.truncate(limit as usize);
        Bounded::Start(bytes)
    } else {
        Bounded::Whole(bytes)
    })
}
