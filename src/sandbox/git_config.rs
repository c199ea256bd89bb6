//! Whether a git config file could make the host's git run a program.
//!
//! A nested repository's git directory inside a writable root is the sandbox's to write,
//! in this call or any earlier one, or in a call running beside it; the host's `git
//! status` walks into it. Its age says nothing, so its contents are judged: every setting
//! must be one known to run nothing. The list is of settings, not of dangers: one chitti
//! does not know (or text it cannot read as git does) counts as able to run a program.

/// Why `text` (a git config file) could make git run a program, or `None` when every
/// setting in it is known to run none. `own_work_tree` says whether a `core.worktree`
/// value leads back to the repository's own work tree (what git writes for a submodule).
pub fn runs_code(text: &[u8], own_work_tree: impl Fn(&str) -> bool) -> Option<String> {
    // Git reads names and values as C strings: a NUL would end one early (a subsection
    // `o.uploadpack\0` is `remote.o.uploadpack` to git).
    if text.contains(&0) {
        return Some("it holds a NUL byte".into());
    }
    let text = match std::str::from_utf8(text) {
        Ok(text) => text,
        Err(_) => return Some("it is not UTF-8 text".into()),
    };
    let mut section: Option<(String, Option<String>)> = None;
    let lines = match lines(text) {
        Ok(lines) => lines,
        Err(number) => return Some(format!("line {number} ends in a backslash")),
    };
    for (number, raw) in lines {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            match parse_header(header) {
                Some(parsed) => section = Some(parsed),
                None => {
                    return Some(format!(
                        "line {number} is not a section header chitti reads"
                    ))
                }
            }
            continue;
        }
        let Some((name, sub)) = &section else {
            return Some(format!("line {number} sets something outside any section"));
        };
        let Some((key, value)) = parse_setting(line) else {
            return Some(format!("line {number} is not a setting chitti reads"));
        };
        let readings: Vec<Option<&str>> = match &value {
            Some(value) => value.readings().map(Some).collect(),
            None => vec![None],
        };
        let passes = |value: Option<&str>| {
            harmless(name, sub.as_deref(), &key, value)
                || (name == "core"
                    && sub.is_none()
                    && key == "worktree"
                    && value.is_some_and(&own_work_tree))
        };
        if !readings.into_iter().all(passes) {
            let shown = match sub {
                Some(sub) => format!("{name}.{sub}.{key}"),
                None => format!("{name}.{key}"),
            };
            return Some(format!(
                "it sets {shown} (line {number}), which chitti does not know to run nothing"
            ));
        }
    }
    None
}

/// The value of `section.key` (no subsection; the last one set wins, as in git): `Some(None)`
/// when it is not set, `None` when the file cannot be read here.
pub fn value(text: &[u8], section: &str, key: &str) -> Option<Option<String>> {
    if text.contains(&0) {
        return None;
    }
    let text = std::str::from_utf8(text).ok()?;
    let mut current: Option<(String, Option<String>)> = None;
    let mut found = None;
    for (_, raw) in lines(text).ok()? {
        let line = raw.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            current = Some(parse_header(header)?);
            continue;
        }
        let (name, value) = parse_setting(line)?;
        if current
            .as_ref()
            .is_some_and(|(s, sub)| s == section && sub.is_none())
            && name == key
        {
            found = Some(match value {
                Some(value) => value.agreed()?,
                None => "true".into(),
            });
        }
    }
    Some(found)
}

/// The file's lines with their numbers; `Err` with the number of a line that ends in a
/// backslash. Git continues such a line onto the next inside a value but not inside a
/// comment, and no config git writes has one: refused rather than read one way or the
/// other.
fn lines(text: &str) -> Result<Vec<(usize, &str)>, usize> {
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.ends_with('\\') {
            return Err(index + 1);
        }
        out.push((index + 1, line));
    }
    Ok(out)
}

