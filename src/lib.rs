//! chitti: a command-line agent whose every shell call runs inside an OS-native sandbox.
//!
//! Layers, top to bottom (arrows only point down): `cli` → `agent`/`mcp` → `tools` →
//! `exec` → `sandbox` → `policy`. `name_service` is a leaf that `policy` and `provider` use;
//! `canonical` and `dir_entries` are leaves for every layer.
//!
//! Two binaries link this library: `chitti` (src/main.rs: the sandbox commands and doctor,
//! what every sandboxed call starts) and `chitti-agent` (src/bin/chitti-agent.rs: `run`,
//! `chat` and `mcp`, which `chitti` execs); `cli::agent_binary` says why.

pub mod agent;
pub mod bounded_read;
pub mod canonical;
pub mod cli;
pub mod config;
pub mod dir_entries;
pub mod exec;
#[cfg(test)]
mod golden;
pub mod mcp;
pub mod name_service;
pub mod policy;
pub mod process_start;
pub mod provider;
pub mod sandbox;
pub mod tools;
pub mod verify;

/// With musl, Rust's allocations go to dlmalloc (Cargo.toml says why), in both binaries
/// and in the tests.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// Makes the allocator usable in a child forked while other threads run. dlmalloc guards
/// its heap with one lock; a fork while another thread holds it copies the lock held, with
/// no thread left to release it, and the landlock supervisor (a fork that allocates) then
/// waits forever. This registers fork handlers that take the lock around every `fork`.
/// (glibc's and musl's own allocators do this themselves.) Idempotent; call it right
/// before forking.
///
/// A process with a single thread needs no handlers: that thread, about to fork, is not
/// inside the allocator. Nor does it pay for them: musl's `pthread_atfork` makes the first
/// allocation of musl's own allocator, some four system calls and four page faults before
/// every one-shot call's fork.
pub fn allocator_survives_fork() {
    #[cfg(target_env = "musl")]
    {
        #[cfg(target_os = "linux")]
        if sandbox::linux::supervisor::single_threaded() {
            return;
        }
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers the handlers once; they only take and release dlmalloc's lock.
        REGISTERED.call_once(|| unsafe { dlmalloc::enable_alloc_after_fork() });
    }
}

/// For tests: sets a resource limit (soft and hard) of this process; whether it took.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn limit_resource(resource: sandbox::rlimits::Resource, to: u64) -> bool {
    let limit = libc::rlimit {
        rlim_cur: to,
        rlim_max: to,
    };
    unsafe { libc::setrlimit(resource, &limit) == 0 }
}

/// For tests: runs git in `dir` with a fixed identity and branch name and neither the
/// system's nor the user's config; panics with git's error when it fails.
#[cfg(test)]
pub(crate) fn test_git(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// For tests: in a forked child, `setup`, then `check`, whose answer becomes the exit
/// status (0 when it holds, 3 when `setup` failed, 2 when either panicked, 1 otherwise).
/// For what must not touch the test process: its namespaces, its limits.
#[cfg(all(test, target_os = "linux"))]
pub(crate) fn in_a_child(setup: impl FnOnce() -> bool, check: impl FnOnce() -> bool) -> i32 {
    allocator_survives_fork();
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // Never back into the test harness's copy.
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if !setup() {
                3
            } else if check() {
                0
            } else {
                1
            }
        }));
        unsafe { libc::_exit(code.unwrap_or(2)) };
    }
    let mut status = 0;
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    libc::WEXITSTATUS(status)
}
