#!/usr/bin/env bash
# What a sandboxed call costs, measured in one run on this machine:
#  1. start-up, side by side in one hyperfine run: bare `sh -c true`, raw bubblewrap with
#     the isolation flags chitti uses, chitti on each backend, the peers when present
#     (`codex sandbox`, Anthropic's `srt`), and the floor of a launcher of chitti's shape
#     (scripts/bench-floor.c: exec and wait; the same with a supervisor between);
#  2. per-call latency through one warm `chitti mcp` server (scripts/mcp_bench.py);
#  3. peak RSS and time of capturing a 200 MB output flood with --json.
# Targets (ratios within this run): landlock <= 2.5x bare; bwrap <= 1.2x raw bwrap;
# a warm MCP call on landlock <= 3 ms median; flood peak RSS <= 32 MiB.
#
# Usage: scripts/bench.sh [--with-peers]
#   --with-peers  install @openai/codex and @anthropic-ai/sandbox-runtime with npm into a
#                 temporary directory for this run (otherwise they are used if on PATH)
# Environment: BENCH_RUNS (hyperfine runs, default 30), BENCH_ROUNDS (the runs are split into
#   this many hyperfine rounds, default 10, every other one in reverse order, so that the
#   machine's drift over the minutes of a run falls on every command alike; the medians are
#   taken over all rounds' times), BENCH_MCP_CALLS (default 200),
#   BENCH_USER (run as root: also compare bare and landlock as this user, who does not pay
#   for hiding root's own secrets; the user needs a home directory to be realistic).
set -euo pipefail
cd "$(dirname "$0")/.."

with_peers=false
case "${1:-}" in
    --with-peers) with_peers=true ;;
    "") ;;
    *) echo "usage: scripts/bench.sh [--with-peers]" >&2; exit 2 ;;
esac

scripts/install-deps.sh hyperfine time
built=$(scripts/build-chitti.sh --release --locked --quiet)
runs=${BENCH_RUNS:-30}
rounds=${BENCH_ROUNDS:-10}
calls=${BENCH_MCP_CALLS:-200}

ws=$(mktemp -d /var/tmp/chitti-bench.XXXXXX)
peers=$(mktemp -d /var/tmp/chitti-bench-peers.XXXXXX)
bin=$(mktemp -d /var/tmp/chitti-bench-bin.XXXXXX)
out=$(mktemp /var/tmp/chitti-bench-json.XXXXXX)
user_dir=$(mktemp -d /var/tmp/chitti-bench-user.XXXXXX)
trap 'rm -rf "$ws" "$peers" "$bin" "$out" "$out".* "$user_dir"' EXIT

# Measure a copy, as `cargo install` would place it: the file the linker has just written
# started 0.1-0.2 ms slower here than a byte-identical copy, until the page cache was
# dropped (how the linker's writes left it cached). Everything else measured is installed.
cp "$built" "$(dirname "$built")/chitti-agent" "$bin/"
chitti=$bin/chitti

if $with_peers; then
    # srt needs ripgrep and socat at run time.
    command -v rg >/dev/null || scripts/install-deps.sh ripgrep
    scripts/install-deps.sh socat
    echo "installing @openai/codex and @anthropic-ai/sandbox-runtime into $peers" >&2
    npm install --prefix "$peers" --no-audit --no-fund --loglevel=error \
        @openai/codex @anthropic-ai/sandbox-runtime >&2
    export PATH="$peers/node_modules/.bin:$PATH"
fi

echo "chitti built for $(scripts/rust-target.sh 2>/dev/null) ($(git rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
# The function order build.rs gives the linker goes stale when the compiler or Cargo.lock
# changes (its names carry hashes): say how much of it this binary still matches. A stale
# list is reported, not a reason to stop measuring.
if command -v nm >/dev/null; then
    scripts/check-startup-order.sh "$chitti" || true
    echo
fi
# How the page cache holds what is measured: a binary in 4 KiB folios (read back from disk)
# costs chitti about 0.09 ms more per call than the fresh copy's 64 KiB folios (README).
echo "page cache:"
scripts/page-cache-folios.py "$chitti" "$(readlink -f "$(command -v sh)")" | sed 's/^/  /'
echo

# Warm the bwrap probe cache so that it is not part of the measurement.
"$chitti" doctor >/dev/null || true

backends=()
for backend in bwrap landlock; do
    if "$chitti" sandbox exec --backend "$backend" -w "$ws" -- true 2>/dev/null; then
        backends+=("$backend")
    else
        echo "skipping the $backend backend: it does not run here (see chitti doctor)" >&2
    fi
done

