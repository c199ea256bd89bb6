#!/usr/bin/env bash
# Installs what chitti's sandbox and its tests need on Debian/Ubuntu: bubblewrap (the
# bwrap backend), git and python3 (used by the tests inside the sandbox); on x86_64, the
# musl build's parts too: musl-gcc and Rust's x86_64-unknown-linux-musl standard library
# (scripts/rust-target.sh says why; without them chitti is built with glibc instead).
# Usage: scripts/install-deps.sh [extra-package...]   (hyperfine, time for scripts/bench.sh)
set -euo pipefail

need=()
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
command -v git >/dev/null 2>&1 || need+=(git)
[ -x /usr/bin/python3 ] || need+=(python3)
for extra in "$@"; do
    case "$extra" in
        time) [ -x /usr/bin/time ] || need+=(time) ;;  # `time` is also a shell keyword
        *) command -v "$extra" >/dev/null 2>&1 || need+=("$extra") ;;
    esac
done

# The musl build's parts are wanted, not needed: without them the build uses glibc.
want=()
if [ "$(uname -sm)" = "Linux x86_64" ]; then
    command -v musl-gcc >/dev/null 2>&1 || want+=(musl-tools)
    musl=x86_64-unknown-linux-musl
    if command -v rustup >/dev/null 2>&1 &&
        ! [ -d "$(rustc --print sysroot)/lib/rustlib/$musl/lib" ]; then
        echo "install-deps: rustup target add $musl" >&2
        rustup target add "$musl" >/dev/null 2>&1 ||
            echo "install-deps: could not add $musl; chitti will be built with glibc" >&2
    fi
fi
[ ${#need[@]} -eq 0 ] && [ ${#want[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    [ ${#need[@]} -eq 0 ] && exit 0
    echo "install-deps: please install: ${need[*]} (no apt-get on this system)" >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
elif [ ${#need[@]} -eq 0 ]; then
    echo "install-deps: chitti will be built with glibc; for the faster musl build run:" \
        "sudo apt-get install -y ${want[*]}" >&2
    exit 0
else
    echo "install-deps: missing ${need[*]}; run: sudo apt-get install -y ${need[*]} ${want[*]}" >&2
    exit 1
fi
packages=("${need[@]}" "${want[@]}")
echo "install-deps: installing ${packages[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt_install() {
    "${sudo[@]}" apt-get install -y --no-install-recommends "$@" >/dev/null 2>&1 || {
        "${sudo[@]}" apt-get update >/dev/null &&
            "${sudo[@]}" apt-get install -y --no-install-recommends "$@" >/dev/null
    }
}
if ! apt_install "${packages[@]}"; then
    [ ${#need[@]} -gt 0 ] && apt_install "${need[@]}"
    echo "install-deps: could not install ${want[*]}; chitti will be built with glibc" >&2
fi