/// `[name]`, `[name "sub"]` or `[name.sub]`, from after the `[`: the lowercased name and
/// the subsection (case kept, as git compares it), with nothing but a comment after it.
fn parse_header(header: &str) -> Option<(String, Option<String>)> {
    let close = header.find(']')?;
    let (inside, rest) = (&header[..close], header[close + 1..].trim_start());
    if !(rest.is_empty() || rest.starts_with('#') || rest.starts_with(';')) {
        return None;
    }
    let name_chars = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    };
    match inside.find(|c: char| c.is_ascii_whitespace()) {
        None => {
            if !name_chars(inside) {
                return None;
            }
            let lower = inside.to_ascii_lowercase();
            Some(match lower.split_once('.') {
                Some((name, sub)) => (name.to_string(), Some(sub.to_string())),
                None => (lower, None),
            })
        }
        Some(space) => {
            let name = &inside[..space];
            let quoted = inside[space..].trim_start().strip_prefix('"')?;
            let quoted = quoted.strip_suffix('"')?;
            if !name_chars(name) || name.contains('.') {
                return None;
            }
            let mut sub = String::new();
            let mut chars = quoted.chars();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => sub.push(chars.next()?),
                    '"' => return None,
                    c => sub.push(c),
                }
            }
            Some((name.to_ascii_lowercase(), Some(sub)))
        }
    }
}

/// `key`, `key = value`: the lowercased key and the value as git reads it (quotes and
/// escapes undone, a comment after it dropped); `None` for a key alone (boolean true).
/// Blanks between words outside quotes are read two ways (see [`Value`]).
fn parse_setting(line: &str) -> Option<(String, Option<Value>)> {
    let end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(line.len());
    let key = &line[..end];
    if !key.starts_with(|c: char| c.is_ascii_alphabetic()) {
        return None;
    }
    // Git skips only ASCII blanks (its own `isspace`), never other whitespace.
    let blank = |c: char| matches!(c, ' ' | '\t' | '\r');
    let rest = line[end..].trim_start_matches(blank);
    if rest.is_empty() || rest.starts_with('#') || rest.starts_with(';') {
        return Some((key.to_ascii_lowercase(), None));
    }
    let raw = rest.strip_prefix('=')?;
    // As git's `parse_value`: blanks outside quotes are dropped at the ends; inside quotes
    // everything is kept.
    let mut value = Value::default();
    let (mut quoted, mut between, mut chars) = (false, String::new(), raw.chars());
    while let Some(c) = chars.next() {
        if !quoted && blank(c) {
            if !value.squashed.is_empty() {
                between.push(c);
            }
            continue;
        }
        if !quoted && matches!(c, '#' | ';') {
            break;
        }
        if !between.is_empty() {
            value.squashed.push(' ');
            value.verbatim.push_str(&between);
            between.clear();
        }
        let c = match c {
            '\\' => match chars.next()? {
                'n' => '\n',
                't' => '\t',
                'b' => '\u{8}',
                c @ ('"' | '\\') => c,
                _ => return None,
            },
            '"' => {
                quoted = !quoted;
                continue;
            }
            c => c,
        };
        value.squashed.push(c);
        value.verbatim.push(c);
    }
    if quoted {
        return None;
    }
    Some((key.to_ascii_lowercase(), Some(value)))
}

/// A setting's value as versions of git read it: blanks between words outside quotes
/// become one space each in older ones and stay as they are in newer ones (2.47 here).
/// A value is judged as both.
#[derive(Debug, Default, PartialEq, Eq)]
struct Value {
    squashed: String,
    verbatim: String,
}

impl Value {
    /// Both readings, the same where they agree.
    fn readings(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.squashed.as_str())
            .chain((self.verbatim != self.squashed).then_some(self.verbatim.as_str()))
    }

    /// The value where every version of git reads it the same.
    fn agreed(self) -> Option<String> {
        (self.squashed == self.verbatim).then_some(self.squashed)
    }
}

/// Whether git reads `value` as a boolean (a key alone is true).
fn boolean(value: Option<&str>) -> bool {
    value.is_none_or(|v| {
        matches!(
            v.to_ascii_lowercase().as_str(),
            "" | "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0"
        )
    })
}

