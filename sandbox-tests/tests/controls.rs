//! Positive controls: what must keep working inside the sandbox on both backends —
//! builds, pipes, git, temporary files, exit codes, large, unicode and binary output,
//! stdin, the working directory, socketpair and multiprocessing. Each is checked on the
//! host where it can be (the file appeared, the bytes match).

use std::path::Path;

use sandbox_tests::*;

fn expect_code(ran: &Ran, code: i32, what: &str) {
    assert_eq!(ran.code, Some(code), "{what}: expected exit {code}\n{ran}");
}

#[backends]
fn control_build_c_program_with_cc(backend: &str) {
    require_tool("cc");
    let fx = Fixture::new();
    write(
        &fx.ws("src/hello.c"),
        "#include <stdio.h>\nint main(void) { printf(\"hello from a sandboxed build\\n\"); return 0; }\n",
    );
    write(
        &fx.ws("build.sh"),
        "set -e\nmkdir -p out\ncc -O1 -Wall -o out/hello src/hello.c\n./out/hello\n",
    );
    let ran = fx.chitti(backend).run(&["sh", "build.sh"]);
    expect_code(&ran, 0, "cc build");
    assert!(
        ran.stdout_str().contains("hello from a sandboxed build"),
        "{ran}"
    );
    // The artefact is real: it runs on the host too.
    let host = std::process::Command::new(fx.ws("out/hello"))
        .output()
        .expect("run the built binary on the host");
    assert_eq!(
        String::from_utf8_lossy(&host.stdout),
        "hello from a sandboxed build\n"
    );
}

#[backends]
fn control_python_build_bytecode_and_zipapp(backend: &str) {
    let fx = Fixture::new();
    write(
        &fx.ws("pkg/app.py"),
        "def main():\n    print('zipapp says hi')\n",
    );
    let ran = fx.chitti(backend).sh(&format!(
        "set -e; {PYTHON} -m compileall -q pkg; {PYTHON} -m zipapp pkg -o app.pyz -m app:main; {PYTHON} app.pyz"
    ));
    expect_code(&ran, 0, "python build");
    assert!(ran.stdout_str().contains("zipapp says hi"), "{ran}");
    assert!(fx.ws("app.pyz").is_file(), "app.pyz not on the host\n{ran}");
    assert!(
        fx.ws("pkg/__pycache__").is_dir(),
        "__pycache__ not on the host\n{ran}"
    );
}

#[backends]
fn control_pipeline_seq_sort_tail(backend: &str) {
    let fx = Fixture::new();
    let ran = fx
        .chitti(backend)
        .sh("seq 100000 | sort -n | tail -1; seq 100000 | sort -rn | head -1 | tr 0 x; yes | head -3 | wc -l");
    expect_code(&ran, 0, "pipeline");
    assert_eq!(ran.stdout_str(), "100000\n1xxxxx\n3\n", "{ran}");
}

#[backends]
fn control_git_init_add_commit_lands_on_host(backend: &str) {
    require_tool("git");
    let fx = Fixture::new();
    let ran = fx.chitti(backend).sh(&format!(
        "set -e; git init -q -b main; echo content > file.txt; git add file.txt; \
         {SANDBOX_GIT} commit -qm from-the-sandbox; git log --oneline"
    ));
    expect_code(&ran, 0, "git init/add/commit");
    let log = fx.git(&["log", "--format=%s"]);
    assert_eq!(log, "from-the-sandbox\n", "{ran}");
    assert_eq!(fx.git(&["show", "HEAD:file.txt"]), "content\n");
}

/// A linked worktree as the workspace: git writes its own git directory and the main
/// repository's objects and refs (both outside the workspace), and nothing looks tampered.
#[backends]
fn control_git_commit_in_linked_worktree(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let wt = fx.root.join("wt");
    fx.git(&["worktree", "add", "-q", wt.to_str().unwrap()]);
    let ran = fx.chitti(backend).workspace(&wt).sh(&format!(
        "set -e; echo more >> README; git add README; {SANDBOX_GIT} commit -qm in-worktree; \
         git status --short; git log --oneline | wc -l"
    ));
    expect_code(&ran, 0, "git in a linked worktree");
    assert_eq!(
        fx.git(&["log", "--format=%s", "wt"]),
        "in-worktree\ninitial\n",
        "{ran}"
    );
    assert!(
        !ran.stderr_str().contains("tampered"),
        "ordinary git use must not look like tampering\n{ran}"
    );
}

