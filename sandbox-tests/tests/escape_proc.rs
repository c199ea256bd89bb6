//! Process escapes: signalling, stopping, tracing and reading host processes; stealing
//! their descriptors, keys and shared memory; leaking the caller's environment; terminal
//! injection; new namespaces, mounts and dangerous system calls; the 32-bit and x32
//! syscall entries; capabilities; and processes that outlive the call.
//!
//! Verdicts come from the host: the host process is alive, not stopped, not traced; the
//! secret it holds is not in the output; the host file or queue it owns is unchanged;
//! /proc/<pid>/status of the sandboxed process shows no capabilities; no `sleep <unique>`
//! survives the call.

use std::ffi::CString;
use std::time::{Duration, Instant};

use sandbox_tests::*;

/// A Python probe: `body` then `print("PROBE-DONE")`.
fn probe_py(body: &str) -> String {
    format!("{body}\nprint({DONE:?})\n")
}

/// A Python probe making raw system calls (`call(nr, *args)`).
fn probe_sys(body: &str) -> String {
    probe_py(&py_syscalls(body))
}

// ---------------------------------------------------------------------------------------
// Signals and tracing
// ---------------------------------------------------------------------------------------

#[backends]
fn escape_kill_host_process(backend: &str) {
    let fx = Fixture::new();
    let mut host = HostProcess::sleep();
    let pid = host.pid.to_string();
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "kill -9 {pid}; kill -TERM {pid}; \
         {PYTHON} -c 'import os,sys,signal; os.kill(int(sys.argv[1]), signal.SIGKILL)' {pid}; \
         {PYTHON} -c 'import os,sys,signal; fd=os.pidfd_open(int(sys.argv[1])); signal.pidfd_send_signal(fd, signal.SIGKILL)' {pid}"
    )));
    ran.assert_probe_ran();
    assert!(
        host.alive(),
        "ESCAPE (kill a host process): pid {pid} is dead\n{ran}"
    );
}

#[backends]
fn escape_sigstop_host_process(backend: &str) {
    let fx = Fixture::new();
    let mut host = HostProcess::sleep();
    let pid = host.pid.to_string();
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "kill -STOP {pid}; kill -TSTP {pid}; \
         {PYTHON} -c 'import os,sys,signal; os.kill(int(sys.argv[1]), signal.SIGSTOP)' {pid}"
    )));
    ran.assert_probe_ran();
    let state = host.state();
    assert!(
        host.alive(),
        "ESCAPE (signal a host process): pid {pid} died\n{ran}"
    );
    assert!(
        state != 'T' && state != 't',
        "ESCAPE (SIGSTOP a host process): pid {pid} is in state {state}\n{ran}"
    );
}

/// The sandboxed command signals its own parent (bwrap's init, or chitti's supervisor)
/// and chitti itself; chitti must still report the command's own exit status.
#[backends]
fn escape_signal_supervisor_and_chitti(backend: &str) {
    let fx = Fixture::new();
    let script = probe(
        "i=0; while [ ! -s chitti.pid ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; \
         CHITTI=$(cat chitti.pid); \
         kill -9 $PPID; kill -STOP $PPID; kill -TERM $CHITTI; kill -9 $CHITTI; kill -STOP $CHITTI; sleep 0.3",
    );
    let running = fx
        .chitti(backend)
        .spawn(&["sh", "-c", &format!("{script}\nexit 7")]);
    write(&fx.ws("chitti.pid"), running.pid().to_string());
    let ran = running.wait();
    assert!(
        ran.signal.is_none() && ran.code == Some(7),
        "ESCAPE (signal chitti or its supervisor from inside): chitti did not report the \
         command's exit 7\n{ran}"
    );
    assert!(
        ran.stdout_str().contains(DONE),
        "the probe did not run to its end\n{ran}"
    );
}

/// prlimit(2) on a host process of the same user: lowering its limits (RLIMIT_NOFILE,
/// RLIMIT_CPU, RLIMIT_AS) breaks or kills it without sending any signal.
#[backends]
fn escape_prlimit_host_process(backend: &str) {
    let fx = Fixture::new();
    let mut host = HostProcess::sleep();
    let limits =
        || std::fs::read_to_string(format!("/proc/{}/limits", host.pid)).unwrap_or_default();
    let before = limits();
    assert!(
        before.contains("Max open files"),
        "cannot read /proc/<pid>/limits on the host"
    );
    let script = probe_py(
        r#"
import resource, sys
pid = int(sys.argv[1])
for name, res, value in (("RLIMIT_NOFILE", resource.RLIMIT_NOFILE, (3, 3)),
                         ("RLIMIT_CPU", resource.RLIMIT_CPU, (3600, 3600)),
                         ("RLIMIT_AS", resource.RLIMIT_AS, (1 << 30, 1 << 30))):
    try:
        resource.prlimit(pid, res, value); print("prlimit", name, "changed")
    except OSError as e:
        print("prlimit", name, "denied:", e)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[&host.pid.to_string()]);
    ran.assert_probe_ran();
    let after = limits();
    assert!(
        host.alive(),
        "ESCAPE (prlimit a host process): it died\n{ran}"
    );
    assert!(
        after == before,
        "ESCAPE (prlimit(2) changed a host process's resource limits)\nbefore:\n{before}\nafter:\n{after}\n{ran}"
    );
}

/// setpriority, sched_setaffinity and ioprio_set on a host process of the same user, by
/// its pid and through "every process of my uid" (PRIO_USER / IOPRIO_WHO_USER with 0).
#[backends]
fn escape_renice_host_process(backend: &str) {
    let fx = Fixture::new();
    let host = HostProcess::sleep();
    let observe = || {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", host.pid)).unwrap_or_default();
        let nice = stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].split_whitespace().nth(16).map(str::to_string))
            .unwrap_or_default();
        let ioprio = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, host.pid) };
        (nice, host.status_field("Cpus_allowed_list"), ioprio)
    };
    let before = observe();
    let script = probe_sys(
        r#"
pid = int(sys.argv[1])
for name, attempt in (("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, pid, 19)),
                      ("setpriority PRIO_USER 0 (every process of this uid)", lambda: os.setpriority(os.PRIO_USER, 0, 19)),
                      ("sched_setaffinity", lambda: os.sched_setaffinity(pid, {0})),
                      ("sched_setscheduler", lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)))):
    try:
        attempt(); print(name, "changed")
    except OSError as e:
        print(name, "denied:", e)
r, e = call(251, 1, pid, (3 << 13) | 7)
print("ioprio_set", r, e)
r, e = call(251, 3, 0, (3 << 13) | 7)
print("ioprio_set IOPRIO_WHO_USER 0", r, e)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[&host.pid.to_string()]);
    ran.assert_probe_ran();
    let after = observe();
    assert_eq!(
        after, before,
        "ESCAPE (renice / affinity / ioprio of a host process): (nice, cpus, ioprio) changed\n{ran}"
    );
}

/// fcntl(F_SETOWN) + F_SETSIG: the kernel delivers the chosen signal (SIGKILL) to the
/// owner when the descriptor becomes ready, without kill(2).
#[backends]
fn escape_signal_host_process_via_fcntl_setown(backend: &str) {
    let fx = Fixture::new();
    let mut host = HostProcess::sleep();
    let script = probe_py(
        r#"
import fcntl, os, signal, sys, time
pid = int(sys.argv[1])
r, w = os.pipe()
try:
    fcntl.fcntl(r, fcntl.F_SETOWN, pid)
    fcntl.fcntl(r, 10, signal.SIGKILL)  # F_SETSIG
    fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
    os.write(w, b"x")
    print("SIGIO armed for", pid)
except OSError as e:
    print("denied:", e)
time.sleep(0.3)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[&host.pid.to_string()]);
    ran.assert_probe_ran();
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        host.alive(),
        "ESCAPE (F_SETOWN/F_SETSIG delivered SIGKILL to a host process)\n{ran}"
    );
}

