#!/usr/bin/env bash
# Regenerates scripts/startup-order.txt: the functions a sandboxed call runs, in the order
# they first run, which build.rs hands to the linker so that they sit together in the
# binary. A call then touches a few hundred KiB of contiguous code instead of pages spread
# over 8 MiB: fewer page faults when chitti, its supervisor and the command's child start,
# and fewer pages to unmap when they exit (docs/performance.md).
#
# The names are mangled with hashes that depend on the compiler version and on
# Cargo.lock (not on chitti's own code: the release profile's fat LTO adds no per-build
# suffix), so rerun this after updating either. The list's first line names the compiler
# and the target (whose name is in the hashes too); scripts/check-startup-order.sh, run by
# scripts/test.sh, fails where the list no longer matches a build by that compiler for
# that target. Needs gcc, nm, python3, and both Linux backends.
# x86_64 only (the tracer reads the instruction pointer).
#
# Usage: scripts/startup-order.sh
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d /var/tmp/chitti-startup-order.XXXXXX)
trap 'rm -rf "$work"' EXIT

gcc -O2 -Wall -o "$work/startup-trace" scripts/startup-trace.c
built=$(scripts/build-chitti.sh --release --locked --quiet)
cp "$built" "$work/chitti"
mkdir "$work/ws"

# One call per path a sandboxed call can take, most common first: each adds the functions
# the ones before did not run.
# A traced call takes about a minute (a trap per instruction).
trace() {
    "$work/startup-trace" "$work/offsets" "$work/chitti" sandbox exec -w "$work/ws" "$@" >/dev/null
}
trace --backend landlock -- sh -c true
trace --backend bwrap --json -- sh -c 'echo out; echo err >&2'
trace --backend landlock --json -- sh -c 'echo out; echo err >&2'

nm --defined-only "$work/chitti" >"$work/symbols"
# LLD skips lines that start with `#`.
echo "# made with $(rustc --version) for $(scripts/rust-target.sh)" >scripts/startup-order.txt
python3 - "$work/symbols" "$work/offsets" >>scripts/startup-order.txt <<'EOF'
import bisect, sys

# Function symbols by address. In a static PIE the image's first byte is address 0, so an
# offset from the image base is an address.
functions = sorted(
    (int(address, 16), name)
    for address, kind, name in (line.split(None, 2) for line in open(sys.argv[1]) if line.count(" ") >= 2)
    if kind in "tTwW"
)
starts = [address for address, _ in functions]
order, listed = [], set()
for line in open(sys.argv[2]):
    i = bisect.bisect_right(starts, int(line, 16)) - 1
    name = functions[i][1].strip() if i >= 0 else None
    if name and name not in listed:
        listed.add(name)
        order.append(name)
print("\n".join(order))
EOF
echo "scripts/startup-order.txt: $(grep -vc '^#' scripts/startup-order.txt) functions" >&2
