//! Policy → the list of Landlock rules (pure planning; `linux::landlock` applies them).
//!
//! Landlock is an allow-list whose grants are inherited by everything beneath a granted
//! directory, so "read everything except ~/.ssh" is built by granting the siblings of
//! every denied path along its ancestry, instead of an ancestor itself. Ancestors only get
//! directory listing. /dev is treated as an ancestor of everything in it, so that only
//! the listed harmless devices are granted, unless the command gets a /dev holding only
//! those (root's mount namespace, `linux::root_dirs`): that directory is granted whole.
//! With nothing left to go around, `/` is one rule. Writes are granted on the writable
//! roots.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::canonical::identity;
use crate::dir_entries::{for_each_entry, EntryKind};

/// The only device nodes granted: they reach nothing outside the process. Everything
/// else in /dev (raw disks, /dev/mem, /dev/port, other terminals) stays unreadable, like
/// bubblewrap's minimal /dev.
pub const SAFE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// List the directory (inherited beneath it: names, not contents).
    List,
    /// Read and execute everything beneath a directory.
    ReadTree,
    /// Read and execute one file.
    ReadFile,
    /// Read, write and ioctl one device.
    Device,
    /// Read, write and ioctl the devices beneath a directory (the minimal /dev), and list
    /// it; nothing can be made or removed in it.
    DeviceTree,
    /// Everything beneath a writable root.
    Write,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub path: PathBuf,
    pub grant: Grant,
}

pub struct Spec<'a> {
    /// Directories with full access.
    pub writable: &'a [PathBuf],
    /// Canonical paths that must stay unreadable.
    pub deny_read: &'a [PathBuf],
    /// Terminals handed to the command as stdio, which it may keep using.
    pub terminals: &'a [PathBuf],
    /// The directory mounted over /dev in the command's mount namespace, if any: it holds
    /// the harmless devices only.
    pub private_dev: Option<&'a Path>,
    /// Whether a directory on the way to a denied path has another name as well
    /// (`Policy::deny_read_by_inode`): entries are then compared by what they lead to.
    pub by_inode: bool,
}

/// Beyond this many directories listed (a mount table built to make the plan explode:
/// each listed directory compares its entries with all the others), entries that would
/// be listed too get no rule at all: less access, never more.
const MOST_LISTED: usize = 1024;

/// What Landlock checks when a denied path is opened, by device and inode: the path
/// itself, and every directory its name passes through up to `/` (a mount point is
/// checked as the root of what is mounted on it, as `stat` of its name sees it). A
/// grant on any of them, under whatever name, reaches the denied path.
struct OnTheWay {
    denied: Vec<(u64, u64)>,
    ancestors: Vec<(u64, u64)>,
}

impl OnTheWay {
    fn of(deny_read: &[PathBuf]) -> OnTheWay {
        let mut way = OnTheWay {
            denied: deny_read.iter().filter_map(|p| identity(p)).collect(),
            ancestors: Vec::new(),
        };
        let mut seen: Vec<&Path> = Vec::new();
        for dir in deny_read.iter().flat_map(|p| p.ancestors().skip(1)) {
            if !seen.contains(&dir) {
                seen.push(dir);
                way.ancestors.extend(identity(dir));
            }
        }
        way
    }
}

/// Plans the rules, listing only the ancestors of denied paths (a few directories). With
/// `by_inode`, an entry that is a denied path or a directory on the way to one under
/// another name is treated as such too: skipped, or listed and gone into.
pub fn plan(spec: &Spec) -> Vec<Rule> {
    let on_the_way =
        (spec.by_inode && !spec.deny_read.is_empty()).then(|| OnTheWay::of(spec.deny_read));
    let mut ancestors: Vec<PathBuf> = vec![PathBuf::from("/")];
    if spec.private_dev.is_none() {
        ancestors.push(PathBuf::from("/dev"));
    }
    for path in spec.deny_read {
        let mut cur = path.parent();
        while let Some(dir) = cur {
            if !ancestors.iter().any(|a| a == dir) {
                ancestors.push(dir.to_path_buf());
            }
            cur = dir.parent();
        }
    }
    let mut rules = Vec::new();
    let mut push = |path: PathBuf, grant| rules.push(Rule { path, grant });
    if ancestors.len() == 1 {
        // Nothing to go around.
        push(PathBuf::from("/"), Grant::ReadTree);
        ancestors.clear();
    }
    // Indexed: entries found (by inode) to be on the way are appended as they are met.
    let mut next = 0;
    while next < ancestors.len() {
        let dir = ancestors[next].clone();
        next += 1;
        push(dir.clone(), Grant::List);
        if dir == Path::new("/dev") {
            continue;
        }
        // The entries of `dir` that are planned on their own: hidden, or listed further.
        // Compared by name (a few per directory), not as paths: `Path` equality parses
        // components, which made up most of the planning time in /etc.
        let skipped: Vec<&OsStr> = ancestors
            .iter()
            .chain(spec.deny_read)
            .filter(|p| p.parent() == Some(dir.as_path()))
            .filter_map(|p| p.file_name())
            .collect();
        let mut found_on_the_way = Vec::new();
        let room = MOST_LISTED.saturating_sub(ancestors.len());
        for_each_entry(&dir, |name, kind| {
            if skipped.contains(&name) {
                return;
            }
            let grant = match kind {
                EntryKind::Dir => Grant::ReadTree,
                EntryKind::Other => Grant::ReadFile,
                // A symlink is followed when used and checked at its target; granting the
                // target here could re-open a denied path.
                EntryKind::Symlink => return,
            };
            let path = dir.join(name);
            if let Some(way) = &on_the_way {
                // Gone (or unreadable) since it was listed: no rule.
                let Some(id) = identity(&path) else {
                    return;
                };
                if way.denied.contains(&id) {
                    return;
                }
                if way.ancestors.contains(&id) {
                    if kind == EntryKind::Dir && found_on_the_way.len() < room {
                        found_on_the_way.push(path);
                    }
                    return;
                }
            }
            push(path, grant);
        });
        ancestors.append(&mut found_on_the_way);
    }
    match spec.private_dev {
        Some(dir) => push(dir.to_path_buf(), Grant::DeviceTree),
        None => {
            for dev in SAFE_DEVICES {
                if Path::new(dev).exists() {
                    push(PathBuf::from(dev), Grant::Device);
                }
            }
        }
    }
    for tty in spec.terminals {
        push(tty.clone(), Grant::Device);
    }
    for root in spec.writable {
        push(root.clone(), Grant::Write);
    }
    rules
}

