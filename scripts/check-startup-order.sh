#!/usr/bin/env bash
# Checks that a release chitti was laid out by scripts/startup-order.txt: the functions a
# call runs must still be found under the names listed there, and sit together at the
# start of the code. A stale list costs every call some 0.04 ms (docs/performance.md) and
# nothing else would say so.
#
# The names carry hashes of the compiler and of Cargo.lock, so the check holds the list
# to the compiler it was made with (its first line) and says SKIP, with the reason, for
# any other. Only for the targets build.rs orders (x86_64 Linux, linked by LLD).
#
# Usage: scripts/check-startup-order.sh RELEASE-CHITTI
set -euo pipefail
cd "$(dirname "$0")/.."

binary=${1:?usage: scripts/check-startup-order.sh RELEASE-CHITTI}
list=scripts/startup-order.txt
made_by=$(sed -n '1s/^# made with //p' "$list")
compiler=$(rustc --version)
case "$(scripts/rust-target.sh)" in
    x86_64-unknown-linux-musl | x86_64-unknown-linux-gnu) ;;
    *)
        echo "SKIP: build.rs orders no functions for $(scripts/rust-target.sh)"
        exit 0
        ;;
esac
if [ -z "$made_by" ]; then
    echo "check-startup-order: $list does not say which compiler made it (first line" \
        "\`# made with rustc ...\`): run scripts/startup-order.sh" >&2
    exit 1
fi
if [ "$made_by" != "$compiler" ]; then
    echo "SKIP: $list was made with $made_by, this is $compiler: its names cannot match" \
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
