//! `chitti sandbox exec` end to end: the real binary, on both Linux backends.
//!
//! Every test body is a function of the backend name; `on_both_backends!` turns each into
//! `<name>::bwrap` and `<name>::landlock`. Tests judge by what is observable outside the
//! sandbox (host files, host sockets, host processes, what reached chitti's output), not
//! by the sandboxed command's exit status. Negative tests also leave a file that proves the
//! command really ran, so that a sandbox that fails to start cannot pass them.
#![cfg(target_os = "linux")]

mod common;

use std::io::ErrorKind;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

/// One module per test body, holding a `bwrap` and a `landlock` test. (`macro_rules!`
/// cannot paste `<name>_bwrap` together without an extra crate; `<name>::bwrap` is the
/// same thing, and `cargo test ::landlock` still selects one backend.)
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn bwrap() {
                super::$name("bwrap")
            }
            #[test]
            fn landlock() {
                super::$name("landlock")
            }
        }
    )*};
}

on_both_backends!(
    // 1. writes
    workspace_write_appears_on_host,
    write_outside_workspace_does_not_appear,
    symlink_in_workspace_does_not_lead_out,
    dotdot_does_not_escape,
    tmpdir_is_writable_and_discarded,
    tmpdir_is_private_to_the_user,
    // 2. git
    git_add_and_commit_work,
    git_hooks_and_config_stay_unchanged,
    git_dir_rename_attack_is_undone,
    git_commondir_redirect_does_not_reach_host_git,
    git_commondir_planted_by_a_background_writer_is_undone,
    git_embedded_repo_config_does_not_run_on_host_status,
    git_embedded_repo_hidden_by_split_index_or_nesting_does_not_run_on_host_status,
    git_gitlink_symlink_does_not_make_chitti_touch_outside_repos,
    git_protection_survives_sigkill_of_chitti,
    // 3. credentials and devices
    credentials_are_unreadable,
    root_only_system_secrets_are_unreadable,
    credentials_cannot_be_linked_or_copied_into_workspace,
    raw_devices_are_unreadable,
    proc_kcore_is_unreadable,
    // 4. network
    tcp_to_host_is_blocked_by_default,
    tcp_to_host_works_with_network_on,
    host_unix_socket_is_unreachable,
    host_abstract_socket_is_unreachable,
    host_unix_datagram_sockets_are_unreachable,
    socketpair_works,
    // 5. environment
    environment_secrets_are_filtered,
    secrets_not_readable_through_proc_environ,
    // 6. capabilities
    capabilities_are_dropped,
    // 7. lifetime
    daemonized_process_dies_with_the_command,
    mount_namespace_goes_away_after_the_call,
    timeout_kills_the_whole_tree,
    sigkill_of_chitti_kills_the_sandbox,
    sigterm_early_in_a_call_is_143_and_cancelled,
    tmpdir_is_discarded_after_sigkill_of_chitti,
    // 8. exit codes
    exit_code_is_propagated,
    signal_death_is_128_plus_signal,
    missing_command_is_127,
    missing_command_in_a_kept_repository_is_127_and_changes_nothing,
    missing_interpreter_is_127,
    command_writing_like_bwrap_keeps_its_exit_code,
    non_executable_is_126,
    script_without_interpreter_line_runs_with_sh,
    missing_workspace_is_125,
    root_workspace_is_125,
    workspace_in_a_credential_location_is_125,
    unknown_profile_is_125,
    malformed_profile_is_125,
    unknown_profile_key_is_125,
    no_command_is_125,
    bad_flag_is_125,
    // 9. --json
    json_reports_every_field,
    sigterm_to_chitti_is_143_and_cancelled,
    other_catchable_fatal_signals_stop_the_call_in_order,
    two_pending_stop_signals_stop_the_call_in_order,
    json_keeps_head_and_tail_of_large_output,
    json_keeps_unicode,
    // 10-12. other processes and the terminal
    host_process_cannot_be_signalled,
    tiocsti_cannot_inject_terminal_input,
    ptrace_cannot_attach_to_host_process,
    // 13. read-only profile
    read_only_profile_keeps_workspace_unwritable,
);

const SECOND: Duration = Duration::from_secs(1);

/// Fails unless the sandboxed command left `ws/<name>` behind (proof that it ran).
fn assert_ran(fx: &Fixture, name: &str, ran: &Ran) {
    assert!(
        fx.ws(name).exists(),
        "the sandboxed command did not run to its end (no {name} in the workspace):\n{ran}"
    );
}

/// Shell code that waits (at most 30 s) for the test to create `release` in the workspace.
const WAIT_FOR_RELEASE: &str =
    "i=0; while [ ! -e release ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done";

/// Starts `argv` in the sandbox, waits for it to create `ready` in the workspace, calls
/// `look` while it still runs, then creates `release` and waits for chitti to finish.
fn while_running<T>(fx: &Fixture, backend: &str, argv: &[&str], look: impl FnOnce() -> T) -> T {
    let mut chitti = fx
        .chitti(backend)
        .command(argv)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chitti");
    let ready = wait_until(30 * SECOND, || fx.ws("ready").exists());
    let seen = ready.then(look);
    write(&fx.ws("release"), "");
    let _ = chitti.wait();
    seen.expect("the sandboxed command never created `ready`")
}

// ---------------------------------------------------------------------------------------
// 1. Writes

fn workspace_write_appears_on_host(backend: &str) {
    let fx = Fixture::new();
    let mark = marker("ws-write");
    let ran = fx
        .chitti(backend)
        .sh(&format!("mkdir -p sub && echo {mark} > sub/new.txt"));
    assert_eq!(
        std::fs::read_to_string(fx.ws("sub/new.txt"))
            .ok()
            .as_deref(),
        Some(format!("{mark}\n").as_str()),
        "a file written in the workspace must appear on the host:\n{ran}"
    );
}

fn write_outside_workspace_does_not_appear(backend: &str) {
    let fx = Fixture::new();
    let name = marker("outside");
    // All writable on the host by whoever runs the test; none in the sandbox.
    let mut targets = vec![
        fx.outside.join(&name),
        fx.home.join(&name),
        fx.root.join(&name),
        Path::new("/tmp").join(&name),
    ];
    if Path::new("/var/tmp").is_dir() {
        targets.push(Path::new("/var/tmp").join(&name));
    }
    let candidates: Vec<PathBuf> = targets
        .iter()
        .flat_map(|t| [t.clone(), PathBuf::from(format!("{}.d", t.display()))])
        .collect();
    let mut script = String::new();
    for t in &targets {
        script += &format!("echo x > '{}'; mkdir '{}.d'; ", t.display(), t.display());
    }
    script += "touch ran";
    let ran = fx.chitti(backend).sh(&script);
    let leaked: Vec<&PathBuf> = candidates.iter().filter(|p| p.exists()).collect();
    for p in &leaked {
        let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
    }
    assert_ran(&fx, "ran", &ran);
    assert!(
        leaked.is_empty(),
        "writes escaped the workspace: {leaked:?}\n{ran}"
    );
}

fn symlink_in_workspace_does_not_lead_out(backend: &str) {
    let fx = Fixture::new();
    let existing = fx.outside.join("existing.txt");
    write(&existing, "original\n");
    // Links planted on the host before the call, and one made inside the sandbox.
    std::os::unix::fs::symlink(&fx.outside, fx.ws("dir-link")).unwrap();
    std::os::unix::fs::symlink(fx.outside.join("created.txt"), fx.ws("dangling-link")).unwrap();
    std::os::unix::fs::symlink(&existing, fx.ws("existing-link")).unwrap();
    let ran = fx.chitti(backend).sh("echo x > dir-link/via-dir; \
         mkdir dir-link/new-dir; \
         echo x > dangling-link; \
         echo x >> existing-link; \
         echo x > existing-link; \
         ln -s ../../outside/relative.txt rel-link; echo x > rel-link; \
         echo x > mine; mv mine dir-link/moved; \
         touch ran");
    assert_ran(&fx, "ran", &ran);
    let mut names: Vec<String> = std::fs::read_dir(&fx.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["existing.txt"], "files appeared outside:\n{ran}");
    assert_eq!(
        read(&existing),
        "original\n",
        "a host file was changed through a link"
    );
}

fn dotdot_does_not_escape(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).sh("mkdir -p sub; \
         echo x > ../escaped-1; \
         echo x > ../../outside/escaped-2; \
         (cd .. && echo x > escaped-3); \
         echo x > \"$PWD/../escaped-4\"; \
         echo x > sub/../../escaped-5; \
         echo x > sub/../../proj/../escaped-6; \
         echo x > sub/../inside-ok");
    assert_ran(&fx, "inside-ok", &ran);
    let escaped: Vec<_> = [
        fx.home.join("escaped-1"),
        fx.outside.join("escaped-2"),
        fx.home.join("escaped-3"),
        fx.home.join("escaped-4"),
        fx.home.join("escaped-5"),
        fx.home.join("escaped-6"),
    ]
    .into_iter()
    .filter(|p| p.exists())
    .collect();
    assert!(
        escaped.is_empty(),
        "`..` escaped the workspace: {escaped:?}\n{ran}"
    );
}

fn tmpdir_is_writable_and_discarded(backend: &str) {
    let fx = Fixture::new();
    let name = marker("tmpfile");
    let ran = fx.chitti(backend).sh(&format!(
        "echo {name} > \"$TMPDIR/{name}\" && cp \"$TMPDIR/{name}\" copied; \
         mkdir \"$TMPDIR/locked\" && touch \"$TMPDIR/locked/f\" && chmod 500 \"$TMPDIR/locked\"; \
         printf %s \"$TMPDIR\" > tmpdir-path"
    ));
    assert_eq!(
        std::fs::read_to_string(fx.ws("copied")).ok(),
        Some(format!("{name}\n")),
        "TMPDIR must be writable inside the sandbox:\n{ran}"
    );
    let tmpdir = read(&fx.ws("tmpdir-path"));
    assert!(
        !tmpdir.is_empty(),
        "TMPDIR is not set in the sandbox:\n{ran}"
    );
    let on_host = Path::new(&tmpdir).join(&name);
    let left = on_host.exists();
    let _ = std::fs::remove_file(&on_host);
    assert!(
        !left,
        "{} is still on the host after the call",
        on_host.display()
    );
    // A directory the command made unwritable must not keep its TMPDIR alive (bwrap's
    // TMPDIR is /tmp on a private tmpfs: the host's /tmp is another directory).
    let locked = Path::new(&tmpdir).join("locked");
    let left = locked.exists();
    if left {
        let _ = std::fs::remove_dir_all(Path::new(&tmpdir).join("locked"));
    }
    assert!(
        !left,
        "{} is still on the host after the call",
        locked.display()
    );
    // Removed, or (a slot of the landlock backend's pool) emptied for the next call.
    if tmpdir != "/tmp" {
        let left: Vec<_> = std::fs::read_dir(&tmpdir)
            .map(|entries| entries.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "the private TMPDIR {tmpdir} still holds {left:?} after the call"
        );
    }
}

