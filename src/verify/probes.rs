//! The probes. Each runs something real inside the sandbox and decides by what can be
//! seen from outside: a file on the host, a host listener's connections, a host process,
//! /proc of the sandboxed process read by chitti, or a decoy secret in the output.

use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::time::{Duration, Instant};

use super::lab::{find_processes, status_field, Decoy, Lab, DECOYS};
use super::Check;
use crate::exec::Outcome;

fn text(o: &Outcome) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout.bytes),
        String::from_utf8_lossy(&o.stderr.bytes)
    )
}

fn check(
    name: &str,
    promise: impl Into<String>,
    observed: impl Into<String>,
    passed: bool,
) -> Check {
    Check {
        name: name.to_string(),
        promise: promise.into(),
        observed: observed.into(),
        passed,
        not_applicable: false,
        skipped: false,
    }
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// A number no other process on the host has in its command line.
fn unique(lab: &Lab, salt: u32) -> String {
    let n = lab
        .marker
        .bytes()
        .fold(salt, |a, b| a.wrapping_mul(31).wrapping_add(b as u32));
    format!("{}.{:06}", 100 + salt, n % 1_000_000)
}

async fn run(lab: &Lab, script: &str) -> Result<Outcome, String> {
    lab.run(script).await.map_err(|e| e.to_string())
}

/// Runs an attack's `script`, then prints a marker: None when the marker came back (the
/// attempt was made, whatever it achieved), else why not, so that an attack whose effect
/// is absent counts as denied only when it was tried.
async fn attempt(lab: &Lab, script: &str) -> Option<String> {
    attempt_and_output(lab, script).await.0
}

/// [`attempt`], and what the script printed (without the marker). The marker does not
/// hold the lab's marker, which the decoy secrets carry: output that has the latter
/// leaked a secret.
async fn attempt_and_output(lab: &Lab, script: &str) -> (Option<String>, String) {
    let marker = format!("chitti-probe-tried-{}", unique(lab, 4));
    match run(lab, &format!("{script}\necho {marker}")).await {
        Ok(o) => {
            let output = text(&o);
            let not_tried = (!output.contains(&marker))
                .then(|| format!("the probe did not run: {}", output.trim()));
            (not_tried, output.replace(&marker, ""))
        }
        Err(e) => (Some(format!("sandbox error: {e}")), String::new()),
    }
}

/// A denial check: passed when the attempt was made and `escaped` is false.
fn denied(
    name: &str,
    promise: &str,
    not_tried: Option<String>,
    escaped: bool,
    seen: (&str, &str),
) -> Check {
    let (escaped_text, safe_text) = seen;
    let observed = match (&not_tried, escaped) {
        (_, true) => escaped_text.to_string(),
        (Some(why), false) => why.clone(),
        (None, false) => safe_text.to_string(),
    };
    check(name, promise, observed, not_tried.is_none() && !escaped)
}

pub async fn writes(lab: &Lab, out: &mut Vec<Check>) {
    let ws_writable = lab.workspace_writable();
    let target = lab.workspace.join("probe-write");
    let r = run(lab, "echo probe > probe-write").await;
    let wrote = exists(&target);
    let _ = std::fs::remove_file(&target);
    out.push(check(
        "write: workspace",
        if ws_writable {
            "writable"
        } else {
            "read-only (profile)"
        },
        match (&r, wrote) {
            (Err(e), _) => format!("sandbox error: {e}"),
            (_, true) => "file appeared on the host".into(),
            (_, false) => "no file on the host".into(),
        },
        r.is_ok() && wrote == ws_writable,
    ));

    let direct = lab.outside.join("direct");
    let tried = attempt(lab, &format!("echo x > '{}'", direct.display())).await;
    out.push(denied(
        "write: outside the workspace",
        "denied",
        tried,
        exists(&direct),
        ("file appeared on the host", "no file on the host"),
    ));

    let link = lab.workspace.join("probe-link-out");
    let _ = std::os::unix::fs::symlink(&lab.outside, &link);
    let via = lab.outside.join("via-symlink");
    let tried = attempt(lab, "echo x > probe-link-out/via-symlink").await;
    let _ = std::fs::remove_file(&link);
    out.push(denied(
        "write: through a symlink to outside",
        "denied",
        tried,
        exists(&via),
        ("file appeared outside", "no file outside"),
    ));

    let dotdot = lab.workspace.join("../probe-dotdot");
    let tried = attempt(
        lab,
        "echo x > ../probe-dotdot; echo x > ../../outside/dotdot",
    )
    .await;
    let escaped = exists(&dotdot) || exists(&lab.outside.join("dotdot"));
    out.push(denied(
        "write: via ..",
        "denied",
        tried,
        escaped,
        ("file appeared outside", "no file outside"),
    ));

    // Absolute paths into the lab only: a probe must be harmless even unsandboxed.
    let rc = lab.home.join(".bashrc");
    let tried = attempt(lab, &format!("echo 'echo pwned' >> '{}'", rc.display())).await;
    out.push(denied(
        "write: home directory (~/.bashrc)",
        "denied",
        tried,
        exists(&rc),
        ("~/.bashrc was written", "~/.bashrc untouched"),
    ));

    // A sysctl of the whole host that uid 0 may write by file mode alone (as
    // `kernel.core_pattern`, which runs a program as root outside every namespace): a
    // harmless one, put back at once should it change.
    let burst = Path::new("/proc/sys/kernel/printk_ratelimit_burst");
    if let Ok(before) = std::fs::read_to_string(burst) {
        let raised = before.trim().parse::<u64>().unwrap_or(10) + 1;
        let tried = attempt(lab, &format!("echo {raised} > {}", burst.display())).await;
        let now = std::fs::read_to_string(burst).unwrap_or_default();
        if now != before {
            let _ = std::fs::write(burst, &before);
        }
        out.push(denied(
            "write: the host's kernel settings (/proc/sys)",
            "denied",
            tried,
            now != before,
            ("the host's sysctl changed", "the host's sysctl unchanged"),
        ));
    }

    let host_tmp = Path::new("/tmp").join(format!("{}-tmp", lab.marker));
    let r = run(
        lab,
        &format!(
            // Without a TMPDIR (an unsandboxed run) the file would land in `/`.
            "echo x > /tmp/{m}-tmp 2>/dev/null; [ -n \"$TMPDIR\" ] && echo x > \"$TMPDIR/{m}-tmpdir\" && cat \"$TMPDIR/{m}-tmpdir\" >/dev/null && echo tmpdir-ok",
            m = lab.marker
        ),
    )
    .await;
    let tmpdir_ok = r
        .as_ref()
        .map(|o| text(o).contains("tmpdir-ok"))
        .unwrap_or(false);
    let leaked = exists(&host_tmp);
    let _ = std::fs::remove_file(&host_tmp);
    out.push(check(
        "write: private temporary directory",
        "TMPDIR writable, host /tmp untouched",
        format!(
            "TMPDIR {}, host /tmp {}",
            if tmpdir_ok {
                "writable"
            } else {
                "NOT writable"
            },
            if leaked { "WRITTEN" } else { "untouched" }
        ),
        tmpdir_ok && !leaked,
    ));
}

pub async fn git(lab: &Lab, out: &mut Vec<Check>) {
    let git_dir = lab.workspace.join(".git");
    if !git_dir.is_dir() {
        out.push(Check::not_applicable(
            "git: protected paths",
            "the workspace has no .git directory",
        ));
        return;
    }
    let hook = git_dir.join("hooks/pre-commit");
    let tried = attempt(lab, "printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit").await;
    out.push(denied(
        "git: .git/hooks read-only",
        "no hook can be planted",
        tried,
        exists(&hook),
        ("a hook appeared on the host", "no hook on the host"),
    ));

    let config_before = std::fs::read(git_dir.join("config")).unwrap_or_default();
    let tried = attempt(
        lab,
        "git config core.fsmonitor 'echo pwned' 2>/dev/null; printf '[alias]\\n\\tst = !echo pwned\\n' >> .git/config",
    )
    .await;
    let config_after = std::fs::read(git_dir.join("config")).unwrap_or_default();
    out.push(denied(
        "git: .git/config read-only",
        "unchanged after the call",
        tried,
        config_after != config_before,
        ("CHANGED", "unchanged"),
    ));

    let head_before = std::fs::read(git_dir.join("HEAD")).unwrap_or_default();
    let tried = attempt(
        lab,
        "mv .git .git-moved 2>/dev/null; mkdir -p .git/hooks && printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/post-checkout",
    )
    .await;
    let replaced = exists(&git_dir.join("hooks/post-checkout"))
        || exists(&lab.workspace.join(".git-moved"))
        || std::fs::read(git_dir.join("HEAD")).unwrap_or_default() != head_before;
    out.push(denied(
        "git: .git cannot be moved and replaced",
        "the original .git is in place, no new hooks",
        tried,
        replaced,
        ("replaced or moved", "original in place"),
    ));

    let writable = lab.workspace_writable();
    let _ = run(
        lab,
        "echo change >> README && git add README && git -c user.name=probe -c user.email=probe@localhost commit -qm sandboxed-commit",
    )
    .await;
    let log = std::process::Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(&lab.workspace)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let committed = log.contains("sandboxed-commit");
    out.push(check(
        "git: add and commit work",
        if writable {
            "commit lands"
        } else {
            "no commit (read-only profile)"
        },
        if committed {
            "commit in the host's git log"
        } else {
            "no commit in the host's git log"
        },
        committed == writable,
    ));
}

pub async fn reads(lab: &Lab, out: &mut Vec<Check>) {
    for group in ["ssh", "cloud", "tokens", "chitti"] {
        let files: Vec<String> = DECOYS
            .iter()
            .filter(|(_, g)| *g == group)
            .map(|(rel, _)| format!("'{}'", lab.home.join(rel).display()))
            .collect();
        let (not_tried, output) = attempt_and_output(
            lab,
            &format!(
                "cat {} 2>&1; ls -la {} 2>&1",
                files.join(" "),
                files.join(" ")
            ),
        )
        .await;
        // The decoys hold the lab's marker.
        let leaked = output.contains(&lab.marker);
        let name = match group {
            "ssh" => "read: ssh and gpg keys",
            "cloud" => "read: cloud credentials (aws, azure, gcloud, kube, docker)",
            "tokens" => "read: tokens (netrc, git, gh, npm, pypi, cargo)",
            _ => "read: chitti's own config",
        };
        out.push(denied(
            name,
            "unreadable",
            not_tried,
            leaked,
            (
                "decoy secret LEAKED into the output",
                "decoy secret not in the output",
            ),
        ));
    }
    let r = run(
        lab,
        &format!("cat '{}'", lab.home.join("notes.txt").display()),
    )
    .await;
    let readable = r
        .as_ref()
        .map(|o| text(o).contains(&lab.marker))
        .unwrap_or(false);
    out.push(check(
        "read: ordinary files outside the workspace",
        "readable",
        if readable { "readable" } else { "NOT readable" },
        readable,
    ));

    let mut devices = vec!["/dev/mem".to_string(), "/proc/kcore".to_string()];
    if let Ok(entries) = std::fs::read_dir("/dev") {
        use std::os::unix::fs::FileTypeExt;
        for e in entries.flatten() {
            if e.file_type().map(|t| t.is_block_device()).unwrap_or(false) {
                devices.push(e.path().display().to_string());
            }
        }
    }
    let script = devices
        .iter()
        .map(|d| {
            format!(
                "n=$(head -c 16 '{d}' 2>/dev/null | wc -c); [ \"$n\" -gt 0 ] && echo \"READ {d}\""
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let r = run(lab, &format!("{script}; true")).await;
    let read: Vec<String> = r
        .as_ref()
        .map(|o| {
            text(o)
                .lines()
                .filter(|l| l.starts_with("READ "))
                .map(|l| l[5..].to_string())
                .collect()
        })
        .unwrap_or_default();
    out.push(check(
        "read: raw disks, /dev/mem, /proc/kcore",
        "unreadable",
        if read.is_empty() {
            format!("no data from {} devices", devices.len())
        } else {
            format!("data read from {}", read.join(", "))
        },
        r.is_ok() && read.is_empty(),
    ));
}

const PY_CONNECT: &str = "import socket,sys
fam={'4':socket.AF_INET,'6':socket.AF_INET6,'u':socket.AF_UNIX}[sys.argv[1]]
kind=socket.SOCK_DGRAM if sys.argv[2]=='udp' else socket.SOCK_STREAM
addr=sys.argv[3]
if fam==socket.AF_UNIX:
    addr=addr.replace('@','\\0',1)
else:
    host,port=addr.rsplit(':',1); addr=(host.strip('[]'),int(port))
try:
    s=socket.socket(fam,kind); s.settimeout(2)
    if kind==socket.SOCK_DGRAM: s.sendto(b'probe',addr)
    else: s.connect(addr); s.sendall(b'probe')
    print('sent')
except Exception as e: print('blocked', e)";

async fn connect(lab: &Lab, family: &str, kind: &str, addr: &str) -> Result<Outcome, String> {
    let script = format!("python3 -c \"$PROBE\" {family} {kind} '{addr}'",);
    let script = format!("PROBE='{}'; {script}", PY_CONNECT.replace('\'', "'\\''"));
    run(lab, &script).await
}

fn accepted_tcp(l: &TcpListener) -> bool {
    l.set_nonblocking(true).ok();
    l.accept().is_ok()
}

fn accepted_unix(l: &UnixListener) -> bool {
    l.set_nonblocking(true).ok();
    l.accept().is_ok()
}

fn net_check(name: &str, allowed: bool, got: bool, r: &Result<Outcome, String>) -> Check {
    // The probe prints `sent` or `blocked`: without either it never tried, and a
    // listener that received nothing proves nothing.
    let tried = r.as_ref().is_ok_and(|o| {
        text(o)
            .lines()
            .any(|l| l == "sent" || l.starts_with("blocked"))
    });
    let observed = match r {
        Err(e) => format!("sandbox error: {e}"),
        Ok(_) if got => "the host listener received it".into(),
        Ok(o) if !tried => format!("the probe did not run: {}", text(o).trim()),
        Ok(_) => "the host listener received nothing".into(),
    };
    check(
        name,
        promise_for(allowed),
        observed,
        (tried || got) && got == allowed,
    )
}

/// Why the probes that run python3 in the sandbox are skipped.
const NO_PYTHON: &str = "python3 does not run in the sandbox, and this probe needs it";

fn promise_for(allowed: bool) -> &'static str {
    if allowed {
        "reaches the host listener"
    } else {
        "blocked"
    }
}

pub async fn network(lab: &Lab, out: &mut Vec<Check>) {
    let net = lab.policy.network;
    if !lab.python {
        for (name, allowed) in [
            ("network: TCP to a host listener", net),
            ("network: UDP to a host socket", net),
            ("network: IPv6 TCP to a host listener", net),
            ("network: host unix socket (e.g. docker.sock)", false),
            ("network: host abstract unix socket", false),
        ] {
            out.push(Check::skipped(name, promise_for(allowed), NO_PYTHON));
        }
        out.push(Check::skipped(
            "network: socketpair still works",
            "works",
            NO_PYTHON,
        ));
        return;
    }
    match TcpListener::bind("127.0.0.1:0") {
        Ok(l) => {
            let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
            let r = connect(lab, "4", "tcp", &format!("127.0.0.1:{port}")).await;
            out.push(net_check(
                "network: TCP to a host listener",
                net,
                accepted_tcp(&l),
                &r,
            ));
        }
        Err(e) => out.push(Check::skipped(
            "network: TCP to a host listener",
            promise_for(net),
            format!("the host side cannot listen: {e}"),
        )),
    }
    match UdpSocket::bind("127.0.0.1:0") {
        Ok(u) => {
            let port = u.local_addr().map(|a| a.port()).unwrap_or(0);
            let r = connect(lab, "4", "udp", &format!("127.0.0.1:{port}")).await;
            u.set_nonblocking(true).ok();
            let mut buf = [0u8; 16];
            let got = u.recv(&mut buf).is_ok();
            out.push(net_check("network: UDP to a host socket", net, got, &r));
        }
        Err(e) => out.push(Check::skipped(
            "network: UDP to a host socket",
            promise_for(net),
            format!("the host side cannot bind: {e}"),
        )),
    }
    match TcpListener::bind("[::1]:0") {
        Ok(l) => {
            let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
            let r = connect(lab, "6", "tcp", &format!("[::1]:{port}")).await;
            out.push(net_check(
                "network: IPv6 TCP to a host listener",
                net,
                accepted_tcp(&l),
                &r,
            ));
        }
        Err(_) => out.push(Check::not_applicable(
            "network: IPv6 TCP to a host listener",
            "this host has no IPv6 loopback",
        )),
    }
    let sock = lab.root.join("host.sock");
    match UnixListener::bind(&sock) {
        Ok(l) => {
            let r = connect(lab, "u", "tcp", &sock.display().to_string()).await;
            out.push(net_check(
                "network: host unix socket (e.g. docker.sock)",
                false,
                accepted_unix(&l),
                &r,
            ));
        }
        Err(e) => out.push(Check::skipped(
            "network: host unix socket (e.g. docker.sock)",
            "blocked",
            format!("the host side cannot listen: {e}"),
        )),
    }
    let name = format!("{}-abstract", lab.marker);
    match abstract_listener(&name) {
        Err(_) if !cfg!(target_os = "linux") => out.push(Check::not_applicable(
            "network: host abstract unix socket",
            "abstract unix sockets exist only on Linux",
        )),
        Ok(l) => {
            let r = connect(lab, "u", "tcp", &format!("@{name}")).await;
            out.push(net_check(
                "network: host abstract unix socket",
                false,
                accepted_unix(&l),
                &r,
            ));
        }
        Err(e) => out.push(Check::skipped(
            "network: host abstract unix socket",
            "blocked",
            format!("the host side cannot listen: {e}"),
        )),
    }
    let r = run(
        lab,
        "python3 -c 'import socket; a,b=socket.socketpair(); a.sendall(b\"pair-ok\"); print(b.recv(16).decode())'",
    )
    .await;
    let ok = r
        .as_ref()
        .map(|o| text(o).contains("pair-ok"))
        .unwrap_or(false);
    out.push(check(
        "network: socketpair still works",
        "works",
        if ok { "works" } else { "FAILED" },
        ok,
    ));
}

#[cfg(target_os = "linux")]
fn abstract_listener(name: &str) -> std::io::Result<UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    UnixListener::bind_addr(&addr)
}

#[cfg(not(target_os = "linux"))]
fn abstract_listener(_name: &str) -> std::io::Result<UnixListener> {
    Err(std::io::Error::other(
        "abstract unix sockets exist only on Linux",
    ))
}

pub async fn environment(lab: &Lab, out: &mut Vec<Check>) {
    let r = run(lab, "env").await;
    let t = r.as_ref().map(text).unwrap_or_default();
    let leaked: Vec<&str> = t
        .lines()
        .filter(|l| {
            l.contains(&lab.marker)
                || l.starts_with("SSH_AUTH_SOCK=")
                || l.starts_with("DOCKER_HOST=")
                || l.starts_with("DBUS_SESSION_BUS_ADDRESS=")
        })
        .map(|l| l.split('=').next().unwrap_or(l))
        .collect();
    let basics = t.contains("PATH=") && t.contains("HOME=");
    out.push(check(
        "environment: secrets and host channels removed",
        "no *_API_KEY, *TOKEN*, *SECRET*, *PASSWORD*, SSH_AUTH_SOCK, DBUS, DOCKER_HOST; PATH and HOME kept",
        if !leaked.is_empty() {
            format!("LEAKED: {}", leaked.join(", "))
        } else if !basics {
            "PATH or HOME missing".into()
        } else {
            "clean".into()
        },
        r.is_ok() && leaked.is_empty() && basics,
    ));
}

/// Samples the sandboxed process from the host (through /proc) while it runs.
pub async fn process(lab: &Lab, out: &mut Vec<Check>) {
    if !cfg!(target_os = "linux") {
        out.push(Check::not_applicable(
            "process: capabilities, seccomp, session, limits",
            "read from /proc: Linux only",
        ));
        return;
    }
    let tag = unique(lab, 1);
    let script = format!("exec sleep {tag}");
    let sample = async {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(pid) = find_processes(&format!("sleep {tag}")).first().copied() {
                // Give the exec a moment to settle, then read everything at once.
                tokio::time::sleep(Duration::from_millis(20)).await;
                let status =
                    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                let limits =
                    std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
                return Some((pid, status, stat, limits));
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run_fut = async {
        let command: Vec<std::ffi::OsString> =
            vec!["sh".into(), "-c".into(), script.clone().into()];
        let prepared = crate::sandbox::prepare(lab.backend, &lab.policy, &command, &lab.workspace);
        match prepared {
            Ok(p) => crate::exec::run(
                p,
                crate::exec::Input::Null,
                crate::exec::Output::Capture { max_bytes: 4096 },
                Duration::from_secs(30),
                async {
                    let _ = rx.await;
                },
            )
            .await
            .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    let sampler = async {
        let s = sample.await;
        let _ = tx.send(());
        s
    };
    let (ran, sampled) = tokio::join!(run_fut, sampler);
    let Some((_pid, status, stat, limits)) = sampled else {
        let why = ran
            .err()
            .unwrap_or_else(|| "the sandboxed process never appeared".into());
        for name in [
            "process: no capabilities",
            "process: no_new_privs and seccomp",
            "process: no controlling terminal, own session",
            "process: resource limits applied",
        ] {
            out.push(check(
                name,
                "observed from the host",
                format!("could not observe: {why}"),
                false,
            ));
        }
        return;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let zero = |v: &str| !v.is_empty() && v.chars().all(|c| c == '0');
    let root = nix::unistd::geteuid().is_root();
    let bnd_required = root || lab.backend == crate::sandbox::Backend::Bwrap;
    let caps_ok = zero(&field("CapEff"))
        && zero(&field("CapPrm"))
        && zero(&field("CapAmb"))
        && (!bnd_required || zero(&field("CapBnd")));
    out.push(check(
        "process: no capabilities",
        if bnd_required { "CapEff, CapPrm, CapAmb, CapBnd empty" } else { "CapEff, CapPrm, CapAmb empty (CapBnd needs root to clear; no_new_privs makes it unreachable)" },
        format!("CapEff={} CapPrm={} CapBnd={}", field("CapEff"), field("CapPrm"), field("CapBnd")),
        caps_ok,
    ));
    let nnp = field("NoNewPrivs") == "1";
    let seccomp = field("Seccomp") == "2";
    out.push(check(
        "process: no_new_privs and seccomp",
        "NoNewPrivs=1, Seccomp=2 (filter)",
        format!(
            "NoNewPrivs={} Seccomp={}",
            field("NoNewPrivs"),
            field("Seccomp")
        ),
        nnp && seccomp,
    ));
    // /proc/PID/stat: fields after the command name; session is field 6, tty_nr field 7.
    let after = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let session: i32 = fields.get(3).and_then(|s| s.parse().ok()).unwrap_or(0);
    let tty: i32 = fields.get(4).and_then(|s| s.parse().ok()).unwrap_or(-1);
    let my_session = unsafe { libc::getsid(0) };
    out.push(check(
        "process: no controlling terminal, own session",
        "tty_nr=0, session differs from chitti's",
        format!("tty_nr={tty} session={session} (chitti's {my_session})"),
        tty == 0 && session != my_session && session != 0,
    ));
    let limit = |label: &str| {
        limits
            .lines()
            .find(|l| l.starts_with(label))
            .and_then(|l| l[label.len()..].split_whitespace().next())
            .unwrap_or("?")
            .to_string()
    };
    let l = &lab.policy.limits;
    let expect = |v: Option<u64>, scale: u64| v.map(|v| (v * scale).to_string());
    let wanted = [
        ("Max processes", expect(l.max_processes, 1)),
        ("Max open files", expect(l.max_open_files, 1)),
        ("Max file size", expect(l.max_file_size_mb, 1024 * 1024)),
        ("Max address space", expect(l.max_memory_mb, 1024 * 1024)),
        ("Max core file size", Some("0".to_string())),
    ];
    let mut seen = Vec::new();
    let mut ok = true;
    for (label, want) in &wanted {
        let got = limit(label);
        if let Some(want) = want {
            if &got != want {
                ok = false;
            }
        }
        seen.push(format!("{label}={got}"));
    }
    out.push(check(
        "process: resource limits applied",
        "the profile's limits (processes, open files, file size, address space; no core dumps)",
        seen.join(", "),
        ok,
    ));
}

pub async fn syscalls(lab: &Lab, out: &mut Vec<Check>) {
    if !cfg!(target_os = "linux") {
        out.push(Check::not_applicable(
            "syscalls: seccomp, ptrace, signals",
            "seccomp and /proc probes: Linux only",
        ));
        return;
    }
    if !lab.python {
        for (name, promise) in [
            ("syscalls: TIOCSTI denied by seccomp", "EPERM"),
            (
                "syscalls: new namespaces and mounts denied",
                "unshare and mount fail with EPERM",
            ),
            ("syscalls: ptrace of a host process", "denied"),
        ] {
            out.push(Check::skipped(name, promise, NO_PYTHON));
        }
        if cfg!(target_arch = "x86_64") {
            out.push(Check::skipped(
                "syscalls: 32-bit int 0x80 entry",
                "the process is killed (seccomp architecture check)",
                NO_PYTHON,
            ));
        }
        return;
    }
    let r = run(
        lab,
        "python3 -c 'import fcntl,termios,errno\ntry:\n fcntl.ioctl(0, termios.TIOCSTI, b\"x\"); print(\"tiocsti-allowed\")\nexcept OSError as e: print(\"tiocsti\", errno.errorcode.get(e.errno))'",
    )
    .await;
    let t = r.as_ref().map(text).unwrap_or_default();
    out.push(check(
        "syscalls: TIOCSTI denied by seccomp",
        "EPERM (without the filter: ENOTTY on /dev/null)",
        t.lines()
            .find(|l| l.starts_with("tiocsti"))
            .unwrap_or("no answer")
            .to_string(),
        t.contains("tiocsti EPERM"),
    ));

    let r = run(
        lab,
        "unshare -U true 2>/dev/null && echo unshare-allowed; python3 -c 'import ctypes,os; l=ctypes.CDLL(None,use_errno=True); print(\"mount\", l.mount(b\"none\",b\"/nonexistent-chitti-probe\",b\"tmpfs\",0,None), ctypes.get_errno())'",
    )
    .await;
    let t = r.as_ref().map(text).unwrap_or_default();
    let blocked = !t.contains("unshare-allowed") && t.contains("mount -1 1");
    out.push(check(
        "syscalls: new namespaces and mounts denied",
        "unshare and mount fail with EPERM",
        if blocked {
            "denied".to_string()
        } else {
            format!("NOT denied: {}", t.trim())
        },
        blocked,
    ));

    // ptrace: the sandbox tries to attach to a host process and holds on for a while;
    // the host watches the decoy's TracerPid.
    let decoy = match Decoy::start() {
        Ok(d) => d,
        Err(e) => {
            out.push(Check::skipped(
                "syscalls: ptrace of a host process",
                "denied",
                format!("cannot start a host process to aim at: {e}"),
            ));
            return;
        }
    };
    let pid = decoy.pid();
    let script = format!(
        "python3 -c 'import ctypes,time; l=ctypes.CDLL(None,use_errno=True); print(\"attach\", l.ptrace(16,{pid},0,0)); time.sleep(0.5)'"
    );
    let watch = async {
        let mut traced = false;
        for _ in 0..60 {
            if status_field(pid, "TracerPid").is_some_and(|t| t != "0") {
                traced = true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        traced
    };
    let (r, traced) = tokio::join!(run(lab, &script), watch);
    let tried = r
        .as_ref()
        .is_ok_and(|o| text(o).lines().any(|l| l.starts_with("attach ")));
    out.push(check(
        "syscalls: ptrace of a host process",
        "denied",
        if traced {
            "the host process was TRACED".to_string()
        } else if !tried {
            format!(
                "the probe did not run: {}",
                r.as_ref().map(text).unwrap_or_else(|e| e.clone()).trim()
            )
        } else {
            "the host process was never traced".into()
        },
        tried && !traced,
    ));

    drop(decoy);

    if cfg!(target_arch = "x86_64") {
        let r = run(lab, PY_INT80).await;
        let t = r.as_ref().map(text).unwrap_or_default();
        let survived = t.contains("int80-returned");
        // Only a probe that got as far as the call counts: python3 failing to start, or
        // to map the page, also exits non-zero.
        let killed = t.contains("int80-calling") && r.as_ref().is_ok_and(|o| o.exit_code != 0);
        out.push(check(
            "syscalls: 32-bit int 0x80 entry",
            "the process is killed (seccomp architecture check)",
            if survived {
                "the 32-bit syscall RETURNED".to_string()
            } else if killed {
                "killed".into()
            } else {
                format!("unexpected: {}", t.trim())
            },
            killed && !survived,
        ));
    } else {
        out.push(Check::not_applicable(
            "syscalls: 32-bit int 0x80 entry",
            "not an x86_64 machine",
        ));
    }
}

/// Maps a page below 2 GiB and runs `mov eax, 20 (getpid); int 0x80; ret` from it.
const PY_INT80: &str = "python3 -c '
import mmap, ctypes
code = bytes([0xb8,20,0,0,0, 0xcd,0x80, 0xc3])
m = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE|mmap.MAP_ANONYMOUS|0x40, prot=mmap.PROT_READ|mmap.PROT_WRITE|mmap.PROT_EXEC)
m.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
print(\"int80-calling\", flush=True)
ctypes.CFUNCTYPE(ctypes.c_int)(addr)()
print(\"int80-returned\")
'";

pub async fn signals(lab: &Lab, out: &mut Vec<Check>) {
    let mut decoy = match Decoy::start() {
        Ok(d) => d,
        Err(e) => {
            out.push(Check::skipped(
                "syscalls: signals to host processes",
                "denied",
                format!("cannot start a host process to aim at: {e}"),
            ));
            return;
        }
    };
    let pid = decoy.pid();
    let tried = attempt(
        lab,
        &format!("kill -9 {pid} 2>/dev/null; kill -STOP {pid} 2>/dev/null; true"),
    )
    .await;
    let state = status_field(pid, "State").unwrap_or_else(|| "running".into());
    let alive = decoy.alive() && !state.starts_with('T');
    let killed = format!("host process KILLED or stopped ({state})");
    let safe = format!("host process alive ({state})");
    out.push(denied(
        "syscalls: signals to host processes",
        "cannot reach processes outside the sandbox",
        tried,
        !alive,
        (&killed, &safe),
    ));
}

pub async fn lifetime(lab: &Lab, out: &mut Vec<Check>) {
    let tag = unique(lab, 2);
    let started = Instant::now();
    let r = lab
        .run_with_timeout(
            &format!("setsid sleep {tag} & sleep {tag}"),
            Duration::from_secs(1),
        )
        .await;
    let took = started.elapsed();
    // Give the kernel a moment to finish reaping before looking.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let survivors = find_processes(&format!("sleep {tag}"));
    let timed_out = r.as_ref().is_ok_and(|o| o.timed_out && o.exit_code == 124);
    out.push(check(
        "lifetime: a 1 s timeout kills the whole tree",
        "returns 124 within 5 s, no process left",
        format!(
            "{} after {:.1} s, {} left",
            if timed_out {
                "timed out"
            } else {
                "did NOT time out"
            },
            took.as_secs_f64(),
            survivors.len()
        ),
        timed_out && took < Duration::from_secs(5) && survivors.is_empty(),
    ));
    for pid in survivors {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    let tag = unique(lab, 3);
    // Each child says it started (a file in the private TMPDIR) before it becomes the
    // `sleep` whose death is checked: children that never started prove nothing. macOS
    // has no PID namespace or subreaper, and a child in a session of its own escapes the
    // sweep there (a known limit): only same-session children are checked on it.
    let child = |n: u32| {
        // `:?`: without a TMPDIR (unsandboxed) nothing is written, rather than in `/`.
        format!("sh -c 'echo > \"${{TMPDIR:?}}/.started-{n}\"; exec sleep {tag}' >/dev/null 2>&1")
    };
    let new_session = cfg!(target_os = "linux");
    let expected = if new_session { 3 } else { 2 };
    let mut script = format!("({} &); nohup {} &", child(1), child(2));
    if new_session {
        script.push_str(&format!(" setsid {} &", child(3)));
    }
    script.push_str(" sleep 0.3; echo \"running $(ls -A \"${TMPDIR:?}\" | grep -c '^.started-')\"");
    let r = run(lab, &script).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let survivors = find_processes(&format!("sleep {tag}"));
    let output = r.as_ref().map(text).unwrap_or_default();
    let started = output.contains(&format!("running {expected}"));
    out.push(check(
        "lifetime: nothing outlives the call",
        if new_session {
            "background, nohup and setsid children are killed"
        } else {
            "background and nohup children are killed (not new sessions: macOS limit)"
        },
        if started {
            format!("{} left after the call", survivors.len())
        } else {
            format!(
                "the probe did not start its {expected} children: {}",
                output.trim()
            )
        },
        started && survivors.is_empty(),
    ));
    for pid in survivors {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}