#[backends]
fn control_git_commit_in_protected_repo(backend: &str) {
    let fx = Fixture::new();
    fx.init_repo();
    let config = std::fs::read(fx.ws(".git/config")).unwrap();
    let hooks = tree(&fx.ws(".git/hooks"));
    let ran = fx.chitti(backend).sh(&format!(
        "set -e; echo more >> README; git status --short; git diff --stat; git add README; \
         {SANDBOX_GIT} commit -qm sandboxed-change; git branch topic; git log --oneline | wc -l; \
         git stash list; git tag v1"
    ));
    expect_code(&ran, 0, "git in a protected repository");
    assert_eq!(
        fx.git(&["log", "--format=%s"]),
        "sandboxed-change\ninitial\n",
        "{ran}"
    );
    assert!(
        fx.git(&["branch", "--list", "topic"]).contains("topic"),
        "{ran}"
    );
    assert_eq!(
        std::fs::read(fx.ws(".git/config")).unwrap(),
        config,
        "{ran}"
    );
    assert_eq!(tree(&fx.ws(".git/hooks")), hooks, "{ran}");
    assert!(
        !ran.stderr_str().contains("tampered"),
        "ordinary git use must not look like tampering\n{ran}"
    );
}

#[backends]
fn control_tmpdir_files_work(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).sh(&format!(
        "set -e; test -n \"$TMPDIR\"; echo data > \"$TMPDIR/f\"; cat \"$TMPDIR/f\"; \
         d=$(mktemp -d); echo inner > \"$d/x\"; cat \"$d/x\"; f=$(mktemp); echo \"$f\" > tmp-path; \
         {PYTHON} -c 'import tempfile; t = tempfile.NamedTemporaryFile(); t.write(b\"py\"); t.flush(); print(open(t.name).read())'"
    ));
    expect_code(&ran, 0, "temporary files");
    assert_eq!(ran.stdout_str(), "data\ninner\npy\n", "{ran}");
    // The private temporary directory does not leak onto the host.
    let tmp_path = read(&fx.ws("tmp-path"));
    assert!(
        !Path::new(tmp_path.trim()).exists(),
        "the sandbox's temporary file {} is visible on the host after the call\n{ran}",
        tmp_path.trim()
    );
}

#[backends]
fn control_exit_codes_propagate(backend: &str) {
    let fx = Fixture::new();
    for code in [0, 1, 2, 42, 99, 255] {
        let ran = fx.chitti(backend).sh(&format!("exit {code}"));
        expect_code(&ran, code, "sh -c 'exit N'");
    }
    let ran = fx.chitti(backend).json().sh("echo out; exit 42");
    expect_code(&ran, 42, "--json exit 42");
    assert_eq!(ran.json()["exit_code"], serde_json::json!(42), "{ran}");
    assert_eq!(ran.json()["stdout"], serde_json::json!("out\n"), "{ran}");
}

#[backends]
fn control_exit_code_137_for_sigkill(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).sh("kill -9 $$");
    expect_code(&ran, 137, "kill -9 $$");
    let ran = fx.chitti(backend).json().sh("kill -9 $$");
    expect_code(&ran, 137, "kill -9 $$ with --json");
    assert_eq!(ran.json()["exit_code"], serde_json::json!(137), "{ran}");
}

#[backends]
fn control_exit_code_127_for_missing_command(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).run(&["no-such-command-chitti-test"]);
    expect_code(&ran, 127, "missing command");
    let ran = fx.chitti(backend).sh("no-such-command-chitti-test");
    expect_code(&ran, 127, "missing command inside sh");
    let ran = fx.chitti(backend).json().run(&["./missing-file"]);
    expect_code(&ran, 127, "missing file with --json");
    assert_eq!(ran.json()["exit_code"], serde_json::json!(127), "{ran}");
}

#[backends]
fn control_exit_code_126_for_non_executable(backend: &str) {
    let fx = Fixture::new();
    write(&fx.ws("script.sh"), "#!/bin/sh\necho should-not-run\n");
    set_mode(&fx.ws("script.sh"), 0o644);
    let ran = fx.chitti(backend).run(&["./script.sh"]);
    expect_code(&ran, 126, "non-executable file");
    assert!(!ran.stdout_str().contains("should-not-run"), "{ran}");
    let ran = fx.chitti(backend).sh("./script.sh");
    expect_code(&ran, 126, "non-executable file inside sh");
}

