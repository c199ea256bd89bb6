#!/usr/bin/env bash
# The whole test suite: unit tests, integration tests and the sandbox-tests escape suite
# on both Linux backends, then scripts/ci-smoke.sh. Run as root, it runs the tests a
# second time as an unprivileged user (created if needed), because real users are not.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

# The tests run on the target chitti ships for here (musl on x86_64 Linux).
target=$(scripts/rust-target.sh)
echo "== build (for $target)"
cargo build --workspace --all-targets --locked --target "$target"
chitti=$(scripts/build-chitti.sh --locked --quiet)

# Fixtures live outside /tmp: bwrap gives the sandbox a private /tmp, which would hide
# them for the wrong reason (or hide the whole checkout when it is cloned under /tmp).
fixtures=$(mktemp -d /var/tmp/chitti-fixtures.XXXXXX)
trap 'rm -rf "$fixtures"' EXIT
export CHITTI_TEST_TMPDIR=$fixtures

echo "== tests as $(id -un)"
cargo test --workspace --locked --no-fail-fast --target "$target"

echo "== smoke run (what CI also runs on macOS)"
scripts/ci-smoke.sh

echo "== the release build's function order (scripts/startup-order.txt)"
scripts/check-startup-order.sh "$(scripts/build-chitti.sh --release --locked --quiet)"

# The build comparison tool (docs/performance.md) must keep working: a short run of it.
echo "== scripts/compare-builds.py"
scripts/compare-builds.py --runs 3 --copies 2 "$chitti" "$chitti" -- --version
# And the page-cache report bench.sh prints.
scripts/page-cache-folios.py "$chitti"
# So must the launcher floor bench.sh builds (scripts/bench-floor.c): it builds without
# warnings and passes the command's exit status through, in both shapes.
if command -v musl-gcc >/dev/null; then
    echo "== scripts/bench-floor.c"
    musl-gcc -O2 -static-pie -Wall -Wextra -Werror -o "$fixtures/bench-floor" scripts/bench-floor.c
    for shape in wrapper supervised; do
        status=0
        "$fixtures/bench-floor" "$shape" sh -c 'exit 7' || status=$?
        [ "$status" = 7 ] || { echo "bench-floor $shape exited $status, not 7" >&2; exit 1; }
    done
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "== not root: the unprivileged run above is the only one"
    exit 0
fi

user=chitti-test
id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
home=$(getent passwd "$user" | cut -d: -f6)

# The unprivileged user cannot read this checkout or the toolchain (often under /root),
# so it runs copies of the compiled test binaries from a directory it owns.
stage=$(mktemp -d /var/tmp/chitti-test.XXXXXX)
trap 'rm -rf "$stage" "$fixtures"' EXIT
cargo test --workspace --locked --no-run --target "$target" --message-format=json 2>/dev/null \
    | python3 -c '
import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    # Proc-macro test binaries link libstd dynamically, from the toolchain: skip them.
    if (msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["profile"]["test"]
            and "proc-macro" not in msg["target"]["kind"]):
        print(msg["executable"])
' > "$stage/tests.txt"
mkdir -p "$stage/bin" "$stage/tmp"
cp "$chitti" "$(dirname "$chitti")/chitti-agent" "$stage/bin/"
while read -r exe; do cp "$exe" "$stage/bin/"; done < "$stage/tests.txt"
chmod 755 "$stage"
chown -R "$user:$user" "$stage/tmp"

echo "== tests as unprivileged user $user"
status=0
while read -r exe; do
    name=$(basename "$exe")
    echo "-- $name"
    runuser -u "$user" -- env -i \
        HOME="$home" USER="$user" LOGNAME="$user" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
        CHITTI_BIN="$stage/bin/chitti" CHITTI_TEST_TMPDIR="$stage/tmp" \
        "$stage/bin/$name" --test-threads=2 || status=1
done < "$stage/tests.txt"
exit $status