/// Other users of the machine must not see what the command keeps in its TMPDIR.
fn tmpdir_is_private_to_the_user(backend: &str) {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    let name = marker("tmpfile");
    let script = format!(
        "echo {name} > \"$TMPDIR/{name}\"; printf %s \"$TMPDIR\" > tmpdir-path; \
         touch ready; {WAIT_FOR_RELEASE}"
    );
    // The TMPDIR's own mode, while the file exists: a directory closed to group and
    // others makes everything in it unreachable for them, whatever the files' modes.
    let exposed = while_running(&fx, backend, &["sh", "-c", &script], || {
        let tmpdir = PathBuf::from(read(&fx.ws("tmpdir-path")));
        let file = tmpdir.join(&name);
        if !file.exists() {
            return Vec::new(); // not on the host's filesystem at all (a private mount)
        }
        [tmpdir]
            .into_iter()
            .map(|p| {
                (
                    std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
                    p,
                )
            })
            .filter(|(mode, _)| mode & 0o077 != 0)
            .collect::<Vec<_>>()
    });
    assert!(
        exposed.is_empty(),
        "the sandbox's TMPDIR is open to other users on the host: {:?}",
        exposed
            .iter()
            .map(|(mode, p)| format!("{} is mode {mode:o}", p.display()))
            .collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------
// 2. git

fn git_add_and_commit_work(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo("initial");
    let mark = marker("commit");
    let ran = fx.chitti(backend).sh(&format!(
        "echo {mark} > a.txt && git add a.txt && {SANDBOX_GIT} commit -q -m '{mark}'"
    ));
    let log = fx.git(&["log", "--format=%s"]);
    assert!(
        log.lines().next() == Some(mark.as_str()),
        "the sandboxed commit is not in the host's git log:\n{log}\n{ran}"
    );
    assert_eq!(fx.git(&["show", "HEAD:a.txt"]), format!("{mark}\n"));
    assert!(log.contains("initial"));
}

/// The hook that a tampered repository would run on the host, and the file it creates.
fn evil_hook(fx: &Fixture) -> (String, PathBuf) {
    let witness = fx.root.join("EVIL-CODE-RAN");
    (
        format!("#!/bin/sh\ntouch '{}'\n", witness.display()),
        witness,
    )
}

/// Runs `git status` and a commit on the host, as the user would after the call.
fn host_uses_repo(fx: &Fixture) {
    let _ = host_git(&fx.ws, &fx.home, &["status"]);
    let _ = host_git(
        &fx.ws,
        &fx.home,
        &["commit", "-q", "--allow-empty", "-m", "host"],
    );
}

fn git_hooks_and_config_stay_unchanged(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo("initial");
    let config_before = read(&fx.ws(".git/config"));
    let (hook, witness) = evil_hook(&fx);
    write(&fx.ws("hook.sh"), &hook);
    let ran = fx.chitti(backend).sh(&format!(
        "cp hook.sh .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
         cp hook.sh .git/hooks/post-checkout; \
         printf '[core]\\n\\tfsmonitor = \"touch {w}\"\\n\\thooksPath = /nonexistent\\n' >> .git/config; \
         touch ran",
        w = witness.display()
    ));
    assert_ran(&fx, "ran", &ran);
    assert_eq!(read(&fx.ws(".git/config")), config_before, "{ran}");
    assert!(!fx.ws(".git/hooks/pre-commit").exists(), "{ran}");
    assert!(!fx.ws(".git/hooks/post-checkout").exists(), "{ran}");
    host_uses_repo(&fx);
    assert!(
        !witness.exists(),
        "host git ran code planted by the sandbox:\n{ran}"
    );
}

fn git_dir_rename_attack_is_undone(backend: &str) {
    let fx = Fixture::new();
    let mark = marker("original-git");
    fx.init_repo(&mark);
    let ran = fx.chitti(backend).sh(
        "mv .git .git2; mkdir -p .git/hooks; echo evil > .git/hooks/pre-commit; \
         chmod +x .git/hooks/pre-commit; touch ran",
    );
    assert_ran(&fx, "ran", &ran);
    assert!(
        fx.git(&["log", "--format=%s"]).contains(&mark),
        "the original .git is gone:\n{ran}"
    );
    assert!(
        !fx.ws(".git/hooks/pre-commit").exists(),
        "an evil hook is in place:\n{ran}"
    );
    assert!(
        !fx.ws(".git2").exists(),
        "the original .git was left renamed:\n{ran}"
    );
}

/// A `commondir` file makes git take config and hooks from another directory, which the
/// sandbox can build anywhere in the workspace.
fn git_commondir_redirect_does_not_reach_host_git(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo("initial");
    let (hook, witness) = evil_hook(&fx);
    write(&fx.ws("hook.sh"), &hook);
    let ran = fx.chitti(backend).sh(&format!(
        "mkdir -p evil/hooks && cp -r .git/objects .git/refs evil/ && \
         cp hook.sh evil/hooks/pre-commit && chmod +x evil/hooks/pre-commit && \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = \"touch {w}; false\"\\n' > evil/config; \
         echo ../evil > .git/commondir; touch ran",
        w = witness.display()
    ));
    assert_ran(&fx, "ran", &ran);
    let common = fx.git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]);
    host_uses_repo(&fx);
    assert!(
        !witness.exists(),
        "host git ran a hook/fsmonitor planted through .git/commondir (git-common-dir is now \
         {}):\n{ran}",
        common.trim()
    );
    assert_eq!(Path::new(common.trim()), fx.ws(".git"), "{ran}");
}

/// The command leaves a background process behind, with its stdio closed (so chitti's
/// wait for the output does not wait for it), planting `.git/commondir` over and over. The
/// repair must come after that process is dead, or a plant made just after it survives the
/// call: on bwrap, bwrap exits before the init of its PID namespace has killed the rest.
/// A race, so tried 40 times; before the fix, 2 in 40 calls left the file behind.
fn git_commondir_planted_by_a_background_writer_is_undone(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo("initial");
    let commondir = fx.ws(".git/commondir");
    for attempt in 0..40 {
        let _ = std::fs::remove_file(fx.ws("ran"));
        let ran = fx.chitti(backend).sh("(exec </dev/null >/dev/null 2>&1; \
              while :; do printf '../evil\\n' > .git/commondir; done) & \
             sleep 0.01; touch ran");
        assert_ran(&fx, "ran", &ran);
        assert!(
            !commondir.exists(),
            "attempt {attempt}: .git/commondir, planted by a process the command left \
             running, survived the call:\n{ran}"
        );
    }
}

/// A repository nested in the workspace and staged as a gitlink: the host's `git status`
/// runs `git status` inside it, with its config (core.fsmonitor).
fn git_embedded_repo_config_does_not_run_on_host_status(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo("initial");
    let witness = fx.root.join("EVIL-CODE-RAN");
    let ran = fx.chitti(backend).sh(&format!(
        "mkdir sub && cd sub && git init -q && {SANDBOX_GIT} commit -q --allow-empty -m s && \
         git config core.fsmonitor 'touch {w}; false' && cd .. && git add sub 2>/dev/null; \
         touch ran",
        w = witness.display()
    ));
    assert_ran(&fx, "ran", &ran);
    let _ = host_git(&fx.ws, &fx.home, &["status"]);
    assert!(
        !witness.exists(),
        "the host's `git status` ran a core.fsmonitor that the sandbox wrote into a nested \
         repository:\n{ran}"
    );
}

/// The same, with the gitlink hidden from a plain reading of the index: kept in a split
/// index's shared part, behind a `.git` symlink, and one repository further down.
fn git_embedded_repo_hidden_by_split_index_or_nesting_does_not_run_on_host_status(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo("initial");
    let witness = fx.root.join("EVIL-CODE-RAN");
    let evil = format!(
        "git config core.fsmonitor 'touch {}; false'",
        witness.display()
    );
    let ran = fx.chitti(backend).sh(&format!(
        "git init -q --separate-git-dir=\"$PWD/.hidden\" a && rm a/.git && ln -s ../.hidden a/.git \
         && (cd a && {SANDBOX_GIT} commit -q --allow-empty -m a && {evil}) \
         && git init -q b && git init -q b/inner \
         && (cd b/inner && {SANDBOX_GIT} commit -q --allow-empty -m i && {evil}) \
         && (cd b && git add inner && {SANDBOX_GIT} commit -q -m b) \
         && git add a b 2>/dev/null && git update-index --split-index && touch ran"
    ));
    assert_ran(&fx, "ran", &ran);
    let _ = host_git(&fx.ws, &fx.home, &["status"]);
    let _ = host_git(&fx.ws.join("b"), &fx.home, &["status"]);
    assert!(
        !witness.exists(),
        "the host's `git status` ran a core.fsmonitor the sandbox wrote into a nested \
         repository hidden by a split index, a .git symlink or a second level:\n{ran}"
    );
}

/// chitti's after-call check runs outside the sandbox: a gitlink that is a symlink to a
/// repository outside the workspace must not make chitti move that repository's files.
fn git_gitlink_symlink_does_not_make_chitti_touch_outside_repos(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo("initial");
    let victim = fx.root.join("victim");
    std::fs::create_dir(&victim).unwrap();
    host_git(&victim, &fx.home, &["init", "-q"]);
    let before = names_under(&victim.join(".git"));
    let ran = fx.chitti(backend).sh(&format!(
        "ln -s {v} lnk && git update-index --add --cacheinfo \
         160000,0123456789012345678901234567890123456789,lnk && touch ran",
        v = victim.display()
    ));
    assert_ran(&fx, "ran", &ran);
    assert_eq!(
        names_under(&victim.join(".git")),
        before,
        "chitti changed a repository outside the workspace:\n{ran}"
    );
}

/// Every path beneath `dir`, sorted.
fn names_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                todo.push(entry.path());
            }
            out.push(entry.path());
        }
    }
    out.sort();
    out
}

