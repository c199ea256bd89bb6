//! glibc's name service (NSS) in a statically linked chitti.
//!
//! On Linux with glibc, chitti is linked statically (see .cargo/config.toml). Static glibc
//! has the `files` and `dns` sources built in and loads any other source that
//! /etc/nsswitch.conf names (systemd, mdns, sss, ...) with `dlopen`, which a static
//! program does not survive reliably: on the development machine a passwd lookup that
//! fell through `files` to `systemd` crashed the process. So before any lookup chitti
//! tells glibc to use the built-in sources only. Host names then come from /etc/hosts and
//! DNS, users from /etc/passwd; a name that only mDNS knows (`gpu-box.local`) does not
//! resolve, and an IP address or an /etc/hosts line is the way to reach it.

/// Restricts the lookups chitti makes (host names, users, groups) to the sources built
/// into a static glibc. Cheap and idempotent; a no-op where glibc is linked dynamically
/// and with musl, which reads /etc/passwd, /etc/group and /etc/hosts itself and has no
/// modules to load.
pub fn builtin_sources_only() {
    #[cfg(all(target_os = "linux", target_env = "gnu", target_feature = "crt-static"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            for (database, sources) in [
                (c"hosts", c"files dns"),
                (c"passwd", c"files"),
                (c"group", c"files"),
            ] {
                // SAFETY: two NUL-terminated strings that glibc copies; called once, before
                // chitti makes any lookup.
                let rc = unsafe { __nss_configure_lookup(database.as_ptr(), sources.as_ptr()) };
                debug_assert_eq!(rc, 0, "__nss_configure_lookup({database:?})");
            }
        });
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu", target_feature = "crt-static"))]
unsafe extern "C" {
    /// glibc, <nss.h>: use `sources` for `database` whatever nsswitch.conf says.
    fn __nss_configure_lookup(
        database: *const std::ffi::c_char,
        sources: *const std::ffi::c_char,
    ) -> std::ffi::c_int;
}

// musl has no name-service modules at all: the same test holds there without any setting.
#[cfg(all(
    test,
    target_os = "linux",
    any(
        all(target_env = "gnu", target_feature = "crt-static"),
        target_env = "musl"
    )
))]
mod tests {
    use super::*;

    /// A user that /etc/passwd does not have falls through to whatever nsswitch.conf lists
    /// next. With the restriction that is nothing: no NSS module gets loaded (without it,
    /// `passwd: files systemd` crashed this process), and the answer is "no such user".
    #[test]
    fn lookups_never_load_nss_modules() {
        builtin_sources_only();
        let unknown = nix::unistd::Uid::from_raw(3_999_999_999);
        assert!(matches!(nix::unistd::User::from_uid(unknown), Ok(None)));
        let unknown_gid = nix::unistd::Gid::from_raw(3_999_999_999);
        assert!(matches!(
            nix::unistd::Group::from_gid(unknown_gid),
            Ok(None)
        ));
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let loaded: Vec<&str> = maps.lines().filter(|l| l.contains("libnss_")).collect();
        assert!(loaded.is_empty(), "NSS modules loaded: {loaded:?}");
    }
}