pub fn describe(rules: &[Rule]) -> String {
    let mut out = String::new();
    for r in rules {
        let what = match r.grant {
            Grant::List => "list",
            Grant::ReadTree => "read+exec (tree)",
            Grant::ReadFile => "read+exec",
            Grant::Device => "read+write+ioctl (device)",
            Grant::DeviceTree => "read+write+ioctl (devices)",
            Grant::Write => "all access (tree)",
        };
        out.push_str(&format!("  {:<26} {}\n", what, r.path.display()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denied_paths_are_never_granted_and_their_siblings_are() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        for d in [".ssh", ".config/gh", ".config/other", "proj", "docs"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join(".netrc"), "x").unwrap();
        std::fs::write(home.join("notes"), "x").unwrap();
        std::os::unix::fs::symlink(home.join(".ssh"), home.join("link-to-ssh")).unwrap();
        let deny = vec![
            home.join(".ssh"),
            home.join(".config/gh"),
            home.join(".netrc"),
        ];
        let writable = vec![home.join("proj")];
        let rules = plan(&Spec {
            writable: &writable,
            deny_read: &deny,
            terminals: &[],
            private_dev: None,
            by_inode: false,
        });
        let granted = |p: &Path| {
            rules
                .iter()
                .filter(|r| r.grant != Grant::List)
                .any(|r| p.starts_with(&r.path))
        };
        for d in &deny {
            assert!(!granted(d), "{} is granted", d.display());
        }
        assert!(
            !granted(&home.join("link-to-ssh")),
            "symlinks are not granted"
        );
        assert!(granted(&home.join("docs/a")));
        assert!(granted(&home.join("notes")));
        assert!(granted(&home.join(".config/other/x")));
        assert!(rules.contains(&Rule {
            path: home.join("proj"),
            grant: Grant::Write
        }));
        // Only harmless devices are granted under /dev.
        for r in rules
            .iter()
            .filter(|r| r.path.starts_with("/dev") && r.grant != Grant::List)
        {
            assert!(
                SAFE_DEVICES.iter().any(|d| Path::new(d) == r.path),
                "{} granted",
                r.path.display()
            );
        }
        assert!(!granted(Path::new("/dev/mem")));
    }

    /// Where no directory has a second name, comparing by inode plans the same rules
    /// (the escape suite covers the trees where it does not: those need mounts).
    #[test]
    fn planning_by_inode_changes_nothing_without_second_names() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path().canonicalize().unwrap();
        for d in [".ssh", ".config/gh", ".config/other", "proj"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join(".netrc"), "x").unwrap();
        let deny = vec![
            home.join(".ssh"),
            home.join(".config/gh"),
            home.join(".netrc"),
        ];
        let writable = vec![home.join("proj")];
        let plan_with = |by_inode| {
            plan(&Spec {
                writable: &writable,
                deny_read: &deny,
                terminals: &[],
                private_dev: None,
                by_inode,
            })
        };
        assert_eq!(plan_with(true), plan_with(false));
    }

    /// With the minimal /dev and nothing to go around (root's calls), the plan is `/`
    /// whole, the devices' directory and the writable roots: nothing is listed.
    #[test]
    fn with_a_minimal_dev_and_nothing_hidden_root_is_granted_whole() {
        let writable = vec![PathBuf::from("/work/ws")];
        let terminals = vec![PathBuf::from("/dev/pts/3")];
        let rules = plan(&Spec {
            writable: &writable,
            deny_read: &[],
            terminals: &terminals,
            private_dev: Some(Path::new("/var/lib/chitti/dev")),
            by_inode: false,
        });
        let rule = |path: &str, grant| Rule {
            path: PathBuf::from(path),
            grant,
        };
        assert_eq!(
            rules,
            [
                rule("/", Grant::ReadTree),
                rule("/var/lib/chitti/dev", Grant::DeviceTree),
                rule("/dev/pts/3", Grant::Device),
                rule("/work/ws", Grant::Write),
            ]
        );
        // Without it, /dev is gone around: `/` is listed, never granted whole.
        let rules = plan(&Spec {
            writable: &writable,
            deny_read: &[],
            terminals: &terminals,
            private_dev: None,
            by_inode: false,
        });
        assert!(rules.contains(&rule("/", Grant::List)));
        assert!(!rules.contains(&rule("/", Grant::ReadTree)));
        assert!(!rules.iter().any(|r| r.grant == Grant::DeviceTree));
    }
}