/// The protection must hold even when chitti gets no chance to clean up.
fn git_protection_survives_sigkill_of_chitti(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo("initial");
    let config_before = read(&fx.ws(".git/config"));
    let (hook, witness) = evil_hook(&fx);
    write(&fx.ws("hook.sh"), &hook);
    sigkill_chitti_during(
        &fx,
        backend,
        &format!(
            "cp hook.sh .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
             printf '[core]\\n\\tfsmonitor = \"touch {w}\"\\n' >> .git/config",
            w = witness.display()
        ),
    );
    let mut left = Vec::new();
    if fx.ws(".git/hooks/pre-commit").exists() {
        left.push("the pre-commit hook written in the sandbox is still there");
    }
    if read(&fx.ws(".git/config")) != config_before {
        left.push(".git/config is still modified");
    }
    host_uses_repo(&fx);
    if witness.exists() {
        left.push("the host's git ran the planted code");
    }
    assert!(left.is_empty(), "after SIGKILL of chitti: {left:?}");
}

// ---------------------------------------------------------------------------------------
// 3. Credentials and devices

/// A decoy HOME full of credentials, each holding a unique marker.
struct DecoyHome {
    fx: Fixture,
    /// (path, marker) of every credential file.
    secrets: Vec<(PathBuf, String)>,
    notes: PathBuf,
    notes_marker: String,
}

impl DecoyHome {
    fn new() -> DecoyHome {
        let fx = Fixture::new();
        let mut secrets = Vec::new();
        for rel in [
            ".ssh/id_rsa",
            ".aws/credentials",
            ".netrc",
            ".config/gh/hosts.yml",
            ".cargo/credentials.toml",
            ".config/chitti/config.toml",
        ] {
            let path = fx.home.join(rel);
            let mark = marker("secret");
            write(&path, &format!("{mark}\n"));
            secrets.push((path, mark));
        }
        let notes = fx.home.join("notes.txt");
        let notes_marker = marker("notes");
        write(&notes, &format!("{notes_marker}\n"));
        DecoyHome {
            fx,
            secrets,
            notes,
            notes_marker,
        }
    }

    fn leaked_in(&self, text: &str) -> Vec<String> {
        self.secrets
            .iter()
            .filter(|(_, m)| text.contains(m.as_str()))
            .map(|(p, _)| p.display().to_string())
            .collect()
    }
}

fn credentials_are_unreadable(backend: &str) {
    let d = DecoyHome::new();
    let mut script = String::new();
    for (path, _) in &d.secrets {
        script += &format!("cat '{}'; ", path.display());
    }
    script += &format!("cat '{}'; grep -r . \"$HOME\"; ", d.notes.display());
    // A symlink planted in the workspace must not help either.
    std::os::unix::fs::symlink(&d.secrets[0].0, d.fx.ws("key-link")).unwrap();
    script += "cat key-link";
    let ran = d.fx.chitti(backend).sh(&script);
    assert!(
        ran.all().contains(&d.notes_marker),
        "positive control: {} must be readable:\n{ran}",
        d.notes.display()
    );
    let leaked = d.leaked_in(&ran.all());
    assert!(
        leaked.is_empty(),
        "credentials were readable: {leaked:?}\n{ran}"
    );
}

/// Run as root, the sandbox is uid 0 too, the owner of /etc/shadow: chitti must hide it.
/// (For anyone else the file's mode does; the check is the same.)
fn root_only_system_secrets_are_unreadable(backend: &str) {
    let fx = Fixture::new();
    let ran = fx
        .chitti(backend)
        .sh("cat /etc/shadow /etc/gshadow; echo END-OF-SECRETS; cat /etc/passwd");
    let (secrets, rest) = ran
        .stdout
        .split_once("END-OF-SECRETS")
        .unwrap_or_else(|| panic!("the probe did not run:\n{ran}"));
    assert!(
        rest.contains("root:x:0:0"),
        "positive control: /etc/passwd must be readable:\n{ran}"
    );
    assert!(
        secrets.trim().is_empty(),
        "/etc/shadow or /etc/gshadow was readable in the sandbox (uid {}):\n{ran}",
        unsafe { libc::geteuid() }
    );
}

fn credentials_cannot_be_linked_or_copied_into_workspace(backend: &str) {
    let d = DecoyHome::new();
    let mut script = String::new();
    for (i, (path, _)) in d.secrets.iter().enumerate() {
        let p = path.display();
        script += &format!("ln '{p}' hard-{i}; cp '{p}' copy-{i}; ln -s '{p}' soft-{i}; ");
    }
    script += "cp -r \"$HOME/.ssh\" ssh-copy; cp -r \"$HOME/.aws\" aws-copy; touch ran";
    let ran = d.fx.chitti(backend).sh(&script);
    assert_ran(&d.fx, "ran", &ran);
    for (path, mark) in &d.secrets {
        let found = files_containing(&d.fx.ws, mark);
        assert!(
            found.is_empty(),
            "{} reached the workspace as {found:?}:\n{ran}",
            path.display()
        );
    }
    let leaked = d.leaked_in(&ran.all());
    assert!(
        leaked.is_empty(),
        "credentials were readable: {leaked:?}\n{ran}"
    );
}

/// Says so in the test log when a "cannot read" test proves nothing on this machine,
/// because not even the test process, outside the sandbox, can read any of `paths`
/// (a container without /proc/kcore, a device cgroup, an unprivileged user).
fn note_if_vacuous(paths: &[String]) {
    use std::io::Read;
    let readable = |p: &String| {
        std::fs::File::open(p)
            .and_then(|mut f| f.read(&mut [0u8; 1]))
            .is_ok_and(|n| n > 0)
    };
    if !paths.iter().any(readable) {
        eprintln!(
            "note: none of {paths:?} is readable outside the sandbox either; \
             this test cannot fail on this machine"
        );
    }
}

/// /dev/mem and friends, and every block device of the host.
fn raw_devices_are_unreadable(backend: &str) {
    use std::os::unix::fs::FileTypeExt;
    let mut devices: Vec<String> = ["/dev/mem", "/dev/kmem", "/dev/port"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for entry in std::fs::read_dir("/dev").unwrap().flatten() {
        if entry
            .file_type()
            .map(|t| t.is_block_device())
            .unwrap_or(false)
        {
            devices.push(entry.path().display().to_string());
        }
    }
    note_if_vacuous(&devices);
    let fx = Fixture::new();
    let mut script = String::new();
    for dev in &devices {
        script += &format!("head -c 16 '{dev}' | od -An -tx1; ");
    }
    script += "touch ran";
    let ran = fx.chitti(backend).sh(&script);
    assert_ran(&fx, "ran", &ran);
    assert!(
        ran.stdout.trim().is_empty(),
        "data was read from one of {devices:?}:\n{ran}"
    );
}

fn proc_kcore_is_unreadable(backend: &str) {
    note_if_vacuous(&["/proc/kcore".to_string()]);
    let fx = Fixture::new();
    let ran = fx
        .chitti(backend)
        .sh("head -c 64 /proc/kcore | od -An -tx1; touch ran");
    assert_ran(&fx, "ran", &ran);
    assert!(
        ran.stdout.trim().is_empty(),
        "/proc/kcore was readable:\n{ran}"
    );
}

// ---------------------------------------------------------------------------------------
// 4. Network

/// Python that runs each `(label, statement)` catching OSError, prints what happened, and
/// then creates the file `ran_path` (relative paths are in the workspace).
fn python_attempts(attempts: &[(impl std::fmt::Display, String)], ran_path: &str) -> String {
    let mut script = String::from("import socket\nresults = []\n");
    for (label, code) in attempts {
        script += &format!(
            "try:\n    {code}\n    results.append('{label}: done')\n\
             except OSError as e:\n    results.append('{label}: %s' % e)\n"
        );
    }
    script += &format!("print('\\n'.join(results))\nopen('{ran_path}', 'w').close()\n");
    script
}

fn tcp_connect(port: u16) -> String {
    format!("socket.create_connection(('127.0.0.1', {port}), timeout=5).close()")
}

fn accepted(listener: &std::net::TcpListener) -> bool {
    match listener.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    }
}

fn tcp_to_host_is_blocked_by_default(backend: &str) {
    for profile in ["workspace-write", "read-only"] {
        let fx = Fixture::new();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let writable = fx.root.join("out");
        std::fs::create_dir(&writable).unwrap();
        let script = python_attempts(
            &[("tcp", tcp_connect(port))],
            &writable.join("ran").display().to_string(),
        );
        let ran = fx
            .chitti(backend)
            .opts(&["-p", profile, "--writable"])
            .opt(&writable)
            .python(&script);
        assert!(
            writable.join("ran").exists(),
            "the python did not run:\n{ran}"
        );
        assert!(
            !accepted(&listener),
            "profile {profile}: the sandbox connected to a host TCP port:\n{ran}"
        );
    }
}

fn tcp_to_host_works_with_network_on(backend: &str) {
    for opts in [&["--network", "on"][..], &["-p", "network"][..]] {
        let fx = Fixture::new();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let ran = fx
            .chitti(backend)
            .opts(opts)
            .python(&python_attempts(&[("tcp", tcp_connect(port))], "ran"));
        assert_ran(&fx, "ran", &ran);
        assert!(
            wait_until(5 * SECOND, || accepted(&listener)),
            "{opts:?}: no connection reached the host listener:\n{ran}"
        );
    }
}

fn stream_connect(addr: &str) -> String {
    format!(
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(5); \
         s.connect({addr}); s.close()"
    )
}

fn unix_accepted(listener: &UnixListener) -> bool {
    match listener.accept() {
        Ok(_) => true,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("accept: {e}"),
    }
}

/// Host unix sockets stay unreachable with the network off and on.
fn host_unix_socket_is_unreachable(backend: &str) {
    for network in ["off", "on"] {
        let fx = Fixture::new();
        let path = fx.outside.join("host.sock");
        let listener = UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = format!("'{}'", path.display());
        let ran = fx
            .chitti(backend)
            .opts(&["--network", network])
            .python(&python_attempts(&[("unix", stream_connect(&addr))], "ran"));
        assert_ran(&fx, "ran", &ran);
        assert!(
            !unix_accepted(&listener),
            "network {network}: the sandbox connected to a host unix socket:\n{ran}"
        );
    }
}

fn host_abstract_socket_is_unreachable(backend: &str) {
    use std::os::linux::net::SocketAddrExt;
    for network in ["off", "on"] {
        let fx = Fixture::new();
        let name = marker("abstract");
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixListener::bind_addr(&addr).unwrap();
        listener.set_nonblocking(true).unwrap();
        let ran = fx
            .chitti(backend)
            .opts(&["--network", network])
            .python(&python_attempts(
                &[("abstract", stream_connect(&format!("'\\0{name}'")))],
                "ran",
            ));
        assert_ran(&fx, "ran", &ran);
        assert!(
            !unix_accepted(&listener),
            "network {network}: the sandbox connected to a host abstract socket:\n{ran}"
        );
    }
}

