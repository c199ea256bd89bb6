#!/usr/bin/env bash
# Builds chitti with `cargo build ARGS...` for the target scripts/rust-target.sh picks
# (musl on x86_64 Linux) and prints the path of the chitti binary; chitti-agent (run, chat
# and mcp, which chitti execs) is built beside it. The path is cargo's to say: binaries
# land in target/<target>/, and CARGO_TARGET_DIR moves them.
# Usage: chitti=$(scripts/build-chitti.sh --release --locked)
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --bin chitti --bin chitti-agent --target "$(scripts/rust-target.sh)" "$@" --message-format=json-render-diagnostics | python3 -c '
import json, sys
paths = [m["executable"] for m in map(json.loads, sys.stdin)
         if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "chitti"
         and m.get("executable")]
if len(paths) != 1:
    sys.exit("build-chitti: cargo reported %d chitti binaries: %r" % (len(paths), paths))
print(paths[0])
'