#[backends]
fn escape_ptrace_attach_host_process(backend: &str) {
    let fx = Fixture::new();
    let mut host = HostProcess::sleep();
    let script = probe_sys(
        r#"
import time
pid = int(sys.argv[1])
for name, req in (("PTRACE_SEIZE", 0x4206), ("PTRACE_ATTACH", 16)):
    r, e = call(101, req, pid, 0, 0)
    print(name, r, e)
    if r == 0:
        print("ATTACHED")
        time.sleep(2)
        call(101, 17, pid, 0, 0)
"#,
    );
    let mut running = fx
        .chitti(backend)
        .spawn(&[PYTHON, "-c", &script, &host.pid.to_string()]);
    let mut tracers = Vec::new();
    let mut states = Vec::new();
    while !running.finished() {
        let tracer = host.status_field("TracerPid");
        if tracer != "0" && !tracer.is_empty() {
            tracers.push(tracer);
        }
        let state = host.state();
        if state == 't' || state == 'T' {
            states.push(state);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let ran = running.wait();
    ran.assert_probe_ran();
    assert!(
        tracers.is_empty() && states.is_empty(),
        "ESCAPE (ptrace a host process): the host saw TracerPid {tracers:?} / states {states:?}\n{ran}"
    );
    assert!(
        host.alive(),
        "ESCAPE (ptrace a host process): it died\n{ran}"
    );
}

/// A host process holding a secret only in its memory (read from stdin, never in argv or
/// the environment); prints the buffer's address.
const PY_SECRET_HOLDER: &str = r#"
import ctypes, sys, time
secret = sys.stdin.readline().strip().encode()
buf = ctypes.create_string_buffer(secret)
print(ctypes.addressof(buf), len(secret), flush=True)
time.sleep(600)
"#;

#[backends]
fn escape_process_vm_readv_host_process(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("MEMSECRET");
    let (host, line) = HostProcess::python(PY_SECRET_HOLDER, &secret);
    let mut parts = line.split_whitespace();
    let (addr, len) = (parts.next().unwrap(), parts.next().unwrap());
    let script = probe_sys(
        r#"
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
pid, addr, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
local = ctypes.create_string_buffer(n)
liov = iovec(ctypes.cast(local, ctypes.c_void_p), n)
riov = iovec(addr, n)
r, e = call(310, pid, ctypes.byref(liov), 1, ctypes.byref(riov), 1, 0)
print("process_vm_readv", r, e)
if r > 0:
    print(local.raw[:r].decode(errors="replace"))
"#,
    );
    let ran = fx
        .chitti(backend)
        .py(&script, &[&host.pid.to_string(), addr, len]);
    ran.assert_probe_ran();
    assert_no_secret(&secret, "process_vm_readv of a host process", &ran);
}

#[backends]
fn escape_read_proc_pid_mem_of_host_process(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("MEMSECRET");
    let (host, line) = HostProcess::python(PY_SECRET_HOLDER, &secret);
    let mut parts = line.split_whitespace();
    let (addr, len) = (parts.next().unwrap(), parts.next().unwrap());
    let script = probe_py(
        r#"
import sys
pid, addr, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    with open("/proc/%s/mem" % pid, "rb") as f:
        f.seek(addr)
        print("READ", f.read(n).decode(errors="replace"))
except OSError as e:
    print("denied:", e)
try:
    print(open("/proc/%s/maps" % pid).read()[:200])
except OSError as e:
    print("maps denied:", e)
"#,
    );
    let ran = fx
        .chitti(backend)
        .py(&script, &[&host.pid.to_string(), addr, len]);
    ran.assert_probe_ran();
    assert_no_secret(&secret, "read /proc/<pid>/mem of a host process", &ran);
}

/// pidfd_getfd steals a writable descriptor from a host process.
#[backends]
fn escape_pidfd_getfd_steal_host_descriptor(backend: &str) {
    let fx = Fixture::new();
    let victim = fx.victim("victim");
    let before = file_state(&victim);
    let (host, fd) = HostProcess::python(
        r#"
import sys, time
f = open(sys.stdin.readline().strip(), "r+")
print(f.fileno(), flush=True)
time.sleep(600)
"#,
        &victim.display().to_string(),
    );
    let script = probe_sys(
        r#"
pid, target = int(sys.argv[1]), int(sys.argv[2])
pidfd, e = call(434, pid, 0)
print("pidfd_open", pidfd, e)
if pidfd >= 0:
    fd, e = call(438, pidfd, target, 0)
    print("pidfd_getfd", fd, e)
    if fd >= 0:
        os.write(fd, b"PWNED")
try:
    with open("/proc/%d/fd/%d" % (pid, target), "a") as f:
        f.write("PWNED")
    print("wrote through /proc/pid/fd")
except OSError as e:
    print("/proc/pid/fd denied:", e)
"#,
    );
    let ran = fx
        .chitti(backend)
        .py(&script, &[&host.pid.to_string(), &fd]);
    ran.assert_probe_ran();
    assert_unchanged(
        &victim,
        &before,
        "steal a host process's descriptor (pidfd_getfd, /proc/pid/fd)",
        &ran,
    );
}

#[backends]
fn escape_read_proc_environ_of_host_process(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("ENVSECRET");
    let host = HostProcess::sleep_with_env(&[("CHITTI_HOST_SECRET", &secret)]);
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "tr '\\0' '\\n' < /proc/{pid}/environ; for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null; \
         {PYTHON} -c 'import sys; print(open(\"/proc/%s/environ\" % sys.argv[1], \"rb\").read())' {pid}",
        pid = host.pid
    )));
    ran.assert_probe_ran();
    assert_no_secret(&secret, "read /proc/<pid>/environ of a host process", &ran);
}

// ---------------------------------------------------------------------------------------
// The environment
// ---------------------------------------------------------------------------------------

const SECRET_VARS: &[&str] = &[
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "GEMINI_API_KEY",
    "GITHUB_TOKEN",
    "GH_TOKEN",
    "NPM_TOKEN",
    "CARGO_REGISTRY_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "DB_PASSWORD",
    "MY_SECRET",
    "PGPASSWORD",
    "SLACK_WEBHOOK_SECRET",
    "HF_TOKEN",
];

const HOST_CHANNEL_VARS: &[&str] = &[
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GPG_AGENT_INFO",
    "DOCKER_HOST",
    "DBUS_SESSION_BUS_ADDRESS",
    "XDG_RUNTIME_DIR",
    "DISPLAY",
    "WAYLAND_DISPLAY",
];

const DUMP_ENV: &str = "env; tr '\\0' '\\n' < /proc/self/environ; \
     /usr/bin/python3 -c 'import os; print(dict(os.environ))'; \
     echo PATH-SEEN=$PATH; echo HOME-SEEN=$HOME";

#[backends]
fn escape_env_leak_secret_variables(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("ENVSECRET");
    let mut c = fx.chitti(backend);
    for var in SECRET_VARS {
        c = c.env(var, format!("{secret}-{var}"));
    }
    let ran = c.sh(&probe(DUMP_ENV));
    ran.assert_probe_ran();
    assert!(
        ran.stdout_str().contains(&format!("PATH-SEEN={PATH}")),
        "control: PATH must pass the allow-list\n{ran}"
    );
    assert_no_secret(
        &secret,
        "API keys / tokens / passwords in the environment",
        &ran,
    );
    for var in SECRET_VARS {
        assert!(
            !ran.stdout_str().contains(&format!("{var}=")),
            "ESCAPE (environment leak): {var} reached the sandbox\n{ran}"
        );
    }
}