/// Datagram sockets address their peer per message, so a connected socketpair is enough
/// to reach a host socket unless the sandbox stops it.
fn host_unix_datagram_sockets_are_unreachable(backend: &str) {
    use std::os::linux::net::SocketAddrExt;
    for network in ["off", "on"] {
        let fx = Fixture::new();
        let path = fx.outside.join("host.dgram");
        let by_path = UnixDatagram::bind(&path).unwrap();
        let name = marker("abstract-dgram");
        let by_name = UnixDatagram::bind_addr(
            &std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap(),
        )
        .unwrap();
        let mut attempts = Vec::new();
        for (kind, addr) in [
            ("path", format!("'{}'", path.display())),
            ("abstract", format!("'\\0{name}'")),
        ] {
            let dgram = "socket.AF_UNIX, socket.SOCK_DGRAM";
            attempts.push((
                format!("{kind} sendto"),
                format!("socket.socket({dgram}).sendto(b'x', {addr})"),
            ));
            attempts.push((
                format!("{kind} socketpair sendto"),
                format!("socket.socketpair({dgram})[0].sendto(b'x', {addr})"),
            ));
            attempts.push((
                format!("{kind} socketpair connect"),
                format!("a = socket.socketpair({dgram})[0]; a.connect({addr}); a.send(b'x')"),
            ));
        }
        let ran = fx
            .chitti(backend)
            .opts(&["--network", network])
            .python(&python_attempts(&attempts, "ran"));
        assert_ran(&fx, "ran", &ran);
        let reached: Vec<&str> = [("path", &by_path), ("abstract", &by_name)]
            .into_iter()
            .filter(|(_, sock)| {
                sock.set_nonblocking(true).unwrap();
                match sock.recv(&mut [0u8; 16]) {
                    Ok(_) => true,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => false,
                    Err(e) => panic!("recv: {e}"),
                }
            })
            .map(|(what, _)| what)
            .collect();
        assert!(
            reached.is_empty(),
            "network {network}: datagrams reached the host's {reached:?} unix sockets:\n{ran}"
        );
    }
}