#[backends]
fn control_large_output_json_head_tail(backend: &str) {
    let fx = Fixture::new();
    let expected: String = (1..=200_000).map(|i| format!("{i}\n")).collect();
    let ran = fx
        .chitti(backend)
        .json()
        .opts(&["--max-output", "4096"])
        .sh("seq 1 200000; seq 1 50000 >&2");
    expect_code(&ran, 0, "large output with --json");
    let json = ran.json();
    let stdout = json["stdout"].as_str().unwrap();
    assert!(
        stdout.starts_with(&expected[..2048]),
        "head not kept: {}",
        &stdout[..100]
    );
    assert!(
        stdout.ends_with(&expected[expected.len() - 2048..]),
        "tail not kept: {}",
        &stdout[stdout.len() - 100..]
    );
    assert!(stdout.contains("bytes cut here"), "no cut marker");
    assert_eq!(
        json["stdout_truncated_bytes"].as_u64(),
        Some(expected.len() as u64 - 4096),
        "{}",
        json["stdout_truncated_bytes"]
    );
    let stderr_total: usize = (1..=50_000).map(|i| format!("{i}\n").len()).sum();
    assert_eq!(
        json["stderr_truncated_bytes"].as_u64(),
        Some(stderr_total as u64 - 4096)
    );
    assert_eq!(json["backend"], serde_json::json!(backend));
    assert_eq!(json["timed_out"], serde_json::json!(false));
}

#[backends]
fn control_large_output_streaming_complete(backend: &str) {
    let fx = Fixture::new();
    let ran = fx
        .chitti(backend)
        .sh("head -c 20000000 /dev/zero | tr '\\0' a; seq 1 100000 >&2");
    expect_code(&ran, 0, "20 MB of streamed output");
    assert_eq!(ran.stdout.len(), 20_000_000, "stdout length");
    assert!(ran.stdout.iter().all(|b| *b == b'a'), "stdout bytes");
    let expected: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    assert_eq!(ran.stderr_str(), expected, "stderr");
}

const UNICODE: &str = "héllo wörld ✓ — 日本語テキスト, Ελληνικά, עברית, emoji 🚀🦀, combining e\u{301}, zero-width\u{200b}joiner\n";

#[backends]
fn control_unicode_output_roundtrip(backend: &str) {
    let fx = Fixture::new();
    // The text travels as an argument (UTF-8 bytes) and is printed back from Python.
    let script = "import sys; t = sys.argv[1]; sys.stdout.buffer.write(t.encode()); sys.stderr.buffer.write(t.encode())";
    let ran = fx.chitti(backend).py(script, &[UNICODE]);
    expect_code(&ran, 0, "unicode output");
    assert_eq!(ran.stdout_str(), UNICODE, "streamed stdout");
    assert_eq!(ran.stderr_str(), UNICODE, "streamed stderr");
    let ran = fx.chitti(backend).json().py(script, &[UNICODE]);
    assert_eq!(
        ran.json()["stdout"],
        serde_json::json!(UNICODE),
        "--json stdout"
    );
    // Arguments and file names survive too.
    let ran = fx.chitti(backend).run(&[
        "sh",
        "-c",
        "printf '%s\\n' \"$1\" > \"$1.txt\"; cat \"$1.txt\"",
        "sh",
        "日本語-ünï",
    ]);
    assert_eq!(ran.stdout_str(), "日本語-ünï\n", "{ran}");
    assert_eq!(read(&fx.ws("日本語-ünï.txt")), "日本語-ünï\n");
}

#[backends]
fn control_binary_output_roundtrip(backend: &str) {
    let fx = Fixture::new();
    let expected: Vec<u8> = (0..256 * 64)
        .map(|i| (i % 256) as u8)
        .chain([0u8, 0xff, 0xfe, 0x80])
        .collect();
    let ran = fx.chitti(backend).py(
        "import sys; sys.stdout.buffer.write(bytes(i % 256 for i in range(256 * 64)) + b'\\x00\\xff\\xfe\\x80')",
        &[],
    );
    expect_code(&ran, 0, "binary output");
    assert!(
        ran.stdout == expected,
        "binary stdout differs ({} bytes vs {})",
        ran.stdout.len(),
        expected.len()
    );
    // And a binary file written in the sandbox is byte-identical on the host.
    let ran = fx
        .chitti(backend)
        .sh("head -c 65536 /dev/urandom > random.bin; od -An -tx1 -v random.bin | tr -d ' \\n'");
    let on_host = std::fs::read(fx.ws("random.bin")).unwrap();
    let hex: String = on_host.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        ran.stdout_str(),
        hex,
        "the file's bytes differ between sandbox and host"
    );
}