/// The settings known to run nothing, by section (lowercase) and whether it has a
/// subsection. Settings that name a program, a hook directory, a file to include or a
/// work tree elsewhere are not here.
fn harmless(section: &str, sub: Option<&str>, key: &str, value: Option<&str>) -> bool {
    let known = |keys: &[&str]| keys.contains(&key);
    match (section, sub) {
        ("core", None) => {
            known(&[
                "repositoryformatversion",
                "filemode",
                "bare",
                "logallrefupdates",
                "ignorecase",
                "precomposeunicode",
                "symlinks",
                "autocrlf",
                "eol",
                "safecrlf",
                "quotepath",
                "sparsecheckout",
                "sparsecheckoutcone",
                "untrackedcache",
                "splitindex",
                "commitgraph",
                "multipackindex",
                "compression",
                "loosecompression",
                "bigfilethreshold",
                "abbrev",
                "checkstat",
                "trustctime",
                "preloadindex",
                "protecthfs",
                "protectntfs",
                "warnambiguousrefs",
                "fsync",
                "fsyncmethod",
            ]) || (key == "fsmonitor" && boolean(value))
        }
        ("remote", Some(_)) => known(&[
            "url",
            "pushurl",
            "fetch",
            "push",
            "tagopt",
            "prune",
            "prunetags",
            "mirror",
            "promisor",
            "partialclonefilter",
            "skipdefaultupdate",
            "skipfetchall",
        ]),
        ("branch", Some(_)) => known(&["remote", "merge", "rebase", "pushremote", "description"]),
        ("submodule", Some(_)) => {
            known(&[
                "url",
                "active",
                "branch",
                "fetchrecursesubmodules",
                "ignore",
                "shallow",
            ]) || (key == "update" && value.is_some_and(|v| !v.trim_start().starts_with('!')))
        }
        ("user", None) => known(&["name", "email"]),
        ("init", None) => known(&["defaultbranch"]),
        ("pull", None) => known(&["rebase", "ff"]),
        ("push", None) => known(&["default", "autosetupremote", "followtags"]),
        ("fetch", None) => known(&[
            "prune",
            "prunetags",
            "recursesubmodules",
            "writecommitgraph",
        ]),
        ("gc", None) => known(&[
            "auto",
            "autopacklimit",
            "autodetach",
            "pruneexpire",
            "reflogexpire",
            "reflogexpireunreachable",
            "worktreepruneexpire",
        ]),
        ("extensions", None) => known(&[
            "objectformat",
            "worktreeconfig",
            "partialclone",
            "preciousobjects",
            "refstorage",
        ]),
        ("index", None) => known(&["version", "threads"]),
        ("pack", None) => known(&["compression", "threads", "windowmemory", "packsizelimit"]),
        ("status", None) | ("log", None) => !matches!(key, "external"),
        ("color", _) => true,
        ("lfs", None) => known(&[
            "repositoryformatversion",
            "url",
            "fetchinclude",
            "fetchexclude",
        ]),
        // What `git lfs install --local` writes, and nothing else.
        ("filter", Some("lfs")) => match key {
            "clean" => value == Some("git-lfs clean -- %f"),
            "smudge" => value == Some("git-lfs smudge -- %f"),
            "process" => value == Some("git-lfs filter-process"),
            "required" => boolean(value),
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_git_init_and_clone_write_runs_nothing() {
        let config = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\
                      \tbare = false\n\tlogallrefupdates = true\n\
                      [remote \"origin\"]\n\turl = https://example.com/x.git\n\
                      \tfetch = +refs/heads/*:refs/remotes/origin/*\n\
                      [branch \"main\"]\n\tremote = origin\n\tmerge = refs/heads/main\n\
                      [filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n\
                      \tsmudge = git-lfs smudge -- %f\n\tprocess = git-lfs filter-process\n\
                      \trequired = true\n# a comment\n; another\n\
                      [core]\n\tfsmonitor = true\n";
        assert_eq!(runs_code(config.as_bytes(), |_| false), None);
    }

    #[test]
    fn settings_that_run_programs_are_found_however_spelled() {
        for config in [
            "[core]\n\tfsmonitor = touch /tmp/x\n",
            "[CORE]\n\tFsMonitor = \"./evil\"\n",
            "[core]\n\thooksPath = .husky\n",
            "[core] sshCommand = evil\n",
            "[core]\n\tfsmon\\\nitor = evil\n",
            "[core]\n# harmless \\\n\tfsmonitor = evil\n",
            "[core]\n\tfsmonitor = \"yes \"\n",
            "[core]\n\tfsmonitor = \" \"\n",
            "[core]\n\tfsmonitor = true\u{3000}\n",
            "[core]\n\tfsmonitor = \u{3000}true\n",
            "[core]\n\tbare = true ; x \\\n\tfsmonitor = evil\n",
            "[core]\n\tworktree = /elsewhere\n",
            "[include]\n\tpath = ../../evil.cfg\n",
            "[includeIf \"gitdir:/\"]\n\tpath = x\n",
            "[filter \"lfs\"]\n\tclean = evil %f\n",
            "[filter \"x\"]\n\tclean = cat\n",
            "[diff \"x\"]\n\ttextconv = evil\n",
            "[submodule \"a\"]\n\tupdate = !evil\n",
            "[alias]\n\tst = !evil\n",
            "[credential]\n\thelper = evil\n",
            "[remote \"o\"]\n\tuploadpack = evil\n",
            "fsmonitor = evil\n",
            "[core\n",
            "[core]\n\tfsmonitor = \"unterminated\n",
            "[core]\n\t=x\n",
        ] {
            assert!(
                runs_code(config.as_bytes(), |_| false).is_some(),
                "{config:?}"
            );
        }
        assert!(runs_code(b"[core]\n\tbare = \xff\n", |_| false).is_some());
        // Git reads up to a NUL: this subsection is `o.uploadpack` to it.
        let nul = b"[remote \"o.uploadpack\0\"]\n\turl = evil\n";
        assert!(runs_code(nul, |_| false).is_some());
        assert_eq!(
            value(
                b"[extensions]\n\tobjectformat = sha1\0\n",
                "extensions",
                "objectformat"
            ),
            None
        );
    }

    /// Newer versions of git keep the blanks between a value's words as they are, older
    /// ones make each run one space: a value is judged as both.
    #[test]
    fn a_value_is_judged_as_every_version_of_git_reads_it() {
        for config in [
            "[filter \"lfs\"]\n\tclean = git-lfs\tclean -- %f\n",
            "[filter \"lfs\"]\n\tclean = git-lfs  clean -- %f\n",
            "[filter \"lfs\"]\n\tclean = git-lfs\rclean -- %f\n",
        ] {
            assert!(
                runs_code(config.as_bytes(), |_| false).is_some(),
                "{config:?}"
            );
        }
        let spaced = b"[user]\n\tname = A  B\n[filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n";
        assert_eq!(runs_code(spaced, |_| false), None);
        let worktree = b"[core]\n\tworktree = ../a\t b\n";
        assert!(runs_code(worktree, |v| v == "../a b").is_some());
        assert_eq!(
            runs_code(worktree, |v| v == "../a b" || v == "../a\t b"),
            None
        );
        assert_eq!(
            value(b"[core]\n\tworktree = a  b\n", "core", "worktree"),
            None
        );
        assert_eq!(
            value(b"[core]\n\tworktree = \"a  b\"\n", "core", "worktree"),
            Some(Some("a  b".into()))
        );
    }

    /// A submodule's `core.worktree` passes only where it leads back to its own work tree.
    #[test]
    fn a_work_tree_elsewhere_runs_code_and_the_own_one_does_not() {
        let config = b"[core]\n\tworktree = ../../../sub\n";
        assert_eq!(runs_code(config, |v| v == "../../../sub"), None);
        assert!(runs_code(config, |_| false).is_some());
    }

    #[test]
    fn values_are_read_as_git_reads_them() {
        let value = |s: &str| {
            Some(Value {
                squashed: s.into(),
                verbatim: s.into(),
            })
        };
        assert_eq!(
            parse_setting("url = \"a;b\" ; comment"),
            Some(("url".into(), value("a;b")))
        );
        assert_eq!(
            parse_setting("update = \\!x"),
            None,
            "an escape git does not know"
        );
        assert_eq!(parse_setting("bare"), Some(("bare".into(), None)));
        assert_eq!(
            parse_header("remote \"o\\\"x\"]"),
            Some(("remote".into(), Some("o\"x".into())))
        );
        assert_eq!(lines("a\r\nb"), Ok(vec![(1, "a"), (2, "b")]));
        assert_eq!(lines("a\n# x \\\nb"), Err(2));
    }
}