#[backends]
fn escape_env_leak_host_channel_variables(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("CHANNEL");
    let mut c = fx.chitti(backend);
    for var in HOST_CHANNEL_VARS {
        c = c.env(var, format!("/run/{secret}/{var}"));
    }
    let ran = c.sh(&probe(DUMP_ENV));
    ran.assert_probe_ran();
    assert_no_secret(
        &secret,
        "SSH_AUTH_SOCK / DOCKER_HOST / D-Bus in the environment",
        &ran,
    );
}

/// The caller's secrets must not be readable through /proc/<pid>/environ of chitti, its
/// supervisor, bwrap, or any other ancestor.
#[backends]
fn escape_env_leak_via_proc_environ_of_ancestors(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("ENVSECRET");
    let ran = fx
        .chitti(backend)
        .env("OPENAI_API_KEY", &secret)
        .env("CHITTI_CALLER_SECRET", &secret)
        .py(
            &probe_py(
                r#"
import os
pid = os.getpid()
seen = set()
while pid > 1 and pid not in seen:
    seen.add(pid)
    for name in ("environ", "cmdline"):
        try:
            print(pid, name, open("/proc/%d/%s" % (pid, name), "rb").read())
        except OSError as e:
            print(pid, name, "denied:", e)
    try:
        pid = int([l for l in open("/proc/%d/status" % pid) if l.startswith("PPid:")][0].split()[1])
    except Exception as e:
        print("stop:", e); break
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            print(p, open("/proc/%s/environ" % p, "rb").read())
        except OSError:
            pass
"#,
            ),
            &[],
        );
    ran.assert_probe_ran();
    assert_no_secret(
        &secret,
        "read the caller's environment through /proc/<ancestor>/environ",
        &ran,
    );
}

// ---------------------------------------------------------------------------------------
// Terminal injection
// ---------------------------------------------------------------------------------------

#[backends]
fn escape_tiocsti_terminal_injection(backend: &str) {
    let fx = Fixture::new();
    let pty = Pty::open();
    let script = probe_py(
        r#"
import fcntl, termios, os
for fd in (0, 1, 2):
    try:
        for ch in b"echo PWNED\n":
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))
        print("INJECTED on fd", fd)
    except OSError as e:
        print("fd", fd, "denied:", e)
try:
    fd = os.open("/dev/tty", os.O_RDWR)
    fcntl.ioctl(fd, termios.TIOCSTI, b"x")
    print("INJECTED via /dev/tty")
except OSError as e:
    print("/dev/tty denied:", e)
"#,
    );
    let mut cmd = fx.chitti(backend).command(&[PYTHON, "-c", &script]);
    cmd.stdin(pty.slave_stdio())
        .stdout(pty.slave_stdio())
        .stderr(std::process::Stdio::piped());
    let mut ran = run_with_own_stdio(cmd);
    ran.stdout = pty.drain_output();
    show(&ran);
    let pending = pty.pending_input();
    ran.assert_probe_ran();
    assert_eq!(
        pending, 0,
        "ESCAPE (TIOCSTI): {pending} byte(s) were pushed into the terminal's input queue\n{ran}"
    );
}

// ---------------------------------------------------------------------------------------
// Namespaces, mounts, dangerous system calls
// ---------------------------------------------------------------------------------------

#[backends]
fn escape_unshare_user_namespace(backend: &str) {
    require_tool("unshare");
    let fx = Fixture::new();
    let m = marker("UNSHARED");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "unshare -r sh -c 'echo {m}-r'; unshare -U sh -c 'echo {m}-U'; unshare -n sh -c 'echo {m}-n'; \
         unshare -m sh -c 'echo {m}-m'; unshare -p -f sh -c 'echo {m}-p'; \
         {PYTHON} -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); r=l.unshare(0x10000000); print(\"{m}-ctypes\" if r == 0 else \"denied %d\" % ctypes.get_errno())'"
    )));
    ran.assert_probe_ran();
    assert!(
        !ran.all().contains(&m),
        "ESCAPE (unshare: a new namespace was created inside the sandbox)\n{ran}"
    );
}

/// mount(2) at a path that does not exist: EPERM means the call was refused outright,
/// ENOENT that the kernel got as far as looking the path up.
#[backends]
fn escape_mount_tmpfs(backend: &str) {
    let fx = Fixture::new();
    let target = fx.ws("no/such/mountpoint");
    let script = probe_sys(
        r#"
target = sys.argv[1].encode()
r, e = call(165, b"none", target, b"tmpfs", 0, 0)
print("mount", r, e)
r, e = call(430, b"tmpfs", 0)
print("fsopen", r, e)
r, e = call(428, -100, b"/", 1)
print("open_tree", r, e)
r, e = call(161, b"/")
print("chroot", r, e)
"#,
    );
    let ran = fx
        .chitti(backend)
        .py(&script, &[&target.display().to_string()]);
    ran.assert_probe_ran();
    let out = ran.stdout_str();
    for call in ["mount", "fsopen", "open_tree", "chroot"] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{call} ")))
            .unwrap_or_default();
        assert!(
            line.ends_with(" EPERM"),
            "ESCAPE ({call}: not refused by the sandbox): `{line}`\n{ran}"
        );
    }
    assert_absent(&target, "mount", &ran);
}

#[backends]
fn escape_nsenter_host_namespaces(backend: &str) {
    require_tool("nsenter");
    let fx = Fixture::new();
    let decoys = fx.decoys();
    let host = HostProcess::sleep();
    let key = decoys.path(".ssh/id_rsa");
    let ran = fx.chitti(backend).sh(&probe(&format!(
        "nsenter -t {pid} -m -u -i -n cat {k}; nsenter -t {pid} -a cat {k}; nsenter -t 1 -m cat {k}; \
         nsenter --mount=/proc/{pid}/ns/mnt cat {k}",
        pid = host.pid,
        k = sh_quote(&key),
    )));
    ran.assert_probe_ran();
    assert_no_secret(
        &decoys.secret,
        "nsenter into a host process's namespaces",
        &ran,
    );
}

/// Each call must fail with EPERM: the sandbox refuses it.
fn assert_refused(ran: &Ran, calls: &[&str], technique: &str) {
    let out = ran.stdout_str();
    for call in calls {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("{call} ")))
            .unwrap_or_else(|| panic!("the probe did not report {call}\n{ran}"));
        assert!(
            line.ends_with(" EPERM"),
            "ESCAPE ({technique}): `{line}` (expected EPERM)\n{ran}"
        );
    }
}

#[backends]
fn escape_io_uring_setup(backend: &str) {
    let fx = Fixture::new();
    let script = probe_sys(
        r#"
params = ctypes.create_string_buffer(120)
r, e = call(425, 8, params)
print("io_uring_setup", r, e)
r, e = call(426, 0, 0, 0, 0, 0, 0)
print("io_uring_enter", r, e)
r, e = call(427, 0, 0, 0, 0)
print("io_uring_register", r, e)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[]);
    ran.assert_probe_ran();
    assert_refused(
        &ran,
        &["io_uring_setup", "io_uring_enter", "io_uring_register"],
        "io_uring",
    );
}

#[backends]
fn escape_bpf_syscall(backend: &str) {
    let fx = Fixture::new();
    let script = probe_sys(
        r#"
import struct
attr = ctypes.create_string_buffer(struct.pack("IIII", 2, 4, 4, 1) + b"\0" * 112)
r, e = call(321, 0, attr, 128)
print("bpf", r, e)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[]);
    ran.assert_probe_ran();
    assert_refused(&ran, &["bpf"], "bpf(BPF_MAP_CREATE)");
}