#[backends]
fn control_stdin_piped_data_reaches_command(backend: &str) {
    let fx = Fixture::new();
    let data: Vec<u8> = (0..(1 << 20)).map(|i| ((i * 7 + 3) % 256) as u8).collect();
    let ran = fx
        .chitti(backend)
        .stdin(data.clone())
        .sh("cat > received.bin; wc -c < received.bin");
    expect_code(&ran, 0, "stdin");
    assert_eq!(ran.stdout_str().trim(), (1 << 20).to_string(), "{ran}");
    assert!(
        std::fs::read(fx.ws("received.bin")).unwrap() == data,
        "stdin bytes differ"
    );
    let ran = fx
        .chitti(backend)
        .stdin("line one\nline two\n")
        .sh("while read l; do echo \"got: $l\"; done");
    assert_eq!(ran.stdout_str(), "got: line one\ngot: line two\n", "{ran}");
}

#[backends]
fn control_cwd_is_callers_directory_inside_workspace(backend: &str) {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.ws("a/b")).unwrap();
    let ran = fx
        .chitti(backend)
        .cwd(fx.ws("a/b"))
        .sh("pwd -P; echo here > here.txt");
    assert_eq!(
        ran.stdout_str().trim(),
        fx.ws("a/b").display().to_string(),
        "{ran}"
    );
    assert!(fx.ws("a/b/here.txt").is_file(), "{ran}");
    // From outside the workspace, the command runs in the workspace root.
    let ran = fx.chitti(backend).cwd(&fx.outside).sh("pwd -P");
    assert_eq!(
        ran.stdout_str().trim(),
        fx.ws.display().to_string(),
        "{ran}"
    );
}

#[backends]
fn control_socketpair_works(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).py(
        r#"
import socket, os
a, b = socket.socketpair()
a.sendall(b"ping"); print(b.recv(4).decode())
c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
c.send(b"seq"); print(d.recv(3).decode())
r, w = os.pipe(); os.write(w, b"pipe"); print(os.read(r, 4).decode())
"#,
        &[],
    );
    expect_code(&ran, 0, "socketpair");
    assert_eq!(ran.stdout_str(), "ping\nseq\npipe\n", "{ran}");
}

#[backends]
fn control_python_multiprocessing_pipe(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).py(
        r#"
import multiprocessing as mp
def child(conn):
    conn.send(("from-child", 6 * 7)); conn.close()
if __name__ == "__main__":
    a, b = mp.Pipe()
    p = mp.Process(target=child, args=(b,)); p.start()
    print(*a.recv()); p.join(); print("exit", p.exitcode)
"#,
        &[],
    );
    expect_code(&ran, 0, "multiprocessing.Pipe");
    assert_eq!(ran.stdout_str(), "from-child 42\nexit 0\n", "{ran}");
}

/// multiprocessing.Pool / Queue / Lock need POSIX semaphores (/dev/shm).
#[backends]
fn control_python_multiprocessing_pool_and_queue(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).py(
        r#"
import multiprocessing as mp
def square(x):
    return x * x
if __name__ == "__main__":
    with mp.Pool(2) as pool:
        print(sum(pool.map(square, range(10))))
    q = mp.Queue(); q.put("queued"); print(q.get(timeout=10))
    lock = mp.Lock()
    with lock:
        print("locked")
"#,
        &[],
    );
    if backend == "landlock" {
        // POSIX semaphores live in /dev/shm, which is shared with the host; the landlock
        // backend cannot give the command a private one, so it grants none (a user's
        // command finds it unwritable; root's, whose minimal /dev has no shm, finds none).
        known_limit(
            backend,
            "multiprocessing Pool/Queue/Lock (POSIX semaphores need /dev/shm)",
        );
        let stderr = ran.stderr_str();
        assert!(
            stderr.contains("PermissionError") || stderr.contains("FileNotFoundError"),
            "{ran}"
        );
        return;
    }
    expect_code(&ran, 0, "multiprocessing.Pool/Queue/Lock");
    assert_eq!(ran.stdout_str(), "285\nqueued\nlocked\n", "{ran}");
}

