//! `chitti doctor`: what this machine supports, and which backend `auto` picks, and why.

use serde_json::json;

use crate::policy::ChittiDirs;
use crate::sandbox::{self, capabilities, BackendChoice, Capabilities};

#[inline(never)] // see cli::run
pub fn run(as_json: bool) -> i32 {
    let caps = Capabilities::get();
    let state_dir = ChittiDirs::from_env()
        .map(|d| d.state)
        .unwrap_or_else(|_| std::env::temp_dir());
    // Doctor always probes for real, and refreshes the cache `auto` relies on.
    let bwrap_probe = match (caps.bwrap(), caps.bwrap_static_blocker()) {
        (_, Some(why)) => Err(why),
        (Some(b), None) => {
            let cache = capabilities::ProbeCache::new(&state_dir, &b.path);
            let result = capabilities::probe_bwrap(&b.path);
            match &result {
                Ok(()) => cache.record(),
                Err(_) => cache.forget(),
            }
            result
        }
        (None, None) => Err("bubblewrap is not installed".into()),
    };
    let landlock = caps.landlock_blocker();
    let selection = sandbox::select(BackendChoice::Auto, caps, &state_dir);
    // run, chat and mcp need it; the sandbox commands do not.
    let agent = super::agent_binary::path();
    let agent_problem = agent.as_ref().ok().and_then(|p| agent_binary_problem(p));
    let agent_present = agent.is_ok() && agent_problem.is_none();

    if as_json {
        let report = json!({
            "os": caps.os,
            "arch": caps.arch,
            "kernel": caps.kernel(),
            "running_as_root": caps.running_as_root(),
            "bwrap": {
                "path": caps.bwrap().map(|b| b.path.display().to_string()),
                "setuid": caps.bwrap().map(|b| b.setuid),
                "usable": bwrap_probe.is_ok(),
                "blocker": bwrap_probe.as_ref().err(),
            },
            "user_namespaces": caps.user_namespaces(),
            "landlock": {
                "abi": caps.landlock_abi().ok(),
                "usable": landlock.is_none(),
                "blocker": landlock,
                "hides_secrets_with_mounts": mounts_blocker().is_none(),
            },
            "seccomp": caps.seccomp(),
            "agent_binary": {
                "path": agent.as_ref().ok().map(|p| p.display().to_string()),
                "present": agent_present,
                "problem": agent_problem,
            },
            "auto": match &selection {
                Ok(s) => json!({"backend": s.backend.name(), "reason": s.reason}),
                Err(e) => json!({"backend": null, "reason": e.to_string()}),
            },
        });
        super::out(&format!("{report:#}\n"));
        return if selection.is_ok() { 0 } else { 125 };
    }

    let yes_no = |ok: bool| if ok { "yes" } else { "no" };
    let mut o = String::new();
    macro_rules! say {
        () => { o.push('\n') };
        ($($t:tt)*) => {{ o.push_str(&format!($($t)*)); o.push('\n'); }};
    }
    say!("chitti doctor");
    say!(
        "  system            {} {} (kernel {})",
        caps.os,
        caps.arch,
        caps.kernel().unwrap_or("?")
    );
    say!("  running as root   {}", yes_no(caps.running_as_root()));
    match caps.bwrap() {
        Some(b) => say!(
            "  bubblewrap        {}{}",
            b.path.display(),
            if b.setuid { " (setuid)" } else { "" }
        ),
        None => say!("  bubblewrap        not installed"),
    }
    let ns = caps.user_namespaces();
    let show = |v: Option<bool>| match v {
        Some(true) => "1",
        Some(false) => "0",
        None => "absent",
    };
    say!(
        "  user namespaces   max_user_namespaces={} unprivileged_userns_clone={} \
         apparmor_restrict_unprivileged_userns={}",
        ns.max_user_namespaces
            .map(|v| v.to_string())
            .unwrap_or_else(|| "absent".into()),
        show(ns.unprivileged_userns_clone),
        show(ns.apparmor_restrict_unprivileged_userns),
    );
    match caps.landlock_abi() {
        Ok(v) => say!("  landlock          ABI {v}"),
        Err(e) => say!("  landlock          unavailable: {e}"),
    }
    say!("  seccomp           {}", yes_no(caps.seccomp()));
    match (&agent, &agent_problem) {
        (Ok(path), None) => say!("  agent binary      {} (run, chat, mcp)", path.display()),
        (Ok(path), Some(problem)) => say!(
            "  agent binary      UNUSABLE: {}: {problem} (run, chat and mcp need it; `cargo \
             build --release` builds it beside chitti)",
            path.display()
        ),
        (Err(why), _) => say!("  agent binary      unknown: {why}"),
    }
    say!();
    match &bwrap_probe {
        Ok(()) => say!("  backend bwrap     usable (probed: namespaces, seccomp, cap drop)"),
        Err(why) => say!("  backend bwrap     UNUSABLE: {why}"),
    }
    match &landlock {
        None => say!("  backend landlock  usable{}", landlock_root_note()),
        Some(why) => say!("  backend landlock  UNUSABLE: {why}"),
    }
    say!();
    let code = match &selection {
        Ok(s) => {
            say!("  auto picks        {} ({})", s.backend.name(), s.reason);
            0
        }
        Err(e) => {
            say!("  auto picks        nothing: {e}");
            125
        }
    };
    super::out(&o);
    code
}

/// As root, how the Landlock backend keeps root's secrets unreadable.
fn landlock_root_note() -> String {
    if !nix::unistd::geteuid().is_root() {
        return String::new();
    }
    match mounts_blocker() {
        None => "; as root it hides secrets with mounts in a private mount namespace".into(),
        Some(why) => format!(
            "; as root it grants every neighbour of a secret as a rule of its own \
             (slower; no mounts: {why})"
        ),
    }
}

#[cfg(target_os = "linux")]
fn mounts_blocker() -> Option<&'static str> {
    crate::sandbox::linux::masks::blocker()
}

#[cfg(not(target_os = "linux"))]
fn mounts_blocker() -> Option<&'static str> {
    Some("not Linux")
}

/// Why the agent binary at `path` cannot serve run, chat and mcp, if it cannot: it is
/// started (`--version`), as those commands would start it, and must be this version.
fn agent_binary_problem(path: &std::path::Path) -> Option<String> {
    let child = std::process::Command::new(path)
        .arg("--version")
        .env(super::agent_binary::EXPECTS, super::agent_binary::SOURCE_ID)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some("missing".into()),
        Err(e) => return Some(format!("cannot be started ({e})")),
    };
    // Bounded: a file that starts but never answers must not hang doctor.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while child.try_wait().ok().flatten().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Some("`--version` did not answer within 10 s".into());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = match child.wait_with_output() {
        Ok(out) => out,
        Err(e) => return Some(format!("cannot be read ({e})")),
    };
    let expected = format!("chitti {}", env!("CARGO_PKG_VERSION"));
    let said = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(126) {
        return Some(
            "it was built from other sources than this chitti (a partial upgrade?): \
                     install both from one build"
                .into(),
        );
    }
    if !out.status.success() {
        return Some(format!("`--version` failed ({})", out.status));
    }
    if said.trim() != expected {
        return Some(format!(
            "it is not this chitti's agent (`--version` says {:?}, expected {expected:?})",
            said.trim()
        ));
    }
    None
}