# Each ratio's two commands run next to each other in every round (bare, then chitti on
# landlock; raw bwrap, then chitti on bwrap): a phase of the machine that lasts a fraction
# of a round then falls on both sides of a ratio, not on one. A round of every command lasts
# some seconds with the peers; one command's block of runs in it (BENCH_RUNS / BENCH_ROUNDS
# of them: 10 in a run of 100) lasts some 7 ms for bare.
commands=(-n bare "sh -c true")
if [[ " ${backends[*]} " == *" landlock "* ]]; then
    commands+=(-n chitti-landlock "$chitti sandbox exec --backend landlock -w $ws -- sh -c true")
fi
# Where chitti's own time goes: setting up and supervising a command with nothing enforced
# (the difference to a backend is the enforcement), and starting the binary at all.
commands+=(-n "chitti-none" "$chitti sandbox exec --backend none -w $ws -- sh -c true")
commands+=(-n "chitti --version" "$chitti --version")
# The floor of a launcher of chitti's shape (scripts/bench-floor.c), built as chitti is
# built: exec then wait, and with a supervisor between. Where it cannot be built the same
# way (a glibc chitti, or no musl-gcc), it is left out rather than measured as something
# else. The flags are scripts/test.sh's, less -Werror.
if [[ "$(scripts/rust-target.sh 2>/dev/null)" != *-musl ]] || ! command -v musl-gcc >/dev/null; then
    echo "skipping the launcher floor: chitti is not the musl build, or musl-gcc is missing" >&2
elif musl-gcc -O2 -static-pie -Wall -Wextra -o "$bin/bench-floor" scripts/bench-floor.c; then
    commands+=(-n floor-wrapper "$bin/bench-floor wrapper sh -c true")
    commands+=(-n floor-supervised "$bin/bench-floor supervised sh -c true")
else
    echo "skipping the launcher floor: scripts/bench-floor.c did not build (above)" >&2
fi
if command -v bwrap >/dev/null; then
    # Raw bubblewrap gets exactly the namespaces and mounts chitti would give it (minus the
    # seccomp programs, which are chitti's own addition).
    mapfile -d '' bwrap_args < <("$chitti" sandbox profile --bwrap-args0 -w "$ws")
    commands+=(-n raw-bwrap "bwrap ${bwrap_args[*]} -- sh -c true")
fi
if [[ " ${backends[*]} " == *" bwrap "* ]]; then
    commands+=(-n chitti-bwrap "$chitti sandbox exec --backend bwrap -w $ws -- sh -c true")
fi
# The peers sandbox their current directory: run them (and everything else) from $ws.
if command -v codex >/dev/null; then
    commands+=(-n codex "$(command -v codex) sandbox -- sh -c true")
fi
if command -v srt >/dev/null && "$(command -v srt)" -c true >/dev/null 2>&1; then
    commands+=(-n srt "$(command -v srt) -c true")
fi