#[backends]
fn control_workspace_write_lands_on_host(backend: &str) {
    let fx = Fixture::new();
    write(&fx.ws("old-name"), "renamed\n");
    write(&fx.ws("doomed"), "x");
    let ran = fx.chitti(backend).sh(
        "set -e; echo written > new.txt; mkdir -p d/e/f; echo deep > d/e/f/x; mv old-name new-name; \
         rm doomed; ln -s new.txt link; ln new.txt hard; mv d moved-d; chmod +x new.txt; \
         dd if=/dev/zero of=big.bin bs=1M count=64 2>/dev/null",
    );
    expect_code(&ran, 0, "workspace writes");
    assert_eq!(read(&fx.ws("new.txt")), "written\n");
    assert_eq!(read(&fx.ws("moved-d/e/f/x")), "deep\n");
    assert_eq!(read(&fx.ws("new-name")), "renamed\n");
    assert!(!exists(&fx.ws("doomed")));
    assert_eq!(
        std::fs::read_link(fx.ws("link")).unwrap(),
        Path::new("new.txt")
    );
    assert_eq!(file_state(&fx.ws("hard")).unwrap().nlink, 2);
    assert_eq!(file_state(&fx.ws("new.txt")).unwrap().mode & 0o111, 0o111);
    assert_eq!(std::fs::metadata(fx.ws("big.bin")).unwrap().len(), 64 << 20);
}

#[backends]
fn control_read_outside_and_system_files(backend: &str) {
    let fx = Fixture::new();
    let m = marker("readable");
    write(&fx.outside("readme"), &m);
    let ran = fx.chitti(backend).sh(&format!(
        "cat {}; test -r /etc/passwd && echo passwd-ok; ls /usr/bin | grep -qx sh && echo ls-ok",
        sh_quote(fx.outside("readme"))
    ));
    expect_code(&ran, 0, "reading outside files");
    assert_eq!(ran.stdout_str(), format!("{m}passwd-ok\nls-ok\n"), "{ran}");
}

#[backends]
fn control_extra_writable_root(backend: &str) {
    let fx = Fixture::new();
    let extra = fx.outside("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let ran = fx
        .chitti(backend)
        .opt("--writable")
        .opt(&extra)
        .sh(&format!("echo extra > {}/file", sh_quote(&extra)));
    expect_code(&ran, 0, "--writable");
    assert_eq!(read(&extra.join("file")), "extra\n");
}

#[backends]
fn control_environment_allow_list(backend: &str) {
    let fx = Fixture::new();
    let ran = fx
        .chitti(backend)
        .env("TERM", "xterm-256color")
        .env("LC_ALL", "C.UTF-8")
        .sh("echo \"PATH=$PATH\"; echo \"HOME=$HOME\"; echo \"LANG=$LANG\"; echo \"TERM=$TERM\"; echo \"LC_ALL=$LC_ALL\"; echo \"SANDBOX=$CHITTI_SANDBOX\"; test -d \"$TMPDIR\" && echo tmpdir-ok");
    expect_code(&ran, 0, "environment");
    assert_eq!(
        ran.stdout_str(),
        format!(
            "PATH={PATH}\nHOME={}\nLANG=C.UTF-8\nTERM=xterm-256color\nLC_ALL=C.UTF-8\nSANDBOX={backend}\ntmpdir-ok\n",
            fx.home.display()
        ),
        "{ran}"
    );
}

#[backends]
fn control_devices_null_zero_urandom(backend: &str) {
    let fx = Fixture::new();
    let ran = fx.chitti(backend).sh(
        "echo discard > /dev/null && echo null-ok; head -c 16 /dev/urandom | wc -c; head -c 4 /dev/zero | od -An -tx1 | tr -d ' '; \
         head -c 8 /dev/random | wc -c; (echo x > /dev/full) 2>/dev/null || echo full-ok",
    );
    expect_code(&ran, 0, "devices");
    assert_eq!(
        ran.stdout_str(),
        "null-ok\n16\n00000000\n8\nfull-ok\n",
        "{ran}"
    );
}

#[backends]
fn control_background_jobs_and_wait(backend: &str) {
    let fx = Fixture::new();
    let ran = fx
        .chitti(backend)
        .sh("(sleep 0.2; echo bg-done) & (sleep 0.1; echo bg2-done) & wait; echo fg-done");
    expect_code(&ran, 0, "background jobs");
    assert_eq!(ran.stdout_str(), "bg2-done\nbg-done\nfg-done\n", "{ran}");
}