#[backends]
fn escape_perf_event_open(backend: &str) {
    let fx = Fixture::new();
    let script = probe_sys(
        r#"
import struct
# type PERF_TYPE_SOFTWARE, size 128, config CPU_CLOCK; disabled, exclude_kernel, exclude_hv
attr = bytearray(128)
struct.pack_into("IIQ", attr, 0, 1, 128, 0)
struct.pack_into("Q", attr, 40, 1 | (1 << 5) | (1 << 6))
buf = ctypes.create_string_buffer(bytes(attr), 128)
r, e = call(298, buf, 0, -1, -1, 0)
print("perf_event_open", r, e)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[]);
    ran.assert_probe_ran();
    assert_refused(&ran, &["perf_event_open"], "perf_event_open");
}

#[backends]
fn escape_userfaultfd(backend: &str) {
    let fx = Fixture::new();
    let script = probe_sys(
        r#"
r, e = call(323, os.O_CLOEXEC | os.O_NONBLOCK | 1)
print("userfaultfd", r, e)
try:
    os.open("/dev/userfaultfd", os.O_RDWR | os.O_CLOEXEC)
    print("OPENED /dev/userfaultfd")
except OSError as err:
    print("/dev/userfaultfd denied:", err)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[]);
    ran.assert_probe_ran();
    assert_refused(&ran, &["userfaultfd"], "userfaultfd(2)");
    assert!(
        !ran.stdout_str().contains("OPENED"),
        "ESCAPE (open /dev/userfaultfd)\n{ran}"
    );
}

/// A key with a secret payload in a session keyring the sandboxed command inherits: the
/// keyctl family must be refused, so the payload stays unreadable.
#[backends]
fn escape_keyctl_read_session_key(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("KEYSECRET");
    let ring_name = CString::new(marker("ring")).unwrap();
    let desc = CString::new(marker("key")).unwrap();
    let kind = CString::new("user").unwrap();
    // A fresh session keyring for this test thread only (the children inherit it).
    let ring = unsafe { libc::syscall(libc::SYS_keyctl, 1, ring_name.as_ptr()) };
    assert!(
        ring >= 0,
        "cannot create a session keyring on the host: {}",
        std::io::Error::last_os_error()
    );
    let serial = unsafe {
        libc::syscall(
            libc::SYS_add_key,
            kind.as_ptr(),
            desc.as_ptr(),
            secret.as_ptr(),
            secret.len(),
            -3i64, // KEY_SPEC_SESSION_KEYRING
        )
    };
    assert!(
        serial >= 0,
        "add_key on the host failed: {}",
        std::io::Error::last_os_error()
    );
    let script = probe_sys(
        r#"
serial = int(sys.argv[1])
buf = ctypes.create_string_buffer(4096)
r, e = call(250, 11, serial, buf, 4096)
print("keyctl", r, e)
if r > 0:
    print("READ", buf.raw[:r].decode(errors="replace"))
r, e = call(250, 11, -3, buf, 4096)
print("keyctl-session", r, e)
try:
    print(open("/proc/keys").read())
except OSError as err:
    print("/proc/keys denied:", err)
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[&serial.to_string()]);
    unsafe { libc::syscall(libc::SYS_keyctl, 3, serial) }; // KEYCTL_REVOKE
    ran.assert_probe_ran();
    assert_no_secret(
        &secret,
        "keyctl(KEYCTL_READ) of an inherited session key",
        &ran,
    );
    assert_refused(&ran, &["keyctl"], "keyctl");
}

/// `mov eax, 20 (getpid); int 0x80; ret` in an executable page below 4 GiB: the i386
/// entry must kill the process before the call returns.
const PY_INT80: &str = r#"
import ctypes, mmap
code = bytes([0xb8, 0x14, 0, 0, 0, 0xcd, 0x80, 0xc3])
m = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40,
              prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
m.write(code)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
f = ctypes.CFUNCTYPE(ctypes.c_long)(addr)
print("calling", flush=True)
r = f()
print("returned", r, flush=True)
"#;

#[backends]
fn escape_int80_32bit_syscall_entry(backend: &str) {
    assert!(
        std::env::consts::ARCH == "x86_64",
        "the int 0x80 probe is x86_64 machine code; this machine is not x86_64"
    );
    let fx = Fixture::new();
    let (baseline, _) = host_python(PY_INT80, &[], &fx.root);
    assert!(
        baseline.contains("returned"),
        "baseline: int 0x80 does not work on this host outside any sandbox (no IA-32 \
         emulation?), so this test cannot show the sandbox blocks it: {baseline}"
    );
    let ran = fx.chitti(backend).py(PY_INT80, &[]);
    ran.assert_ran();
    assert!(
        ran.stdout_str().contains("calling"),
        "the probe did not start\n{ran}"
    );
    assert!(
        !ran.stdout_str().contains("returned"),
        "ESCAPE (int 0x80: the 32-bit syscall entry returned inside the sandbox)\n{ran}"
    );
    assert_eq!(
        ran.code,
        Some(128 + libc::SIGSYS),
        "expected death by SIGSYS\n{ran}"
    );
}

#[backends]
fn escape_x32_syscall_abi(backend: &str) {
    assert!(
        std::env::consts::ARCH == "x86_64",
        "the x32 probe needs x86_64; this machine is not x86_64"
    );
    let fx = Fixture::new();
    let script = py_syscalls(
        r#"
print("calling", flush=True)
r, e = call(0x40000000 | 39)
print("returned", r, e, flush=True)
"#,
    );
    let (baseline, _) = host_python(&script, &[], &fx.root);
    assert!(
        baseline.contains("returned"),
        "baseline: the x32 probe failed on the host: {baseline}"
    );
    let ran = fx.chitti(backend).py(&script, &[]);
    ran.assert_ran();
    assert!(
        ran.stdout_str().contains("calling"),
        "the probe did not start\n{ran}"
    );
    assert!(
        !ran.stdout_str().contains("returned"),
        "ESCAPE (an x32 syscall number returned inside the sandbox)\n{ran}"
    );
}