# hyperfine measures one command after the other; over a few minutes this machine drifts by
# a few tenths of a millisecond, enough to move a ratio. So the runs are split into rounds,
# every other round in reverse order, and each command's median is taken over all its times.
# Usage: rounds OUT ARGS... (ARGS: `-n name command` triples); writes OUT.0, OUT.1, ...
rounds() {
    local out=$1
    shift
    local forward=("$@") reverse=() i r
    for (( i = ${#forward[@]} - 3; i >= 0; i -= 3 )); do reverse+=("${forward[@]:i:3}"); done
    for (( r = 0; r < rounds; r++ )); do
        local order=("${forward[@]}")
        (( r % 2 )) && order=("${reverse[@]}")
        hyperfine --shell=none --warmup 3 --runs $(( (runs + rounds - 1) / rounds )) \
            --export-json "$out.$r" --style basic "${order[@]}" >/dev/null
    done
}

# Medians in ms over all rounds, by command name, in the first round's order, as JSON;
# under "rounds", each round's own medians (the spread of a ratio from round to round shows
# how far this run's machine moved it).
medians() {
    python3 - "$@" <<'PY'
import json, statistics, sys
times, per_round = {}, []
for path in sys.argv[1:]:
    results = json.load(open(path))["results"]
    per_round.append({r["command"]: statistics.median(r["times"]) * 1000 for r in results})
    for r in results:
        times.setdefault(r["command"], []).extend(r["times"])
med = {name: statistics.median(t) * 1000 for name, t in times.items()}
print(json.dumps({"medians": med, "rounds": per_round}))
PY
}

# Prints "LABEL RATIO (target <= T) OK|MISSED" for the medians of NUM and DEN in FILE (as
# `medians` writes it), and the lowest and highest ratio of a single round. A TARGET of `-`
# is no target: the ratio is printed with NOTE instead.
# Usage: check FILE LABEL NUM DEN TARGET [NOTE]
check() {
    python3 - "$@" <<'PY'
import json, sys
path, label, num, den, target = sys.argv[1:6]
data = json.load(open(path))
med = data["medians"]
if num in med and den in med and target == "-":
    print(f"{label:<22} {med[num] / med[den]:5.2f}x  ({sys.argv[6]})")
elif num in med and den in med:
    target = float(target)
    ratio = med[num] / med[den]
    rounds = sorted(r[num] / r[den] for r in data["rounds"] if num in r and den in r)
    verdict = "OK" if ratio <= target else "MISSED"
    print(f"{label:<22} {ratio:5.2f}x  (target <= {target:g}x)  {verdict}"
          f"   one round alone: {rounds[0]:.2f}-{rounds[-1]:.2f}x")
PY
}

(cd "$ws" && rounds "$out" "${commands[@]}")
medians "$out".* > "$out"

echo "== start-up of one sandboxed \`sh -c true\` (hyperfine, $runs runs in $rounds rounds, medians)"
python3 - "$out" <<'PY'
import json, sys
med = json.load(open(sys.argv[1]))["medians"]
print(f"| {'command':<16} | {'median ms':>9} | {'vs bare':>7} |")
print(f"|{'-' * 18}|{'-' * 11}|{'-' * 9}|")
for name, m in med.items():
    print(f"| {name:<16} | {m:>9.2f} | {m / med['bare']:>6.2f}x |")
print()
PY
check "$out" "landlock / bare" chitti-landlock bare 2.5
# Not a target: how much of the landlock budget a supervised launcher doing nothing takes.
check "$out" "supervised floor / bare" floor-supervised bare - \
    "no policy, nothing enforced: what the supervisor's shape costs here"
check "$out" "bwrap / raw bwrap" chitti-bwrap raw-bwrap 1.2

if [ -n "${BENCH_USER:-}" ] && [[ " ${backends[*]} " == *" landlock "* ]]; then
    if [ "$(id -u)" != 0 ]; then
        echo "BENCH_USER needs the script to run as root (it runs commands as that user)" >&2
        exit 2
    fi
    # The user gets its own workspace and report file, and may run the measured copy.
    mkdir "$user_dir/ws"
    chown -R "$BENCH_USER" "$user_dir"
    chmod 755 "$user_dir" "$bin"
    user_commands=(
        -n bare "sh -c true"
        -n chitti-landlock "$chitti sandbox exec --backend landlock -w $user_dir/ws -- sh -c true"
        -n chitti-none "$chitti sandbox exec --backend none -w $user_dir/ws -- sh -c true"
    )
    (cd "$user_dir/ws" && runs=$runs rounds=$rounds runuser -u "$BENCH_USER" -- \
        bash -c "$(declare -f rounds); rounds \"\$@\"" rounds "$user_dir/out.json" \
        "${user_commands[@]}")
    medians "$user_dir/out.json".* > "$user_dir/out.json"
    echo
    echo "== the same as user $BENCH_USER (hyperfine, $runs runs in $rounds rounds, medians)"
    python3 - "$user_dir/out.json" <<'PY'
import json, sys
med = json.load(open(sys.argv[1]))["medians"]
for name, m in med.items():
    print(f"{name:<16} {m:6.2f} ms  {m / med['bare']:5.2f}x bare")
print()
PY
    check "$user_dir/out.json" "landlock / bare as $BENCH_USER" chitti-landlock bare 2.5
fi

echo
echo "== $calls sequential execute_bash \`true\` calls through one warm chitti mcp server"
for backend in "${backends[@]}"; do
    read -r _ n median p90 total < <(python3 scripts/mcp_bench.py "$chitti" "$ws" "$backend" "$calls")
    verdict=""
    if [ "$backend" = landlock ]; then
        verdict="  (target <= 3 ms)  $(python3 -c "print('OK' if $median <= 3 else 'MISSED')")"
    fi
    printf '%-10s median %6.2f ms  p90 %6.2f ms  (%s calls in %s s)%s\n' \
        "$backend" "$median" "$p90" "$n" "$total" "$verdict"
done

echo
echo "== 200 MB output flood captured with --json (peak RSS of chitti and everything it ran)"
for backend in "${backends[@]}"; do
    /usr/bin/time -f "%M %e" -o "$out.time" \
        "$chitti" sandbox exec --backend "$backend" -w "$ws" --json -- \
        sh -c 'yes chitti | head -c 200000000' >/dev/null
    read -r kb secs < "$out.time"
    mib=$(( kb / 1024 ))
    printf '%-10s peak RSS %4d MiB in %5s s  (target <= 32 MiB)  %s\n' "$backend" "$mib" "$secs" \
        "$([ "$mib" -le 32 ] && echo OK || echo MISSED)"
done
