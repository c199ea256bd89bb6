#!/usr/bin/env bash
# Installs what chitti's sandbox and its tests need on Debian/Ubuntu: bubblewrap (the
# bwrap backend), git and python3 (used by the tests inside the sandbox).
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
[ ${#need[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: please install: ${need[*]} (no apt-get on this system)" >&2
    exit 1
fi
if [ "$(id -u)" -eq 0 ]; then
    sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
else
    echo "install-deps: missing ${need[*]}; run: sudo apt-get install -y ${need[*]}" >&2
    exit 1
fi
echo "install-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
    "${sudo[@]}" apt-get update >/dev/null
    "${sudo[@]}" apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
}
