#!/usr/bin/env bash
# Prints the Rust target that chitti is built and tested for on this machine.
#
# On x86_64 Linux that is x86_64-unknown-linux-musl, a static PIE like the glibc build, but
# about 0.2 ms faster to start: static glibc runs some 43 `cpuid` instructions at every
# start to pick its string functions and cache sizes, and on a virtual machine each one
# traps to the hypervisor (docs/performance.md). Every sandboxed call starts chitti once.
# It needs the target's standard library (`rustup target add x86_64-unknown-linux-musl`,
# which scripts/install-deps.sh does) and musl-gcc (Debian's musl-tools) for aws-lc's C
# code. Where either is missing, and on other systems, it prints the host's own target
# (the .cargo/config.toml default) and says on stderr why.
# CARGO_BUILD_TARGET, when set, wins.
set -euo pipefail

if [ -n "${CARGO_BUILD_TARGET:-}" ]; then
    echo "$CARGO_BUILD_TARGET"
    exit 0
fi
host=$(rustc -vV | sed -n 's/^host: //p')
musl=x86_64-unknown-linux-musl
if [ "$host" != x86_64-unknown-linux-gnu ]; then
    echo "$host"
    exit 0
fi
why=
if ! [ -d "$(rustc --print sysroot)/lib/rustlib/$musl/lib" ]; then
    why="the $musl standard library is not installed (rustup target add $musl)"
elif ! command -v musl-gcc >/dev/null 2>&1; then
    why="musl-gcc is missing (apt-get install musl-tools)"
fi
if [ -n "$why" ]; then
    echo "rust-target: building for $host (static glibc, ~0.2 ms slower per call): $why" >&2
    echo "$host"
else
    echo "$musl"
fi