fn socketpair_works(backend: &str) {
    for network in ["off", "on"] {
        let fx = Fixture::new();
        let ran = fx.chitti(backend).opts(&["--network", network]).python(
            "import socket\n\
             a, b = socket.socketpair()\n\
             a.sendall(b'ok')\n\
             open('socketpair-result', 'wb').write(b.recv(2))\n",
        );
        assert_eq!(
            std::fs::read_to_string(fx.ws("socketpair-result"))
                .ok()
                .as_deref(),
            Some("ok"),
            "network {network}: socketpair() must work:\n{ran}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 5. Environment

fn secret_env(fx: &Fixture, backend: &str) -> (Chitti, Vec<String>) {
    let marks: Vec<String> = (0..5).map(|_| marker("env")).collect();
    let chitti = fx
        .chitti(backend)
        .env("GEMINI_API_KEY", &marks[0])
        .env("GITHUB_TOKEN", &marks[1])
        .env("MY_SECRET", &marks[2])
        .env("SSH_AUTH_SOCK", format!("/x/{}", marks[3]))
        .env("DOCKER_HOST", format!("unix:///{}", marks[4]));
    (chitti, marks)
}

fn environment_secrets_are_filtered(backend: &str) {
    let fx = Fixture::new();
    let (chitti, marks) = secret_env(&fx, backend);
    let ran = chitti.sh("env > env.txt");
    let env = read(&fx.ws("env.txt"));
    for m in &marks {
        assert!(
            !env.contains(m.as_str()),
            "a secret variable reached the sandbox:\n{env}"
        );
    }
    for name in ["SSH_AUTH_SOCK", "DOCKER_HOST"] {
        assert!(
            !env.contains(&format!("{name}=")),
            "{name} reached the sandbox:\n{env}"
        );
    }
    assert!(
        env.contains(&format!("PATH={PATH}\n")),
        "PATH missing:\n{env}\n{ran}"
    );
    assert!(
        env.contains(&format!("HOME={}\n", fx.home.display())),
        "HOME missing:\n{env}"
    );
}

/// The processes around the command (chitti, a supervisor, bwrap) hold the caller's
/// environment; /proc must not hand it out.
fn secrets_not_readable_through_proc_environ(backend: &str) {
    let fx = Fixture::new();
    let (chitti, marks) = secret_env(&fx, backend);
    let ran = chitti.sh(
        "for f in /proc/[0-9]*/environ; do cat \"$f\"; echo; done 2>/dev/null \
         | tr '\\0' '\\n' > environs.txt; touch ran",
    );
    assert_ran(&fx, "ran", &ran);
    let seen = read(&fx.ws("environs.txt"));
    assert!(
        seen.contains("PATH="),
        "positive control: the command's own environ:\n{ran}"
    );
    for m in &marks {
        assert!(
            !seen.contains(m.as_str()),
            "a secret was read from /proc/*/environ\n{ran}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 6. Capabilities

fn capabilities_are_dropped(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).sh("cat /proc/self/status > status.txt");
    let status = read(&fx.ws("status.txt"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in:\n{status}\n{ran}"))
            .trim()
            .to_string()
    };
    for cap in ["CapEff", "CapPrm", "CapInh", "CapAmb"] {
        assert_eq!(field(cap), "0000000000000000", "{cap}:\n{status}");
    }
    assert_eq!(field("NoNewPrivs"), "1", "{status}");
    if running_as_root() {
        assert_eq!(
            field("CapBnd"),
            "0000000000000000",
            "root's bounding set:\n{status}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 7. Lifetime

fn daemonized_process_dies_with_the_command(backend: &str) {
    let fx = Fixture::new();
    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    // Each sleeper leaves a file just before it becomes `sleep`; the command waits for
    // all three, so that none can be missed by starting late.
    let ran = fx.chitti(backend).sh(&format!(
        "setsid sh -c 'touch d1; exec sleep {secs}' & \
         (setsid sh -c 'touch d2; exec sleep {secs}' &); \
         nohup sh -c 'touch d3; exec sleep {secs}' >/dev/null 2>&1 & \
         while [ ! -e d1 ] || [ ! -e d2 ] || [ ! -e d3 ]; do sleep 0.05; done; \
         touch started"
    ));
    assert_ran(&fx, "started", &ran);
    assert!(
        wait_until(5 * SECOND, || sleepers(&secs).is_empty()),
        "processes outlived the call: {:?}\n{ran}",
        sleepers(&secs)
    );
}

/// The call's mount namespace (bwrap's, or the one a root Landlock call makes for its
/// masks) does not outlive the call by more than the kernel's own cleanup: a root Landlock
/// call leaves its namespace's teardown to a kernel worker after chitti exits (see
/// `sandbox::linux::namespace_release`), which must still happen.
fn mount_namespace_goes_away_after_the_call(backend: &str) {
    let fx = Fixture::new();
    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    let command = format!("sleep {secs} & touch ready; {WAIT_FOR_RELEASE}");
    // Looked up while the call runs, so that "gone" below cannot mean "never visible".
    let seen = while_running(&fx, backend, &["sh", "-c", &command], || {
        let pid = *sleepers(&secs)
            .first()
            .expect("the sandboxed sleep is not running");
        mount_namespace_of(pid).map(|(id, other)| (id, other, mount_namespace_exists(id)))
    });
    let Some((id, other, visible)) = seen else {
        eprintln!("SKIP: this kernel cannot name a mount namespace by ID (Linux 6.11)");
        return;
    };
    if !other {
        eprintln!(
            "note: this call made no mount namespace (a user's Landlock call): nothing to see"
        );
        return;
    }
    if !matches!(visible, Ok(true)) {
        eprintln!("SKIP: this user cannot list the call's mount namespace by ID: {visible:?}");
        return;
    }
    assert!(
        wait_until(10 * SECOND, || matches!(
            mount_namespace_exists(id),
            Ok(false)
        )),
        "the call's mount namespace is still there 10 s after the call: {:?}",
        mount_namespace_exists(id)
    );
}

/// Without a PID namespace the call's processes stay in the process group the command
/// leads, which the supervisor kills at once (a family forking as fast as it can outran a
/// walk of /proc): a new session or group is pretended (setsid and setpgid succeed and
/// change nothing, so that the tools that ask for one still run), and a signal to a whole
/// group, which could only reach the call itself, is refused. Seen from outside: the
/// sleeper that asked for both is still in the group and session its parent leads.
/// `setsid CMD` runs CMD, and `timeout` times its command out without killing the call.
#[test]
fn landlock_keeps_the_call_in_one_process_group() {
    ensure_backend("landlock");
    let fx = Fixture::new();
    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    let script = format!(
        r#"import os, signal
said = []
for name, attempt in [("setsid", os.setsid), ("setpgid", lambda: os.setpgid(0, 0)),
                      ("killpg", lambda: os.kill(0, signal.SIGCONT))]:
    try:
        attempt()
        said.append(name + " ok")
    except PermissionError:
        said.append(name + " refused")
print(", ".join(said), flush=True)
os.execvp("sleep", ["sleep", "{secs}"])
"#
    );
    let mut chitti = fx
        .chitti("landlock")
        .command(&[
            "sh",
            "-c",
            &format!(
                "timeout 1 sleep 30; echo \"timeout $?\" > timeout-done; \
                 setsid sh -c 'echo ran > setsid-ran'; \
                 python3 -c '{script}' > tried & wait"
            ),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chitti");
    let started = wait_until(30 * SECOND, || sleepers(&secs).len() == 1);
    let ids = |pid: i32| -> (i32, i32, i32) {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let fields: Vec<i32> = stat
            .rsplit_once(')')
            .map(|(_, rest)| {
                rest.split_whitespace()
                    .filter_map(|f| f.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        // After the state: ppid, pgrp, session.
        (fields[0], fields[1], fields[2])
    };
    let seen = started.then(|| {
        let sleeper = sleepers(&secs)[0];
        let (command, group, session) = ids(sleeper);
        (command, group, session, ids(command))
    });
    let _ = chitti.kill();
    let _ = chitti.wait();
    assert!(started, "the sleeper never showed up");
    let (command, group, session, command_ids) = seen.unwrap();
    assert_eq!(
        (group, session),
        (command, command),
        "ESCAPE: the sleeper left the group and session its parent leads ({command_ids:?})"
    );
    assert_eq!(
        read(&fx.ws("tried")),
        "setsid ok, setpgid ok, killpg refused\n"
    );
    assert_eq!(read(&fx.ws("setsid-ran")), "ran\n");
    assert_eq!(read(&fx.ws("timeout-done")), "timeout 124\n");
}

fn timeout_kills_the_whole_tree(backend: &str) {
    let fx = Fixture::new();
    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    let ran = fx
        .chitti(backend)
        .opts(&["--timeout", "1", "--json"])
        .sh(&format!("touch ran; setsid sleep {secs} & sleep {secs}"));
    assert_ran(&fx, "ran", &ran);
    assert_eq!(ran.code, Some(124), "{ran}");
    assert!(
        ran.elapsed < 5 * SECOND,
        "a 1 s timeout took {:?}",
        ran.elapsed
    );
    let json = ran.json();
    assert_eq!(json["timed_out"], true, "{ran}");
    assert_eq!(json["exit_code"], 124, "{ran}");
    assert!(
        wait_until(5 * SECOND, || sleepers(&secs).is_empty()),
        "processes survived the timeout: {:?}",
        sleepers(&secs)
    );
}

/// Starts a call that runs `setup`, then a daemonised and a plain `sleep` (the reaper's
/// token); returns chitti, the reaper, and whether both sleeps showed up within 30 s.
fn start_sleeping_call(
    fx: &Fixture,
    backend: &str,
    setup: &str,
) -> (std::process::Child, SleepReaper, bool) {
    start_sleeping(fx.chitti(backend), setup)
}

/// [`start_sleeping_call`] with a chitti of the caller's making.
fn start_sleeping(chitti: Chitti, setup: &str) -> (std::process::Child, SleepReaper, bool) {
    let secs = unique_sleep();
    let reaper = SleepReaper(secs.clone());
    let chitti = chitti
        .command(&[
            "sh",
            "-c",
            &format!("{setup}; setsid sleep {secs} & sleep {secs}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chitti");
    let started = wait_until(30 * SECOND, || sleepers(&secs).len() >= 2);
    (chitti, reaper, started)
}

/// Runs `setup` in the sandbox, then a daemonised and a plain `sleep`; once both run,
/// kills chitti with SIGKILL, and fails unless every sandboxed process is gone within 5 s.
fn sigkill_chitti_during(fx: &Fixture, backend: &str, setup: &str) {
    let (mut chitti, reaper, started) = start_sleeping_call(fx, backend, setup);
    let secs = &reaper.0;
    chitti.kill().unwrap();
    chitti.wait().unwrap();
    assert!(started, "the sandboxed sleeps never showed up");
    // Everything that carries the token must go: the command tree, and the supervisor
    // once it has put protected paths back (so the caller may inspect them now).
    assert!(
        wait_until(5 * SECOND, || pids_mentioning(secs).is_empty()),
        "processes survived SIGKILL of chitti: {:?}",
        pids_mentioning(secs)
    );
}

fn sigkill_of_chitti_kills_the_sandbox(backend: &str) {
    let fx = Fixture::new();
    sigkill_chitti_during(&fx, backend, "touch ran");
    assert!(fx.ws("ran").exists());
}

fn tmpdir_is_discarded_after_sigkill_of_chitti(backend: &str) {
    let fx = Fixture::new();
    let name = marker("tmpfile");
    sigkill_chitti_during(
        &fx,
        backend,
        &format!("echo {name} > \"$TMPDIR/{name}\"; printf %s \"$TMPDIR\" > tmpdir-path"),
    );
    let tmpdir = PathBuf::from(read(&fx.ws("tmpdir-path")));
    // sigkill_chitti_during waited for the supervisor to finish its clean-up.
    let left = tmpdir.join(&name).exists();
    if left && tmpdir.starts_with("/tmp") && tmpdir != Path::new("/tmp") {
        let _ = std::fs::remove_dir_all(&tmpdir);
    }
    assert!(
        !left,
        "what the sandbox wrote to TMPDIR ({}) stayed on the host after SIGKILL of chitti",
        tmpdir.display()
    );
}

/// The landlock backend takes one-shot TMPDIRs from a per-user pool. Were its supervisor
/// killed, processes of the call could live on and go on writing the call's TMPDIR: no
/// later call may be given a TMPDIR they can write. Here one of them writes to its
/// TMPDIR every 20 ms while later calls run; none of them finds its writes.
#[test]
fn landlock_never_reuses_the_tmpdir_of_a_call_whose_supervisor_was_killed() {
    let fx = Fixture::new();
    // A pool of the test's own (TMPDIR is where chitti keeps it): its first slot is the
    // killed call's, which the next call then comes to first.
    let pool = fx.root.join("pool");
    std::fs::create_dir(&pool).unwrap();
    let chitti = || fx.chitti("landlock").env("TMPDIR", &pool);
    let tag = unique_sleep();
    // Writes for about 20 s at most, then ends by itself; `tag` names it for the cleanup.
    let writer = format!(
        "(setsid sh -c 'for i in $(seq 1000); do echo planted >> \"$TMPDIR/planted\" \
         2>/dev/null; sleep 0.02; done' writer-{tag} >/dev/null 2>&1 &)"
    );
    let (mut front, reaper, started) = start_sleeping(
        chitti(),
        &format!("printf %s \"$TMPDIR\" > tmpdir-path; {writer}"),
    );
    assert!(started, "the sandboxed sleeps never showed up");
    let orphaned = PathBuf::from(read(&fx.ws("tmpdir-path")));
    assert!(
        orphaned.starts_with(&pool),
        "the call's TMPDIR {} is not a slot of the test's pool",
        orphaned.display()
    );
    assert!(
        wait_until(10 * SECOND, || orphaned.join("planted").exists()),
        "the writer never wrote: the test shows nothing"
    );
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", front.id()))
        .unwrap_or_default();
    let supervisors: Vec<i32> = children
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(supervisors.len(), 1, "chitti's children: {children:?}");
    unsafe { libc::kill(supervisors[0], libc::SIGKILL) };
    let _ = front.kill();
    front.wait().unwrap();
    let writers = || pids_mentioning(&format!("writer-{tag}"));
    assert!(
        !writers().is_empty(),
        "nothing of the call outlived its supervisor: the test shows nothing"
    );
    let mut outcome = Vec::new();
    for _ in 0..3 {
        let ran = chitti()
            .sh("printf %s \"$TMPDIR\" > tmpdir-path; sleep 0.3; ls -A \"$TMPDIR\" > listing");
        let tmpdir = read(&fx.ws("tmpdir-path"));
        assert!(!tmpdir.is_empty(), "no TMPDIR:\n{ran}");
        outcome.push((tmpdir, read(&fx.ws("listing")), ran.to_string()));
    }
    let still_writing = !writers().is_empty();
    for pid in writers() {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    drop(reaper);
    assert!(still_writing, "the writer ended before the later calls did");
    // The dead slot's name serves again, for a fresh directory; the old one, still
    // written by the killed call's process, was moved aside.
    assert_eq!(
        outcome[0].0,
        orphaned.display().to_string(),
        "the next call did not come to the killed call's slot: the test shows nothing"
    );
    let aside: Vec<String> = std::fs::read_dir(orphaned.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("dirty-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    for (tmpdir, listing, ran) in outcome {
        assert!(
            listing.trim().is_empty(),
            "a later call's TMPDIR {tmpdir} held what a process of a killed call wrote: \
             {listing:?}\n{ran}"
        );
    }
}

/// A landlock call left running (see `start_sleeping_call`), with the pids of its
/// supervisor (chitti's one child) and of its command.
fn running_landlock_call(fx: &Fixture) -> (std::process::Child, SleepReaper, i32, i32) {
    let (chitti, reaper, started) = start_sleeping_call(
        fx,
        "landlock",
        "echo $$ > pid; printf %s \"$TMPDIR\" > tmpdir-path",
    );
    assert!(started, "the sandboxed sleeps never showed up");
    let front = chitti.id() as i32;
    let children =
        std::fs::read_to_string(format!("/proc/{front}/task/{front}/children")).unwrap_or_default();
    let supervisor: i32 = children.trim().parse().expect("one supervisor");
    let command: i32 = read(&fx.ws("pid"))
        .trim()
        .parse()
        .expect("the command's pid");
    (chitti, reaper, supervisor, command)
}

/// Were the landlock backend's supervisor killed outright, the command it started goes
/// with it (what the command started by then does not: a known limit, shown by the test
/// above). Seen from outside: the command's process is gone.
#[test]
fn landlock_command_dies_with_its_supervisor() {
    let fx = Fixture::new();
    let (mut chitti, reaper, supervisor, command) = running_landlock_call(&fx);
    let alive = |pid: i32| {
        // A zombie is dead: only its parent's wait is missing.
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    assert!(alive(command), "the command was not running");
    unsafe { libc::kill(supervisor, libc::SIGKILL) };
    let gone = wait_until(5 * SECOND, || !alive(command));
    // chitti, left without a report, ends on its own: 125, the call's fate unknown.
    let mut status = None;
    wait_until(10 * SECOND, || {
        status = chitti.try_wait().unwrap();
        status.is_some()
    });
    let _ = chitti.kill();
    chitti.wait().unwrap();
    drop(reaper);
    // Its dead TMPDIR slot is left to the pool, which moves it aside when a call next
    // comes to it: removing it by name here could remove another call's fresh slot.
    assert!(gone, "the command outlived its supervisor's SIGKILL");
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(125),
        "chitti did not end with 125 once its supervisor was gone"
    );
}

/// chitti started with its standard descriptors closed opens them on /dev/null before
/// anything else (src/process_start.rs, in place of std's start): the command, which gets
/// chitti's own, finds /dev/null there, not a file chitti opened for itself. Read from
/// the command's shell, whose own descriptors a command substitution leaves alone.
#[test]
fn closed_standard_descriptors_are_opened_on_dev_null() {
    use std::os::unix::process::CommandExt;
    let fx = Fixture::new();
    let mut command = fx.chitti("landlock").command(&[
        "sh",
        "-c",
        "fds=$(readlink /proc/$$/fd/0 /proc/$$/fd/1 /proc/$$/fd/2); echo \"$fds\" > fds",
    ]);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            for fd in 0..3 {
                libc::close(fd);
            }
            Ok(())
        });
    }
    let status = command.status().expect("spawn chitti");
    assert_eq!(status.code(), Some(0), "{status:?}");
    let fds = std::fs::read_to_string(fx.ws.join("fds")).expect("the command ran");
    assert_eq!(fds, "/dev/null\n/dev/null\n/dev/null\n");
}

/// chitti moves the landlock supervisor off its own CPU as the call starts
/// (`cpu::move_to_another_cpu`); the command may still use every CPU chitti may. Compared
/// with this test's own CPUs, which chitti inherits. (With one CPU nothing is moved, and
/// the test shows only that nothing was taken away.)
#[test]
fn landlock_command_may_use_every_cpu_chitti_may() {
    let allowed = |status: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_string())
            .expect("Cpus_allowed_list in /proc/PID/status")
    };
    let fx = Fixture::new();
    let ran = fx.chitti("landlock").sh("cat /proc/self/status > status");
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let command = std::fs::read_to_string(fx.ws.join("status")).expect("the command ran");
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    assert_eq!(allowed(&command), allowed(&own));
}

/// A reader of chitti's output that went away makes chitti's writes fail, not kill it
/// with SIGPIPE (src/process_start.rs): the call's outcome stays its exit status.
#[test]
fn a_closed_output_pipe_does_not_kill_chitti() {
    use std::os::unix::process::ExitStatusExt;
    let fx = Fixture::new();
    let mut child = fx
        .chitti("landlock")
        .opt("--json")
        .command(&["sh", "-c", "exit 3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chitti");
    // Closed before chitti writes its outcome, at the end of the call.
    drop(child.stdout.take());
    let status = child.wait().expect("wait for chitti");
    assert_eq!(status.signal(), None, "{status:?}");
    assert_eq!(status.code(), Some(3));
}

/// Where root's landlock command hides root's secrets: in a private mount namespace that
/// chitti made in its own process (see `supervisor::spawn`), which the command joined;
/// the supervisor, which repairs protected paths, stays in the host's. A user's command
/// gets no mount namespace at all (nothing is hidden by mounts). Read from outside, while
/// the command runs.
#[test]
fn landlock_command_shares_chitti_s_mount_namespace_as_root_only() {
    let fx = Fixture::new();
    let (mut chitti, reaper, supervisor, command) = running_landlock_call(&fx);
    let front = chitti.id() as i32;
    let namespace = |pid: i32| {
        std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
            .unwrap_or_else(|e| panic!("mount namespace of {pid}: {e}"))
    };
    let host = namespace(std::process::id() as i32);
    let (front_ns, supervisor_ns, command_ns) =
        (namespace(front), namespace(supervisor), namespace(command));
    let _ = chitti.kill();
    chitti.wait().unwrap();
    drop(reaper);
    assert_eq!(
        supervisor_ns, host,
        "the supervisor left the host's mount namespace"
    );
    if unsafe { libc::geteuid() } == 0 {
        assert_ne!(
            command_ns, host,
            "root's command runs in the host's mount namespace"
        );
        assert_eq!(
            command_ns, front_ns,
            "root's command did not join chitti's mount namespace"
        );
    } else {
        assert_eq!(command_ns, host, "a user's command got a mount namespace");
        assert_eq!(front_ns, host);
    }
}

// ---------------------------------------------------------------------------------------
// 8. Exit codes

fn exit_code_is_propagated(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).sh("touch ran; exit 7");
    assert_ran(&fx, "ran", &ran);
    assert_eq!(ran.code, Some(7), "{ran}");
}

fn signal_death_is_128_plus_signal(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).sh("touch ran; kill -KILL $$");
    assert_ran(&fx, "ran", &ran);
    assert_eq!(ran.code, Some(137), "{ran}");
}

/// Nothing runs, so nothing is set up either: a repository without `.git/hooks` (which a
/// call creates in order to hold it read-only) is left as it was.
fn missing_command_is_127(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo("initial");
    std::fs::remove_dir_all(fx.ws(".git/hooks")).unwrap();
    let ran = fx.chitti(backend).run(&["chitti-no-such-command-xyz"]);
    assert_eq!(ran.code, Some(127), "{ran}");
    assert!(ran.stderr.contains("chitti-no-such-command-xyz"), "{ran}");
    assert!(!fx.ws(".git/hooks").exists(), "{ran}");
}

/// With nothing to create first, root's one-shot landlock call leaves the program's
/// search to its supervisor: the same 127 and words as a search before the fork (which
/// the other backend, and a user's call, still make), the call's record of the repository
/// let go, and the next call unhindered.
fn missing_command_in_a_kept_repository_is_127_and_changes_nothing(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo("initial");
    let config = std::fs::read(fx.ws(".git/config")).unwrap();
    for json in [false, true] {
        let chitti = fx.chitti(backend);
        let chitti = if json { chitti.opt("--json") } else { chitti };
        let ran = chitti.run(&["chitti-no-such-command-xyz", "arg"]);
        assert_eq!(ran.code, Some(127), "{ran}");
        assert!(
            ran.stderr.contains(
                "chitti-no-such-command-xyz: command not found (searched the sandbox PATH)"
            ),
            "{ran}"
        );
        if json {
            assert_eq!(ran.json()["exit_code"], serde_json::json!(127), "{ran}");
        }
    }
    assert_eq!(std::fs::read(fx.ws(".git/config")).unwrap(), config);
    let ran = fx.chitti(backend).run(&["sh", "-c", "touch ran"]);
    assert_eq!(ran.code, Some(0), "{ran}");
    assert!(fx.ws("ran").exists(), "{ran}");
    assert!(
        !ran.stderr.contains("chitti:"),
        "the next call was told something:\n{ran}"
    );
}

/// A script whose `#!` interpreter does not exist: the exec fails inside the sandbox,
/// which is the command's 127 on every backend, not a set-up failure (125).
fn missing_interpreter_is_127(backend: &str) {
    let fx = Fixture::new();
    write(
        &fx.ws("script.sh"),
        "#!/chitti-no-such-interpreter\ntouch ran\n",
    );
    std::fs::set_permissions(
        fx.ws("script.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let ran = fx.chitti(backend).run(&["./script.sh"]);
    assert_eq!(ran.code, Some(127), "{ran}");
    assert!(ran.stderr.contains("script.sh"), "{ran}");
}

/// A command that ran and failed keeps its exit status, whatever its stderr looks like.
fn command_writing_like_bwrap_keeps_its_exit_code(backend: &str) {
    let fx = Fixture::new();
    let ran = fx
        .chitti(backend)
        .sh("touch ran; echo 'bwrap: a line like a set-up error' >&2; echo more >&2; exit 1");
    assert_ran(&fx, "ran", &ran);
    assert_eq!(ran.code, Some(1), "{ran}");
}

/// An executable file without `#!` runs with /bin/sh, as a shell or `execvp` would run it,
/// on every backend (bwrap uses `execvp`; the others make the same fallback themselves).
fn script_without_interpreter_line_runs_with_sh(backend: &str) {
    let fx = Fixture::new();
    write(&fx.ws("script"), "echo \"$0 $1\" > ran\n");
    std::fs::set_permissions(
        fx.ws("script"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let ran = fx.chitti(backend).run(&["./script", "arg"]);
    assert_eq!(ran.code, Some(0), "{ran}");
    assert_eq!(read(&fx.ws("ran")), "./script arg\n", "{ran}");
}

fn non_executable_is_126(backend: &str) {
    let fx = Fixture::new();
    write(&fx.ws("script.sh"), "#!/bin/sh\ntouch ran\n");
    let ran = fx.chitti(backend).run(&["./script.sh"]);
    assert_eq!(ran.code, Some(126), "{ran}");
    assert!(
        !fx.ws("ran").exists(),
        "the non-executable file ran:\n{ran}"
    );
}

/// Asserts a set-up failure: exit 125, an error on stderr naming `expected`, and the
/// command (which would have created `sentinel`) never ran.
fn assert_setup_error(ran: &Ran, sentinel: &Path, expected: &[&str]) {
    assert_eq!(ran.code, Some(125), "{ran}");
    assert!(ran.stderr.contains("error"), "no error message:\n{ran}");
    for e in expected {
        assert!(
            ran.stderr.contains(e),
            "the error does not mention `{e}`:\n{ran}"
        );
    }
    assert!(
        !sentinel.exists(),
        "the command ran despite the error:\n{ran}"
    );
}

/// chitti with an extra writable directory, so that the command would leave a file if it
/// ran at all (whatever the workspace).
fn with_sentinel(fx: &Fixture, backend: &str) -> (Chitti, PathBuf, String) {
    let dir = fx.root.join("sentinel");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ran");
    let script = format!("touch '{}'", file.display());
    let chitti = fx.chitti(backend).opt("--writable").opt(&dir);
    (chitti, file, script)
}

fn missing_workspace_is_125(backend: &str) {
    let fx = Fixture::new();
    let (chitti, sentinel, script) = with_sentinel(&fx, backend);
    let missing = fx.root.join("nonexistent");
    let ran = chitti.workspace(&missing).sh(&script);
    assert_setup_error(&ran, &sentinel, &["nonexistent"]);
    let ran = fx.chitti(backend).workspace("/nonexistent").sh(&script);
    assert_setup_error(&ran, &sentinel, &["/nonexistent"]);
}

fn root_workspace_is_125(backend: &str) {
    let fx = Fixture::new();
    let (chitti, sentinel, script) = with_sentinel(&fx, backend);
    let ran = chitti.workspace("/").sh(&script);
    assert_setup_error(&ran, &sentinel, &[]);
}

/// Refused before the command runs on every path: run as root on landlock, chitti looks
/// for the credential locations only after forking the supervisor.
fn workspace_in_a_credential_location_is_125(backend: &str) {
    let fx = Fixture::new();
    let (chitti, sentinel, script) = with_sentinel(&fx, backend);
    let inside = fx.home.join(".aws/project");
    std::fs::create_dir_all(&inside).unwrap();
    let ran = chitti.workspace(&inside).sh(&script);
    assert_setup_error(&ran, &sentinel, &["credential location", ".aws"]);
}

fn unknown_profile_is_125(backend: &str) {
    let fx = Fixture::new();
    let (chitti, sentinel, script) = with_sentinel(&fx, backend);
    let ran = chitti.opts(&["--profile", "nope"]).sh(&script);
    assert_setup_error(
        &ran,
        &sentinel,
        &["nope", "workspace-write", "read-only", "network"],
    );
}

fn malformed_profile_is_125(backend: &str) {
    let fx = Fixture::new();
    let profile = fx.root.join("bad.toml");
    write(
        &profile,
        "extends = \"workspace-write\"\n[network\nenabled = true\n",
    );
    let (chitti, sentinel, script) = with_sentinel(&fx, backend);
    let ran = chitti.opt("--profile").opt(&profile).sh(&script);
    assert_setup_error(&ran, &sentinel, &["bad.toml", "line 2", "column"]);
}

fn unknown_profile_key_is_125(backend: &str) {
    let fx = Fixture::new();
    let profile = fx.root.join("typo.toml");
    write(
        &profile,
        "extends = \"workspace-write\"\n[network]\nenable = true\n",
    );
    let (chitti, sentinel, script) = with_sentinel(&fx, backend);
    let ran = chitti.opt("--profile").opt(&profile).sh(&script);
    assert_setup_error(&ran, &sentinel, &["enable", "line 3"]);
}

fn no_command_is_125(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).run_without_command();
    assert_eq!(ran.code, Some(125), "{ran}");
    assert!(ran.stderr.contains("no command"), "{ran}");
}

/// A mistyped flag is chitti's refusal, not the command's exit status 2.
fn bad_flag_is_125(backend: &str) {
    let fx = Fixture::new();
    for (opts, named) in [
        (["--tiemout", "5"], "--tiemout"),
        (["--timeout", "0"], "--timeout"),
    ] {
        let (chitti, sentinel, script) = with_sentinel(&fx, backend);
        let ran = chitti.opts(&opts).sh(&script);
        assert_setup_error(&ran, &sentinel, &[named]);
    }
    // With --json the refusal is also the promised JSON object on stdout.
    let (chitti, sentinel, script) = with_sentinel(&fx, backend);
    let ran = chitti.opts(&["--json", "--tiemout", "5"]).sh(&script);
    assert_setup_error(&ran, &sentinel, &["--tiemout"]);
    let json: serde_json::Value = serde_json::from_str(ran.stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{ran}"));
    assert_eq!(json["exit_code"], 125, "{json}");
    assert!(
        json["error"].as_str().unwrap().contains("--tiemout"),
        "{json}"
    );
}

// ---------------------------------------------------------------------------------------
// 9. --json

/// Stopped by SIGTERM, chitti kills the tree and exits 128+15 like a shell would, and
/// `--json` says the call was cancelled.
fn sigterm_to_chitti_is_143_and_cancelled(backend: &str) {
    stopped_by(backend, libc::SIGTERM);
}

/// The other signals whose default action would kill chitti on the spot (a terminal's
/// Ctrl-\ among them) stop the call in the same order: chitti must not die before the
/// sandbox does (bwrap, dying with it while it sets a sandbox up, would leave that running).
fn other_catchable_fatal_signals_stop_the_call_in_order(backend: &str) {
    for signal in [libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2, libc::SIGALRM] {
        stopped_by(backend, signal);
    }
}

/// Two stop signals pending as chitti starts (blocked and raised by its parent, so that
/// they wait across exec): chitti takes one, and the other must not kill it with its
/// default action while the call is torn down.
fn two_pending_stop_signals_stop_the_call_in_order(backend: &str) {
    use std::os::unix::process::CommandExt;
    for (first, second) in [
        (libc::SIGUSR1, libc::SIGUSR2),
        (libc::SIGINT, libc::SIGTERM),
    ] {
        let fx = Fixture::new();
        let secs = unique_sleep();
        let _reaper = SleepReaper(secs.clone());
        let mut command = fx.chitti(backend).opt("--json").command(&[
            "sh",
            "-c",
            &format!("sleep {secs}; touch late"),
        ]);
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, first);
                libc::sigaddset(&mut set, second);
                libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                libc::kill(libc::getpid(), first);
                libc::kill(libc::getpid(), second);
                Ok(())
            });
        }
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chitti");
        let (stopped, out) = exited_within(child, 30 * SECOND);
        assert!(stopped, "chitti did not stop within 30 s");
        assert_eq!(
            out.status.code(),
            Some(128 + first),
            "signals {first} and {second}: {out:?}"
        );
        assert!(!fx.ws("late").exists());
        assert!(
            sleepers(&secs).is_empty(),
            "the sandboxed `sleep {secs}` outlived the call"
        );
    }
}

/// chitti, stopped by `signal` while its command runs, kills the tree and exits 128+N.
fn stopped_by(backend: &str, signal: libc::c_int) {
    let fx = Fixture::new();
    let secs = unique_sleep();
    let _reaper = SleepReaper(secs.clone());
    let child = fx
        .chitti(backend)
        .opt("--json")
        .command(&[
            "sh",
            "-c",
            &format!("touch ready; sleep {secs}; touch late"),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chitti");
    let ready = wait_until(30 * SECOND, || fx.ws("ready").exists());
    unsafe { libc::kill(child.id() as i32, signal) };
    let out = child.wait_with_output().unwrap();
    assert!(ready, "the command never started");
    assert_eq!(
        out.status.code(),
        Some(128 + signal),
        "signal {signal}: {out:?}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["cancelled"], true, "{json}");
    assert_eq!(json["exit_code"], 128 + signal, "{json}");
    assert!(!fx.ws("late").exists());
    assert!(
        sleepers(&secs).is_empty(),
        "signal {signal}: the sandboxed `sleep {secs}` outlived the call"
    );
}

/// The same, with SIGTERM sent as soon as chitti has a child (bwrap, or the supervisor):
/// while the call is still being set up or its command started, before chitti's runtime
/// listens for signals. The signal must wait for it, not kill chitti outright.
fn sigterm_early_in_a_call_is_143_and_cancelled(backend: &str) {
    let fx = Fixture::new();
    for _ in 0..5 {
        let secs = unique_sleep();
        let _reaper = SleepReaper(secs.clone());
        let child = fx
            .chitti(backend)
            .opt("--json")
            .command(&["sh", "-c", &format!("sleep {secs}; touch late")])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chitti");
        // Polled without pause: the window lasts a fraction of a millisecond.
        let pid = child.id();
        let children = format!("/proc/{pid}/task/{pid}/children");
        let deadline = Instant::now() + 30 * SECOND;
        let forked = loop {
            if std::fs::read_to_string(&children).is_ok_and(|c| !c.trim().is_empty()) {
                break true;
            }
            if Instant::now() > deadline {
                break false;
            }
        };
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        // Bounded: a signal chitti lost would otherwise hang the suite.
        let (stopped, out) = exited_within(child, 30 * SECOND);
        assert!(stopped, "chitti did not stop within 30 s of SIGTERM");
        assert!(forked, "chitti never started a child");
        assert_eq!(out.status.code(), Some(143), "{out:?}");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["cancelled"], true, "{json}");
        assert!(!fx.ws("late").exists());
        assert!(
            sleepers(&secs).is_empty(),
            "the sandboxed `sleep {secs}` outlived the cancelled call"
        );
    }
}

fn json_reports_every_field(backend: &str) {
    let fx = Fixture::new();
    let ran = fx
        .chitti(backend)
        .opt("--json")
        .sh("echo out; echo err >&2; touch ran; exit 3");
    assert_ran(&fx, "ran", &ran);
    let json = ran.json();
    for key in [
        "exit_code",
        "signal",
        "timed_out",
        "cancelled",
        "stdout",
        "stderr",
        "stdout_truncated_bytes",
        "stderr_truncated_bytes",
        "duration_ms",
        "backend",
        "profile",
    ] {
        assert!(json.get(key).is_some(), "no `{key}` in {json}");
    }
    assert_eq!(json["exit_code"], 3, "{json}");
    assert_eq!(ran.code, Some(3), "{ran}");
    assert_eq!(json["stdout"], "out\n", "{json}");
    assert_eq!(json["stderr"], "err\n", "{json}");
    assert_eq!(json["timed_out"], false, "{json}");
    assert_eq!(json["cancelled"], false, "{json}");
    assert_eq!(json["stdout_truncated_bytes"], 0, "{json}");
    assert_eq!(json["backend"], backend, "{json}");
    assert_eq!(json["profile"], "workspace-write", "{json}");
    assert!(json["duration_ms"].is_u64(), "{json}");
}

fn json_keeps_head_and_tail_of_large_output(backend: &str) {
    let fx = Fixture::new();
    let head = marker("HEAD");
    let tail = marker("TAIL");
    let ran = fx
        .chitti(backend)
        .opts(&["--json", "--max-output", "1000"])
        .sh(&format!(
            "printf {head}; head -c 1000000 /dev/zero | tr '\\0' x; printf {tail}"
        ));
    let json = ran.json();
    let stdout = json["stdout"].as_str().expect("stdout is a string");
    let total = (head.len() + 1_000_000 + tail.len()) as u64;
    assert!(
        stdout.starts_with(&head),
        "head lost: {}",
        &stdout[..100.min(stdout.len())]
    );
    assert!(stdout.ends_with(&tail), "tail lost");
    assert!(
        stdout.len() < 1200,
        "{} bytes kept with --max-output 1000",
        stdout.len()
    );
    assert_eq!(json["stdout_truncated_bytes"], total - 1000, "{json}");
    assert_eq!(json["stderr_truncated_bytes"], 0, "{json}");
}

fn json_keeps_unicode(backend: &str) {
    let fx = Fixture::new();
    let text = "héllo wörld ✓ 日本語 🦀 ε=mc²";
    let ran = fx
        .chitti(backend)
        .opt("--json")
        .run(&["printf", "%s", text]);
    assert_eq!(ran.json()["stdout"], text, "{ran}");
}

// ---------------------------------------------------------------------------------------
// 10-12. Other processes and the terminal

fn host_process_cannot_be_signalled(backend: &str) {
    let mut host = HostSleep::start();
    let fx = Fixture::new();
    let pid = host.pid();
    let ran = fx
        .chitti(backend)
        .sh(&format!("kill -TERM {pid}; kill -KILL {pid}; touch ran"));
    assert_ran(&fx, "ran", &ran);
    assert!(
        !wait_until(SECOND / 2, || !host.alive()),
        "the sandbox killed host process {pid}:\n{ran}"
    );
}

fn tiocsti_cannot_inject_terminal_input(backend: &str) {
    let pty = Pty::open();
    let fx = Fixture::new();
    // stdout is a terminal, as when chitti runs in the user's shell; fd 0 is tried too.
    let script = r#"
import fcntl, termios
results = []
for fd in (0, 1):
    try:
        for c in b"id\n":
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))
        results.append("fd %d: injected" % fd)
    except OSError as e:
        results.append("fd %d: errno %d" % (fd, e.errno))
open("tiocsti-result", "w").write("\n".join(results))
"#;
    let out = fx
        .chitti(backend)
        .command(&["python3", "-c", script])
        .stdout(pty.slave_stdio())
        .output()
        .expect("run chitti");
    let result = std::fs::read_to_string(fx.ws("tiocsti-result")).unwrap_or_else(|_| {
        panic!(
            "the python did not run: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(
        pty.pending_input(),
        0,
        "input was injected into the terminal: {result}"
    );
    for line in result.lines() {
        let ok = [libc::EPERM, libc::EIO, libc::ENOTTY, libc::EACCES]
            .iter()
            .any(|e| line.ends_with(&format!("errno {e}")));
        assert!(ok, "TIOCSTI did not fail as expected: {line}");
    }
}

fn ptrace_cannot_attach_to_host_process(backend: &str) {
    let host = HostSleep::start();
    let fx = Fixture::new();
    let pid = host.pid();
    // Attach, then stay alive (a tracer's exit detaches) until the test has looked.
    let script = format!(
        r#"
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
r = libc.ptrace(16, {pid}, None, None)  # PTRACE_ATTACH
open("ready.tmp", "w").write("ptrace returned %d, errno %d" % (r, ctypes.get_errno()))
os.rename("ready.tmp", "ready")
for _ in range(600):
    if os.path.exists("release"):
        break
    time.sleep(0.05)
"#
    );
    let (tracer, state) = while_running(&fx, backend, &["python3", "-c", &script], || {
        (host.status_field("TracerPid"), host.status_field("State"))
    });
    let result = read(&fx.ws("ready"));
    assert_eq!(
        tracer, "0",
        "the sandbox attached to host process {pid} ({result})"
    );
    assert!(
        !state.starts_with('t'),
        "host process {pid} is being traced: {state}"
    );
}

// ---------------------------------------------------------------------------------------
// 13. The read-only profile

fn read_only_profile_keeps_workspace_unwritable(backend: &str) {
    let fx = Fixture::new();
    // The only host directory the command may write: how TMPDIR's contents get out.
    let out = fx.root.join("out");
    std::fs::create_dir(&out).unwrap();
    let mark = marker("read-only");
    let ran = fx
        .chitti(backend)
        .opts(&["-p", "read-only", "--writable"])
        .opt(&out)
        .sh(&format!(
            "echo x > new.txt; mkdir new-dir; echo x >> README; \
         echo {mark} > \"$TMPDIR/t\" && cp \"$TMPDIR/t\" '{o}/from-tmp'",
            o = out.display()
        ));
    assert_eq!(
        std::fs::read_to_string(out.join("from-tmp")).ok(),
        Some(format!("{mark}\n")),
        "TMPDIR must work under read-only:\n{ran}"
    );
    let entries: Vec<_> = std::fs::read_dir(&fx.ws).unwrap().flatten().collect();
    assert!(
        entries.is_empty(),
        "read-only wrote to the workspace: {entries:?}\n{ran}"
    );

    // A workspace beneath /tmp, which the sandbox gets fresh: still there to read and to
    // start in, still not writable.
    let in_tmp = tempfile::Builder::new()
        .prefix("chitti-ro-")
        .tempdir_in("/tmp")
        .unwrap();
    let ws = in_tmp.path().canonicalize().unwrap();
    std::fs::write(ws.join("notes"), format!("{mark}\n")).unwrap();
    std::fs::create_dir(ws.join("build")).unwrap();
    let ran = fx
        .chitti(backend)
        .workspace(&ws)
        .opts(&["-p", "read-only", "--writable"])
        .opt(&out)
        .opt("--writable")
        .opt(ws.join("build"))
        .sh(&format!(
            "cat notes > '{o}/from-ws'; pwd > '{o}/cwd'; echo x > new.txt; echo y > build/made",
            o = out.display()
        ));
    assert!(
        ws.join("build/made").exists(),
        "a writable root inside a read-only workspace in /tmp was not writable:\n{ran}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("from-ws")).ok(),
        Some(format!("{mark}\n")),
        "a read-only workspace in /tmp could not be read:\n{ran}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("cwd")).ok(),
        Some(format!("{}\n", ws.display())),
        "{ran}"
    );
    assert!(
        !ws.join("new.txt").exists(),
        "read-only wrote to the workspace:\n{ran}"
    );
}

/// `sandbox test --workspace DIR` probes DIR's file system in a directory of its own:
/// even unsandboxed, where every attack probe succeeds, DIR's repository is untouched.
#[test]
fn sandbox_test_with_a_workspace_leaves_its_repository_alone() {
    let fx = Fixture::new();
    fx.init_repo("initial");
    let before = (names_under(&fx.ws), fx.git(&["log", "--format=%H %s"]));
    let out = std::process::Command::new(chitti_bin())
        .args(["sandbox", "test", "--backend", "none", "--workspace"])
        .arg(&fx.ws)
        .env("HOME", &fx.home)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("checks passed"), "{stdout}");
    assert_eq!(
        (names_under(&fx.ws), fx.git(&["log", "--format=%H %s"])),
        before,
        "sandbox test changed the repository given as --workspace:\n{stdout}"
    );
    assert_eq!(fx.git(&["status", "--porcelain"]), "");
}

/// A directory for PATH holding every command of /usr/bin and /bin, by symbolic links,
/// except those `leave_out` names; `replace` points names at other programs.
fn path_dir(fx: &Fixture, leave_out: &[&str], replace: &[(&str, &str)]) -> PathBuf {
    let dir = fx.root.join("path");
    std::fs::create_dir(&dir).unwrap();
    for (name, target) in replace {
        std::os::unix::fs::symlink(target, dir.join(name)).unwrap();
    }
    for bin in ["/usr/bin", "/bin"] {
        for entry in std::fs::read_dir(bin).unwrap().flatten() {
            let name = entry.file_name();
            let name_str = name.to_string_lossy();
            let left_out = leave_out.iter().any(|l| name_str.starts_with(l));
            if !left_out && !dir.join(&name).exists() && dir.join(&name).symlink_metadata().is_err()
            {
                std::os::unix::fs::symlink(entry.path(), dir.join(&name)).unwrap();
            }
        }
    }
    dir
}

fn sandbox_test_with_path(fx: &Fixture, path: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(chitti_bin())
        .args(["sandbox", "test"])
        .args(args)
        .current_dir(&fx.ws)
        .env("HOME", &fx.home)
        .env("PATH", path)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// A sandbox in which no command runs gives no verdict at all (exit 125), rather than a
/// table in which every attack "failed" because nothing ran.
#[test]
fn sandbox_test_gives_no_verdict_when_nothing_runs_in_the_sandbox() {
    let fx = Fixture::new();
    let path = path_dir(&fx, &[], &[("sh", "/bin/false")]);
    let out = sandbox_test_with_path(&fx, &path, &[]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(125), "{stdout}\n{stderr}");
    assert!(!stdout.contains("PASS"), "{stdout}");
    assert!(stderr.contains("nothing was checked"), "{stderr}");
}

/// Probes that need python3 in the sandbox say SKIP, with why, when it is missing; the
/// run then does not pass, and says the profile is not proven (not that it failed).
#[test]
fn sandbox_test_skips_loudly_what_it_cannot_check_and_does_not_pass() {
    let fx = Fixture::new();
    let path = path_dir(&fx, &["python"], &[]);
    let out = sandbox_test_with_path(&fx, &path, &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let skipped: Vec<&str> = stdout.lines().filter(|l| l.contains(" SKIP ")).collect();
    assert!(skipped.len() >= 8, "{stdout}");
    assert!(
        skipped.iter().all(|l| l.contains("python3 does not run")),
        "{stdout}"
    );
    assert!(!stdout.contains(" FAIL "), "{stdout}");
    assert!(stdout.contains("NOT proven on this machine"), "{stdout}");
}

/// A probe counts only when it shows it made its attempt: without `setsid` the lifetime
/// probe cannot start the children whose death it checks, and says so (FAIL), instead of
/// passing because none were left.
#[test]
fn sandbox_test_does_not_pass_a_probe_that_could_not_make_its_attempt() {
    for backend in ["bwrap", "landlock"] {
        ensure_backend(backend);
        let fx = Fixture::new();
        let path = path_dir(&fx, &["setsid"], &[]);
        let out = sandbox_test_with_path(&fx, &path, &["--backend", backend]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{backend}: {stdout}");
        let row = stdout
            .lines()
            .find(|l| l.starts_with("lifetime: nothing outlives the call"))
            .unwrap_or_else(|| panic!("{backend}: no lifetime row: {stdout}"));
        assert!(
            row.contains(" FAIL ") && row.contains("did not start"),
            "{backend}: {row}"
        );
    }
}

/// The read-only profile on bwrap in a workspace beneath /tmp (which bwrap replaces with
/// a fresh tmpfs) is proven like any other.
#[test]
fn sandbox_test_proves_read_only_on_bwrap_in_a_tmp_workspace() {
    ensure_backend("bwrap");
    let fx = Fixture::new();
    let ws = tempfile::Builder::new()
        .prefix("chitti-ro-test-")
        .tempdir_in("/tmp")
        .unwrap();
    let out = std::process::Command::new(chitti_bin())
        .args([
            "sandbox",
            "test",
            "--backend",
            "bwrap",
            "-p",
            "read-only",
            "--workspace",
        ])
        .arg(ws.path())
        .env("HOME", &fx.home)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains(" FAIL ") && !stdout.contains(" SKIP "),
        "{stdout}"
    );
}

/// `sandbox profile` shows what a call gets: one seccomp descriptor and the status
/// descriptor (as `prepare` passes them), the caller's directory inside the workspace, and
/// for `auto` the backend this machine would pick.
#[test]
fn sandbox_profile_shows_the_real_call() {
    let fx = Fixture::new();
    std::fs::create_dir(fx.ws("src")).unwrap();
    let profile = |backend: &str| {
        let out = std::process::Command::new(chitti_bin())
            .args(["sandbox", "profile", "--backend", backend, "-w"])
            .arg(&fx.ws)
            .current_dir(fx.ws("src"))
            .env("HOME", &fx.home)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let bwrap = profile("bwrap");
    assert_eq!(bwrap.matches("--add-seccomp-fd").count(), 1, "{bwrap}");
    assert!(bwrap.contains("--json-status-fd"), "{bwrap}");
    let chdir = format!("--chdir {}", fx.ws("src").canonicalize().unwrap().display());
    assert!(bwrap.contains(&chdir), "{bwrap}");
    let auto = profile("auto");
    assert!(
        auto.contains("auto picks bwrap") || auto.contains("auto picks landlock"),
        "{auto}"
    );
}