/// Settings of the whole host under /proc that the kernel lets host uid 0 write by file
/// mode alone, with no capability: a sysctl (`kernel.core_pattern` would run a program of
/// the sandbox's as root outside every namespace; a harmless one stands in for it) and the
/// default IRQ affinity. Judged by the host's values; whatever changed is put back.
#[backends]
fn escape_write_host_kernel_settings(backend: &str) {
    struct Settings(Vec<(&'static str, String)>);
    impl Drop for Settings {
        fn drop(&mut self) {
            for (path, value) in &self.0 {
                if std::fs::read_to_string(path).ok().as_deref() != Some(value) {
                    let _ = std::fs::write(path, value);
                }
            }
        }
    }
    let paths = [
        "/proc/sys/kernel/printk_ratelimit_burst",
        "/proc/irq/default_smp_affinity",
    ];
    let before = Settings(
        paths
            .iter()
            .filter_map(|&p| std::fs::read_to_string(p).ok().map(|v| (p, v)))
            .collect(),
    );
    assert!(
        !before.0.is_empty(),
        "none of {paths:?} can be read here, so the test cannot judge"
    );
    let burst: u64 = before
        .0
        .iter()
        .find(|(p, _)| p.ends_with("burst"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(10);
    let fx = Fixture::new();
    let ran = fx.chitti(backend).sh(&format!(
        "echo {} > /proc/sys/kernel/printk_ratelimit_burst && echo sysctl written; \
         echo 1 > /proc/irq/default_smp_affinity && echo irq affinity written; \
         echo {DONE}",
        burst + 1
    ));
    ran.assert_probe_ran();
    let after: Vec<(&str, String)> = before
        .0
        .iter()
        .map(|(p, _)| (*p, std::fs::read_to_string(p).unwrap_or_default()))
        .collect();
    assert_eq!(
        after, before.0,
        "ESCAPE (a kernel setting of the whole host written from the sandbox)\n{ran}"
    );
}

// ---------------------------------------------------------------------------------------
// Privileges, seen from the host in /proc/<pid>/status of the sandboxed process
// ---------------------------------------------------------------------------------------

/// Runs `sleep <unique>` in the sandbox and returns its /proc/<pid>/status from the host.
fn sandboxed_status(backend: &str, fx: &Fixture) -> (String, Ran) {
    let secs = unique_sleep();
    let _reaper = SleepReaper::new(&[&secs]);
    let running = fx
        .chitti(backend)
        .spawn(&["sh", "-c", &format!("exec sleep {secs}")]);
    let mut pids = Vec::new();
    let found = wait_until(Duration::from_secs(60), || {
        pids = sleepers(&secs);
        !pids.is_empty()
    });
    let status = if found {
        std::fs::read_to_string(format!("/proc/{}/status", pids[0])).unwrap_or_default()
    } else {
        String::new()
    };
    for pid in &pids {
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    let ran = running.wait();
    assert!(
        found,
        "the sandboxed sleep never appeared on the host\n{ran}"
    );
    (status, ran)
}

fn field<'a>(status: &'a str, name: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(str::trim)
        .unwrap_or("")
}

#[backends]
fn escape_capabilities_retained(backend: &str) {
    let fx = Fixture::new();
    let (status, ran) = sandboxed_status(backend, &fx);
    for cap in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert_eq!(
            u64::from_str_radix(field(&status, cap), 16).ok(),
            Some(0),
            "ESCAPE (capabilities kept): {cap} of the sandboxed process\n{status}\n{ran}"
        );
    }
    // Unprivileged, the landlock backend cannot shrink the bounding set (README); as root
    // (and always in bwrap's user namespace) it must be empty.
    if backend == "bwrap" || running_as_root() {
        assert_eq!(
            u64::from_str_radix(field(&status, "CapBnd"), 16).ok(),
            Some(0),
            "ESCAPE (capability bounding set not emptied)\n{status}\n{ran}"
        );
    }
}

#[backends]
fn escape_setuid_exec_without_no_new_privs(backend: &str) {
    let fx = Fixture::new();
    let (status, ran) = sandboxed_status(backend, &fx);
    assert_eq!(
        field(&status, "NoNewPrivs"),
        "1",
        "ESCAPE (no_new_privs not set: a setuid binary would gain privileges)\n{status}\n{ran}"
    );
    assert_eq!(
        field(&status, "Seccomp"),
        "2",
        "ESCAPE (no seccomp filter on the sandboxed process)\n{status}\n{ran}"
    );
}

// ---------------------------------------------------------------------------------------
// System V IPC objects of the host
// ---------------------------------------------------------------------------------------

#[backends]
fn escape_sysv_shm_read_host_segment(backend: &str) {
    let fx = Fixture::new();
    let secret = marker("SHMSECRET");
    let id = unsafe { libc::shmget(libc::IPC_PRIVATE, 4096, libc::IPC_CREAT | 0o600) };
    assert!(
        id >= 0,
        "shmget on the host: {}",
        std::io::Error::last_os_error()
    );
    struct Remove(i32);
    impl Drop for Remove {
        fn drop(&mut self) {
            unsafe { libc::shmctl(self.0, libc::IPC_RMID, std::ptr::null_mut()) };
        }
    }
    let _remove = Remove(id);
    unsafe {
        let p = libc::shmat(id, std::ptr::null(), 0);
        assert!(p as isize != -1, "shmat on the host");
        std::ptr::copy_nonoverlapping(secret.as_ptr(), p as *mut u8, secret.len());
        libc::shmdt(p);
    }
    let script = probe_py(
        r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
p = libc.shmat(int(sys.argv[1]), None, 0o10000)
if p is None or p == ctypes.c_void_p(-1).value:
    print("shmat denied, errno", ctypes.get_errno())
else:
    print("READ", ctypes.string_at(p, 64).split(b"\0")[0].decode(errors="replace"))
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[&id.to_string()]);
    ran.assert_probe_ran();
    assert_no_secret(&secret, "shmat a host SysV shared memory segment", &ran);
}

#[backends]
fn escape_sysv_msgqueue_send_to_host(backend: &str) {
    let fx = Fixture::new();
    let q = unsafe { libc::msgget(libc::IPC_PRIVATE, libc::IPC_CREAT | 0o600) };
    assert!(
        q >= 0,
        "msgget on the host: {}",
        std::io::Error::last_os_error()
    );
    struct Remove(i32);
    impl Drop for Remove {
        fn drop(&mut self) {
            unsafe { libc::msgctl(self.0, libc::IPC_RMID, std::ptr::null_mut()) };
        }
    }
    let _remove = Remove(q);
    let script = probe_py(
        r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
class Msg(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("text", ctypes.c_char * 64)]
m = Msg(1, b"ESCAPED-THROUGH-SYSV")
r = libc.msgsnd(int(sys.argv[1]), ctypes.byref(m), 64, 0o4000)
print("msgsnd", r, ctypes.get_errno())
"#,
    );
    let ran = fx.chitti(backend).py(&script, &[&q.to_string()]);
    ran.assert_probe_ran();
    #[repr(C)]
    struct Msg {
        mtype: libc::c_long,
        text: [u8; 64],
    }
    let mut m = Msg {
        mtype: 0,
        text: [0; 64],
    };
    let n = unsafe { libc::msgrcv(q, (&mut m as *mut Msg).cast(), 64, 0, libc::IPC_NOWAIT) };
    assert!(
        n < 0,
        "ESCAPE (msgsnd into a host SysV message queue): the host received {:?}\n{ran}",
        String::from_utf8_lossy(&m.text[..n.max(0) as usize])
    );
}

/// SysV IPC objects the sandbox creates (a 64 MiB shared memory segment, a message queue,
/// a semaphore set, under keys the test chose) must not outlive the call in the host's IPC
/// namespace: a segment persists without any process and holds memory.
#[backends]
fn escape_sysv_ipc_objects_outlive_call(backend: &str) {
    let fx = Fixture::new();
    let base = (random_u64() % 0x3fff_0000) as i32 + 0x1000;
    let (shm_key, msg_key, sem_key) = (base, base + 1, base + 2);
    let script = probe_py(
        r#"
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
shm, msg, sem = (int(a) for a in sys.argv[1:4])
print("shmget", libc.shmget(shm, 64 << 20, 0o1000 | 0o600), ctypes.get_errno())
print("msgget", libc.msgget(msg, 0o1000 | 0o600), ctypes.get_errno())
print("semget", libc.semget(sem, 1, 0o1000 | 0o600), ctypes.get_errno())
"#,
    );
    let ran = fx.chitti(backend).py(
        &script,
        &[
            &shm_key.to_string(),
            &msg_key.to_string(),
            &sem_key.to_string(),
        ],
    );
    let shm = unsafe { libc::shmget(shm_key, 0, 0) };
    let msg = unsafe { libc::msgget(msg_key, 0) };
    let sem = unsafe { libc::semget(sem_key, 0, 0) };
    unsafe {
        if shm >= 0 {
            libc::shmctl(shm, libc::IPC_RMID, std::ptr::null_mut());
        }
        if msg >= 0 {
            libc::msgctl(msg, libc::IPC_RMID, std::ptr::null_mut());
        }
        if sem >= 0 {
            libc::semctl(sem, 0, libc::IPC_RMID);
        }
    }
    ran.assert_probe_ran();
    assert!(
        shm < 0 && msg < 0 && sem < 0,
        "ESCAPE (SysV IPC objects created in the sandbox persist in the host's IPC namespace): \
         shm id {shm}, msg id {msg}, sem id {sem}\n{ran}"
    );
}

/// POSIX message queues live in the host's IPC namespace: the sandbox must neither send to
/// a host queue nor create one that outlives the call.
#[backends]
fn escape_posix_mqueue_send_to_host(backend: &str) {
    let fx = Fixture::new();
    let lib = r#"
import ctypes, os, sys
try:
    rt = ctypes.CDLL(None, use_errno=True); rt.mq_open
except AttributeError:
    rt = ctypes.CDLL("librt.so.1", use_errno=True)
rt.mq_open.restype = ctypes.c_int
"#;
    let name = format!("/{}", marker("mq"));
    let created = format!("/{}", marker("mq-created"));
    // The host's queue, with a helper that receives or unlinks.
    let host = format!(
        "{lib}\nq = rt.mq_open(sys.argv[1].encode(), os.O_CREAT | os.O_RDWR | os.O_NONBLOCK, 0o600, None)\nprint('opened' if q >= 0 else 'failed %d' % ctypes.get_errno())"
    );
    let (out, _) = host_python(&host, &[&name], &fx.root);
    assert!(
        out.contains("opened"),
        "cannot create a POSIX message queue on the host: {out}"
    );
    let script = probe_py(&format!(
        "{lib}\nq = rt.mq_open(sys.argv[1].encode(), os.O_WRONLY | os.O_NONBLOCK)\nprint('mq_open', q, ctypes.get_errno())\n\
         if q >= 0: print('mq_send', rt.mq_send(q, b'ESCAPED', 7, 0), ctypes.get_errno())\n\
         c = rt.mq_open(sys.argv[2].encode(), os.O_CREAT | os.O_WRONLY, 0o600, None)\nprint('mq_create', c, ctypes.get_errno())"
    ));
    let ran = fx.chitti(backend).py(&script, &[&name, &created]);
    let receive = format!(
        "{lib}\nq = rt.mq_open(sys.argv[1].encode(), os.O_RDONLY | os.O_NONBLOCK)\nbuf = ctypes.create_string_buffer(8192)\n\
         n = rt.mq_receive(q, buf, 8192, None)\nprint('received', n, buf.raw[:max(n, 0)])\n\
         print('created-exists', rt.mq_open(sys.argv[2].encode(), os.O_RDONLY) >= 0)\n\
         rt.mq_unlink(sys.argv[1].encode()); rt.mq_unlink(sys.argv[2].encode())"
    );
    let (seen, _) = host_python(&receive, &[&name, &created], &fx.root);
    ran.assert_probe_ran();
    assert!(
        seen.contains("received -1"),
        "ESCAPE (mq_send into a host POSIX message queue): the host saw {seen}\n{ran}"
    );
    assert!(
        seen.contains("created-exists False"),
        "ESCAPE (a POSIX message queue created in the sandbox outlives the call): {seen}\n{ran}"
    );
}

// ---------------------------------------------------------------------------------------
// Nothing outlives the call
// ---------------------------------------------------------------------------------------

/// Runs `spawn` (which starts `sleep <secs>` somehow), waits until the host sees the
/// sleeper, lets the call end, and requires that no sleeper survives it.
fn daemon_escape(backend: &str, technique: &str, spawn: &str, secs: &str) {
    let fx = Fixture::new();
    let secs_owned = secs.to_string();
    let _reaper = SleepReaper::new(&[&secs_owned]);
    let script = probe(&format!(
        "{spawn}\ntouch ready\ni=0; while [ ! -e go ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done"
    ));
    let running = fx.chitti(backend).spawn(&["sh", "-c", &script]);
    let started = wait_until(Duration::from_secs(60), || {
        exists(&fx.ws("ready")) && !sleepers(secs).is_empty()
    });
    write(&fx.ws("go"), "");
    let ran = running.wait();
    assert!(
        started,
        "the probe never started its `sleep {secs}` ({technique})\n{ran}"
    );
    ran.assert_probe_ran();
    assert_no_survivors(&[&secs_owned], Duration::from_secs(2), technique, &ran);
}

#[backends]
fn escape_setsid_daemon_outlives_call(backend: &str) {
    let s = unique_sleep();
    daemon_escape(
        backend,
        "setsid daemon",
        &format!("setsid sleep {s} >/dev/null 2>&1 </dev/null &\nsetsid -f sleep {s} >/dev/null 2>&1 </dev/null"),
        &s,
    );
}

#[backends]
fn escape_double_fork_daemon_outlives_call(backend: &str) {
    let s = unique_sleep();
    daemon_escape(
        backend,
        "double-fork daemon",
        &format!(
            "(sh -c 'sleep {s} >/dev/null 2>&1 </dev/null &' &)\n\
             {PYTHON} -c '\nimport os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        \
             fd = os.open(\"/dev/null\", os.O_RDWR)\n        [os.dup2(fd, i) for i in (0, 1, 2)]\n        \
             os.execvp(\"sleep\", [\"sleep\", \"{s}\"])\n    os._exit(0)\nos.wait()\n'"
        ),
        &s,
    );
}

/// More orphans than a 4 KiB listing of the supervisor's children holds (700 process ids
/// of up to 7 digits and a space): every one is killed, and none is named by a number
/// read short.
#[backends]
fn escape_many_orphans_outlive_call(backend: &str) {
    let s = unique_sleep();
    daemon_escape(
        backend,
        "700 orphaned sleepers",
        &format!(
            "i=0; while [ $i -lt 700 ]; do (sleep {s} >/dev/null 2>&1 </dev/null &); i=$((i+1)); done"
        ),
        &s,
    );
}

#[backends]
fn escape_nohup_background_outlives_call(backend: &str) {
    let s = unique_sleep();
    daemon_escape(
        backend,
        "nohup background job",
        &format!("nohup sleep {s} >/dev/null 2>&1 </dev/null &\ntrap '' HUP; sleep {s} >/dev/null 2>&1 </dev/null &"),
        &s,
    );
}

#[backends]
fn escape_timeout_leaves_process_tree(backend: &str) {
    let fx = Fixture::new();
    let (a, b) = (unique_sleep(), unique_sleep());
    let _reaper = SleepReaper::new(&[&a, &b]);
    let started = Instant::now();
    let ran = fx.chitti(backend).timeout(1).json().sh(&format!(
        "setsid sleep {a} >/dev/null 2>&1 </dev/null & touch started; exec sleep {b}"
    ));
    let elapsed = started.elapsed();
    assert!(exists(&fx.ws("started")), "the probe never started\n{ran}");
    assert!(
        elapsed <= Duration::from_secs(5),
        "a 1 s timeout took {elapsed:?} to return\n{ran}"
    );
    assert_eq!(ran.code, Some(124), "a timed-out call exits 124\n{ran}");
    assert_eq!(ran.json()["timed_out"], serde_json::json!(true), "{ran}");
    assert_no_survivors(
        &[&a, &b],
        Duration::from_secs(2),
        "processes outlive a timeout",
        &ran,
    );
}

/// A chain of processes 300 deep whose last one keeps 40 threads spinning, so that the
/// supervisor, which kills the tree, gets little CPU, and a timeout of 2 s: the whole
/// chain dies with the call. (Killing one generation per round, the supervisor took longer
/// than chitti waits for it, chitti then killed the supervisor, and the rest of the chain
/// lived on, writing the workspace: a review found this.)
#[backends]
fn escape_deep_busy_process_chain_outlives_a_timeout(backend: &str) {
    require_tool("cc");
    let fx = Fixture::new();
    let unique = unique_sleep();
    write(
        &fx.ws("chain.c"),
        r#"#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include <fcntl.h>
static void *spin(void *a) { for (;;) {} return a; }
int main(int argc, char **argv) {
    int depth = atoi(argv[1]), threads = atoi(argv[2]);
    for (int d = 0; d < depth; d++) {
        pid_t p = fork();
        if (p > 0) { for (;;) pause(); }
        if (p < 0) { usleep(1000); d--; }
    }
    pthread_t t;
    for (int i = 0; i < threads; i++) pthread_create(&t, 0, spin, 0);
    close(open("bottom", O_WRONLY | O_CREAT, 0644));
    for (;;) pause();
}
"#,
    );
    compile_c(&fx, "chain");
    // As `pids_with_argv` matches it (the program by its file name).
    let argv = ["chain", "300", "40", unique.as_str()];
    let _cleanup = KillOnDrop(&argv);
    // Its output goes nowhere: a survivor holding chitti's pipes would keep this test
    // waiting instead of failing.
    let ran = fx.chitti(backend).timeout(2).run(&[
        "sh",
        "-c",
        &format!("exec ./{} >/dev/null 2>&1", argv.join(" ")),
    ]);
    assert!(
        exists(&fx.ws("bottom")),
        "the chain never reached its end
{ran}"
    );
    assert_eq!(
        ran.code,
        Some(124),
        "the call was to time out
{ran}"
    );
    let gone = wait_until(Duration::from_secs(2), || pids_with_argv(&argv).is_empty());
    assert!(
        gone,
        "ESCAPE (a deep chain with busy threads): {} sandboxed processes still alive 2 s \
         after chitti returned\n{ran}",
        pids_with_argv(&argv).len()
    );
}

/// Builds the workspace's `NAME.c` into `NAME` with cc.
fn compile_c(fx: &Fixture, name: &str) {
    let built = std::process::Command::new("cc")
        .args(["-O1", "-pthread", "-o", name, &format!("{name}.c")])
        .current_dir(&fx.ws)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// Kills, when dropped, every process whose arguments are these (what a failing test
/// left alive).
struct KillOnDrop<'a>(&'a [&'a str]);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        for _ in 0..200 {
            let left = pids_with_argv(self.0);
            if left.is_empty() {
                break;
            }
            for pid in left {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A family of processes that forks as fast as it can: each member keeps cloning
/// children that share its memory (no page tables to copy: a few microseconds each); a
/// child that outlives its parent takes its place as a member, up to 16 of them. At most
/// 128 children per memory (eight of them) live at once, some 1,000 processes in all,
/// well below the process limit a test as an unprivileged user shares with the others. Every
/// member appends a line to `alive` ten times a second.
const FORK_RACER: &str = r#"#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
enum { STACKS = 128, STACK = 16384, MEMBERS = 16 };
/* Per memory (a fork copies them): the children's stacks. */
static char *stacks;
static volatile int stack_used[STACKS];
static volatile pid_t parent_of[STACKS];
/* Shared by the whole family: who the members are, and when each last showed it lives. */
static volatile pid_t *member_pid;
static volatile long *member_beat;
static long now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000 + t.tv_nsec / 1000;
}
static pid_t me(void) { return (pid_t)syscall(SYS_getpid); }
/* Frees the stack it runs on and exits without touching it again. */
static void release_and_exit(int s) {
#if defined(__x86_64__)
    __asm__ volatile("movl $0, (%0)\n\tmovl $60, %%eax\n\txorl %%edi, %%edi\n\tsyscall"
                     :: "r"(&stack_used[s]) : "rax", "rdi", "memory");
#endif
    syscall(SYS_exit, 0); /* elsewhere the stack stays taken */
    __builtin_unreachable();
}
/* A member's place: empty, or one whose member has not beaten for 3 ms (dead). */
static int claim(void) {
    for (int m = 0; m < MEMBERS; m++) {
        pid_t p = member_pid[m];
        if ((p == 0 || now_us() - member_beat[m] > 3000)
            && __sync_bool_compare_and_swap(&member_pid[m], p, me())) {
            member_beat[m] = now_us();
            return m;
        }
    }
    return -1;
}
static int child(void *arg);
static int member(int m) {
    long stamped = 0;
    int next = 0;
    for (;;) {
        member_beat[m] = now_us();
        if (now_us() - stamped > 100000) {
            stamped = now_us();
            int fd = open("alive", O_WRONLY | O_APPEND | O_CREAT, 0644);
            if (fd >= 0) { write(fd, "alive\n", 6); close(fd); }
        }
        int k;
        for (k = 0; k < STACKS; k++) {
            next = (next + 1) % STACKS;
            if (!stack_used[next] && __sync_bool_compare_and_swap(&stack_used[next], 0, 1)) break;
        }
        if (k == STACKS) { usleep(100); continue; }
        parent_of[next] = me();
        if (clone(child, stacks + (long)(next + 1) * STACK, CLONE_VM | SIGCHLD, (void *)(long)next) < 0) {
            stack_used[next] = 0;
            usleep(100);
        }
    }
}
/* Lives 20 ms while its parent does; orphaned, it takes a dead member's place. */
static int child(void *arg) {
    int s = (int)(long)arg;
    long end = now_us() + 20000;
    while (now_us() < end && syscall(SYS_getppid) == parent_of[s]) {
        struct timespec t = {0, 200000};
        nanosleep(&t, 0);
    }
    if (syscall(SYS_getppid) == parent_of[s]) release_and_exit(s);
    int m = -1;
    for (long until = now_us() + 6000; m < 0 && now_us() < until;) {
        m = claim();
        if (m < 0) usleep(300);
    }
    if (m < 0) release_and_exit(s);
    return member(m);
}
int main(void) {
    stacks = mmap(0, (long)STACKS * STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    member_pid = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    member_beat = (volatile long *)(member_pid + MEMBERS);
    signal(SIGCHLD, SIG_IGN);
    for (int i = 1; i < MEMBERS / 2; i++)
        if (fork() == 0) break;
    int m;
    while ((m = claim()) < 0) usleep(100);
    return member(m);
}
"#;

/// Held by a test that starts hundreds of processes: RLIMIT_NPROC counts every process of
/// the real uid, and two such tests at once could spend it for each other.
fn one_bomb_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Has `call` run the fork-racing family, as `sh -c SCRIPT` with `{racer}` in the script
/// standing for the family's command, and requires that none of it outlives the call (no
/// member alive, nothing more written to the workspace) and that the call ends within
/// 15 s, less the time chitti and its helpers were left waiting for a CPU (the family can
/// hold the whole machine up for longer: see `Spawned::wait_counting_cpu_waits`).
/// (Killing the tree by walking /proc lost this race on the landlock backend: a review's
/// family lived on after the call, writing the workspace, while chitti said every process
/// was killed.)
fn fork_racing_family_dies_with_the_call(
    script: &str,
    call: impl FnOnce(&Fixture, &str) -> Spawned,
) -> Ran {
    require_tool("cc");
    let _one = one_bomb_at_a_time();
    let fx = Fixture::new();
    write(&fx.ws("racer.c"), FORK_RACER);
    compile_c(&fx, "racer");
    let unique = unique_sleep();
    let argv = ["racer", unique.as_str()];
    let _cleanup = KillOnDrop(&argv);
    let racer = format!("./{} >/dev/null 2>&1", argv.join(" "));
    let started = Instant::now();
    let (ran, waited) = call(&fx, &script.replace("{racer}", &racer)).wait_counting_cpu_waits();
    let took = started.elapsed();
    let alive = || std::fs::metadata(fx.ws("alive")).map_or(0, |m| m.len());
    assert!(alive() > 0, "the family never ran\n{ran}");
    // Whatever is still alive is seen within the bound, and writes meanwhile.
    let gone = wait_until(Duration::from_secs(2), || pids_with_argv(&argv).is_empty());
    let written = alive();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        gone && alive() == written,
        "ESCAPE (a family forking as fast as it can): {} of its processes alive 2 s after \
         chitti returned, {} bytes written to the workspace since\n{ran}",
        pids_with_argv(&argv).len(),
        alive() - written
    );
    // The walk took up to a minute to win, when it did.
    assert!(
        took.saturating_sub(waited) < Duration::from_secs(15),
        "the call took {took:?} to end, {waited:?} of which chitti and its helpers were \
         left waiting for a CPU\n{ran}"
    );
    ran
}

/// ... killed on a timeout, the family's first member being the command.
#[backends]
fn escape_fork_racing_family_outlives_a_timeout(backend: &str) {
    let ran = fork_racing_family_dies_with_the_call("exec {racer}", |fx, script| {
        fx.chitti(backend).timeout(2).spawn(&["sh", "-c", script])
    });
    assert_eq!(ran.code, Some(124), "the call was to time out\n{ran}");
}

/// ... left behind by a command that exits.
#[backends]
fn escape_fork_racing_family_outlives_its_command(backend: &str) {
    let ran = fork_racing_family_dies_with_the_call(
        "{racer} & i=0; while [ ! -s alive ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done",
        |fx, script| fx.chitti(backend).spawn(&["sh", "-c", script]),
    );
    assert_eq!(ran.code, Some(0), "{ran}");
}

/// A command that keeps the lock of its own stdout pipe: a `splice` from an idle socket
/// into the pipe waits for data with the lock taken. A thread feeds the socket a byte now
/// and then at first, so that the pipe's reader wakes and wants the lock while the splice
/// takes it again at once. Another thread appends to `alive` ten times a second.
const PIPE_LOCK_HOLDER: &str = r#"#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
static int sv[2];
static void *feed(void *a) {
    for (int i = 0; i < 200; i++) { write(sv[1], "x", 1); usleep(5000); }
    return a;
}
static void *stamp(void *a) {
    for (;;) {
        int fd = open("alive", O_WRONLY | O_APPEND | O_CREAT, 0644);
        if (fd >= 0) { write(fd, "alive\n", 6); close(fd); }
        usleep(100000);
    }
    return a;
}
int main(int argc, char **argv) {
    int out = atoi(argv[1]);
    pthread_t t;
    socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
    pthread_create(&t, 0, feed, 0);
    pthread_create(&t, 0, stamp, 0);
    for (;;) splice(sv[0], 0, out, 0, 1, 0);
}
"#;

/// A command holding the lock of the pipe chitti reads its output from (stdout captured
/// with --json, or stderr, which chitti forwards): a read of that pipe sleeps where no
/// signal reaches it, SIGKILL included. chitti read on the thread that runs the timeout,
/// and so froze for good, the call's processes writing the workspace (a review). Now the
/// call still times out, and nothing is left of it.
#[backends]
fn escape_a_held_pipe_lock_freezes_chitti(backend: &str) {
    require_tool("cc");
    let fx = Fixture::new();
    write(&fx.ws("holder.c"), PIPE_LOCK_HOLDER);
    compile_c(&fx, "holder");
    for fd in ["1", "2"] {
        let unique = unique_sleep();
        let argv = ["holder", fd, unique.as_str()];
        let _cleanup = KillOnDrop(&argv);
        let _ = std::fs::remove_file(fx.ws("alive"));
        let script = format!("exec ./{}", argv.join(" "));
        let mut running = fx
            .chitti(backend)
            .timeout(2)
            .json()
            .spawn(&["sh", "-c", &script]);
        let ended = wait_until(Duration::from_secs(15), || running.finished());
        if !ended {
            // Let chitti go (its reads end with the holder), then fail.
            drop(_cleanup);
            let ran = running.wait();
            panic!("ESCAPE (fd {fd}): chitti was still stuck 15 s into a 2 s call\n{ran}");
        }
        let ran = running.wait();
        assert!(
            exists(&fx.ws("alive")),
            "the holder never ran (fd {fd})\n{ran}"
        );
        assert_eq!(
            ran.code,
            Some(124),
            "the call was to time out (fd {fd})\n{ran}"
        );
        let gone = wait_until(Duration::from_secs(2), || pids_with_argv(&argv).is_empty());
        assert!(
            gone,
            "ESCAPE (fd {fd}): the holder outlived the call\n{ran}"
        );
    }
}

/// A bounded "fork bomb": 300 background sleeps under a profile limiting processes to 128.
/// Unprivileged, at most 128 may exist (RLIMIT_NPROC; README: it does not bind uid 0);
/// in every case none may survive the call.
#[backends]
fn escape_fork_bomb_bounded_by_limits_and_killed(backend: &str) {
    // RLIMIT_NPROC counts every process of the real uid. The two backends' bombs must not
    // share that budget, and as an unprivileged user it must not already be spent on
    // zombies: bwrap leaves its inner process to PID 1, which on some machines (this
    // project's CI VM) reaps only every second or so.
    let _one = one_bomb_at_a_time();
    if !running_as_root() {
        let settled = wait_until(Duration::from_secs(30), || processes_of_my_uid() < 64);
        assert!(
            settled,
            "this uid still has {} processes after 30 s; the fork bomb needs room under 128",
            processes_of_my_uid()
        );
    }
    let fx = Fixture::new();
    let profile = fx.profile("limits", "[limits]\nmax_processes = 128\n");
    let secs = unique_sleep();
    let _reaper = SleepReaper::new(&[&secs]);
    let script = probe_py(
        r#"
import os, subprocess, sys, time
started = 0
for i in range(300):
    try:
        subprocess.Popen(["sleep", sys.argv[1]], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started += 1
    except OSError as e:
        pass
print("started", started, flush=True)
open("ready", "w").close()
deadline = time.time() + 60
while not os.path.exists("go") and time.time() < deadline:
    time.sleep(0.02)
"#,
    );
    let running = fx
        .chitti(backend)
        .profile(&profile)
        .spawn(&[PYTHON, "-c", &script, &secs]);
    let ready = wait_until(Duration::from_secs(120), || exists(&fx.ws("ready")));
    // Let the last children finish exec'ing before counting.
    std::thread::sleep(Duration::from_millis(300));
    let peak = sleepers(&secs).len();
    write(&fx.ws("go"), "");
    let ran = running.wait();
    assert!(ready, "the fork bomb never got ready\n{ran}");
    ran.assert_probe_ran();
    assert!(peak > 0, "the probe started no process at all\n{ran}");
    if !running_as_root() {
        assert!(
            peak <= 128,
            "ESCAPE (fork bomb beyond max_processes = 128): the host saw {peak} sandboxed sleeps\n{ran}"
        );
    }
    assert_no_survivors(
        &[&secs],
        Duration::from_secs(2),
        "fork bomb survivors",
        &ran,
    );
}

/// chitti is killed (SIGKILL, or SIGTERM) mid-call: nothing sandboxed may survive it.
fn chitti_dies(backend: &str, signal: i32, technique: &str) {
    let fx = Fixture::new();
    let (a, b) = (unique_sleep(), unique_sleep());
    let _reaper = SleepReaper::new(&[&a, &b]);
    let script =
        format!("setsid sleep {a} >/dev/null 2>&1 </dev/null & sleep {b} & touch ready; wait");
    let running = fx.chitti(backend).spawn(&["sh", "-c", &script]);
    let up = wait_until(Duration::from_secs(60), || {
        exists(&fx.ws("ready")) && !sleepers(&a).is_empty() && !sleepers(&b).is_empty()
    });
    running.signal(signal);
    let ran = running.wait();
    assert!(up, "the probe's sleepers never appeared\n{ran}");
    assert_no_survivors(&[&a, &b], Duration::from_secs(5), technique, &ran);
}

#[backends]
fn escape_sigkill_chitti_leaves_sandboxed_survivor(backend: &str) {
    chitti_dies(backend, libc::SIGKILL, "chitti killed with SIGKILL");
}

#[backends]
fn escape_sigterm_chitti_leaves_sandboxed_survivor(backend: &str) {
    chitti_dies(backend, libc::SIGTERM, "chitti stopped with SIGTERM");
}
