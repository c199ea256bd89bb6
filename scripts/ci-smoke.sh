#!/usr/bin/env bash
# Smoke run for every OS chitti supports (Linux in .ci/run, macOS in GitHub Actions):
# build, `chitti doctor`, `chitti sandbox test`, and a handful of real escapes, each
# checked from outside the sandbox. Exits non-zero on the first broken promise.
set -euo pipefail
cd "$(dirname "$0")/.."

chitti=$(scripts/build-chitti.sh --release --locked --quiet)
fail() { echo "ci-smoke: FAIL: $*" >&2; exit 1; }
pass() { echo "ci-smoke: ok: $*"; }

echo "== chitti doctor"
"$chitti" doctor
echo "== chitti sandbox test"
"$chitti" sandbox test
if "$chitti" sandbox test --backend none >/dev/null 2>&1; then
    fail "sandbox test passed with --backend none: the verifier cannot fail"
fi
pass "sandbox test fails with --backend none"

# Not under /tmp: bwrap replaces /tmp, which would hide files for the wrong reason.
base=/var/tmp
[ -w "$base" ] || base=${TMPDIR:-/tmp}
work=$(mktemp -d "$base/chitti-smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT
work=$(cd "$work" && pwd -P)
ws=$work/home/ws
mkdir -p "$ws" "$work/outside" "$work/home/.ssh"
marker="smoke-secret-$$-$RANDOM"
echo "$marker" > "$work/home/.ssh/id_rsa"
run() { HOME="$work/home" "$chitti" sandbox exec -w "$ws" "$@"; }

run -- sh -c "echo x > '$work/outside/escaped'" 2>/dev/null || true
[ ! -e "$work/outside/escaped" ] || fail "wrote outside the workspace"
pass "writes outside the workspace are denied"

run -- sh -c "echo inside > '$ws/inside'"
[ -e "$ws/inside" ] || fail "cannot write the workspace"
pass "the workspace is writable"

if run -- cat "$work/home/.ssh/id_rsa" 2>/dev/null | grep -q "$marker"; then
    fail "read ~/.ssh/id_rsa"
fi
pass "~/.ssh is unreadable"

if SMOKE_API_KEY=$marker run -- env | grep -q "$marker"; then
    fail "an API key reached the sandbox"
fi
pass "secret environment variables are removed"

git -C "$ws" init -q
run -- sh -c "echo evil > .git/hooks/pre-commit" 2>/dev/null || true
[ ! -e "$ws/.git/hooks/pre-commit" ] || fail "planted a git hook"
pass "git hooks are read-only"

tag=$((3000 + RANDOM % 1000))
start=$(date +%s)
set +e
run --timeout 1 -- sh -c "sleep $tag & sleep $tag"
code=$?
set -e
[ "$code" -eq 124 ] || fail "timeout exit code $code, expected 124"
[ $(( $(date +%s) - start )) -le 5 ] || fail "the 1 s timeout took more than 5 s"
sleep 0.2
if pgrep -f "^sleep $tag\$" >/dev/null; then
    pkill -f "^sleep $tag\$" || true
    fail "a sandboxed process outlived the call"
fi
pass "a timeout kills the whole tree"

port_file=$work/port
python3 - "$port_file" "$work/connected" <<'PY' &
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1); s.settimeout(5)
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
try:
    s.accept(); open(sys.argv[2], "w").write("yes")
except OSError:
    pass
PY
listener=$!
for _ in $(seq 50); do [ -s "$port_file" ] && break; sleep 0.1; done
port=$(cat "$port_file")
run -- python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 2)" 2>/dev/null || true
kill "$listener" 2>/dev/null || true
wait "$listener" 2>/dev/null || true
[ ! -e "$work/connected" ] || fail "connected to a host TCP listener with the network off"
pass "the network is off"

# chitti mcp is served by chitti-agent, which chitti execs: one real tool call through it,
# judged by the file it wrote. (stdin stays open until the answer: end of input cancels.)
HOME="$work/home" python3 - "$chitti" "$ws" <<'PY' || fail "chitti mcp did not answer a tool call"
import json, signal, subprocess, sys
signal.alarm(60)
server = subprocess.Popen([sys.argv[1], "mcp", "-w", sys.argv[2]], text=True,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def ask(message):
    server.stdin.write(json.dumps(message) + "\n")
    server.stdin.flush()
    return json.loads(server.stdout.readline()) if "id" in message else None
ask({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-03-26", "capabilities": {},
    "clientInfo": {"name": "ci-smoke", "version": "1"}}})
ask({"jsonrpc": "2.0", "method": "notifications/initialized"})
reply = ask({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
    "name": "execute_bash", "arguments": {"command": "echo mcp > mcp-wrote"}}})
server.stdin.close()
server.wait()
sys.exit(0 if reply["result"]["structuredContent"]["exit_code"] == 0 else 1)
PY
[ "$(cat "$ws/mcp-wrote" 2>/dev/null)" = mcp ] || fail "an execute_bash call through chitti mcp did not write the workspace"
pass "chitti mcp (served by chitti-agent) runs a sandboxed call"

echo "ci-smoke: all checks passed"
