#!/usr/bin/env bash
# Checks that a release chitti was laid out by scripts/startup-order.txt: the functions a
# call runs must still be found under the names listed there, and sit together at the
# start of the code. A stale list costs every call some 0.04 ms (docs/performance.md) and
# nothing else would say so.
#
# The names carry hashes of the compiler, the target and Cargo.lock, so the check holds
# the list to the compiler and target it was made for (its first line) and says SKIP,
# with the reason, for any other. build.rs orders only x86_64 Linux builds (linked by LLD).
#
# Usage: scripts/check-startup-order.sh RELEASE-CHITTI
set -euo pipefail
cd "$(dirname "$0")/.."

binary=${1:?usage: scripts/check-startup-order.sh RELEASE-CHITTI}
list=scripts/startup-order.txt
made_for=$(sed -n '1s/^# made with //p' "$list")
target=$(scripts/rust-target.sh)
this="$(rustc --version) for $target"
case "$target" in
    x86_64-unknown-linux-musl | x86_64-unknown-linux-gnu) ;;
    *)
        echo "SKIP: build.rs orders no functions for $target"
        exit 0
        ;;
esac
if [ -z "$made_for" ]; then
    echo "check-startup-order: $list does not say what it was made for (first line" \
        "\`# made with rustc ... for TARGET\`): run scripts/startup-order.sh" >&2
    exit 1
fi
if [ "$made_for" != "$this" ]; then
    echo "SKIP: $list was made with $made_for; this is $this: its names cannot match" \
        "(scripts/startup-order.sh regenerates it)"
    exit 0
fi

nm --defined-only --print-size "$binary" | python3 -c '
import sys

listed = [line.strip() for line in open(sys.argv[1]) if line.strip() and not line.startswith("#")]
names, sized = set(), {}
for line in sys.stdin:
    parts = line.split()
    names.add(parts[-1])
    # address size kind name (hand-written assembly has no size).
    if len(parts) == 4 and parts[2] in "tTwW":
        sized[parts[3]] = (int(parts[0], 16), int(parts[1], 16))
present = [name for name in listed if name in names]
share = len(present) / len(listed)
print(f"startup function order: {len(present)} of {len(listed)} listed functions are in the binary")
if share < 0.95:
    sys.exit(f"check-startup-order: only {share:.0%} of the listed functions are in the binary; "
             "run scripts/startup-order.sh")
# Laid out together: the listed functions span little more than their own size.
placed = [sized[name] for name in present if name in sized]
start = min(address for address, _ in placed)
end = max(address + size for address, size in placed)
size = sum(size for _, size in placed)
print(f"they span {(end - start) // 1024} KiB for {size // 1024} KiB of code")
if end - start > 1.25 * size:
    sys.exit("check-startup-order: the listed functions are spread over the binary: "
             "the linker was not given the order (build.rs)")
' "$list"
