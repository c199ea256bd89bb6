#!/usr/bin/env bash
# Start-up cost of a sandboxed call, side by side in one hyperfine run:
# bare `sh -c true`, raw bubblewrap with the isolation flags chitti uses, and chitti on
# each backend. Prints medians and the ratios the project targets.
#   landlock backend <= 2.5x bare;  bwrap backend <= 1.2x raw bwrap
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh hyperfine time
cargo build --release --locked --quiet
chitti=$PWD/target/release/chitti
runs=${BENCH_RUNS:-30}

ws=$(mktemp -d /var/tmp/chitti-bench.XXXXXX)
out=$(mktemp /var/tmp/chitti-bench-json.XXXXXX)
trap 'rm -rf "$ws" "$out" "$out.time"' EXIT
# Warm the bwrap probe cache so that it is not part of the measurement.
"$chitti" doctor >/dev/null || true

# Raw bubblewrap gets exactly the namespaces and mounts chitti would give it (minus the
# seccomp programs, which are chitti's own addition).
mapfile -d '' bwrap_args < <("$chitti" sandbox profile --bwrap-args0 -w "$ws")
raw_bwrap="bwrap ${bwrap_args[*]} -- sh -c true"

hyperfine --shell=none --warmup 5 --runs "$runs" --export-json "$out" \
    -n bare "sh -c true" \
    -n raw-bwrap "$raw_bwrap" \
    -n chitti-bwrap "$chitti sandbox exec --backend bwrap -w $ws -- sh -c true" \
    -n chitti-landlock "$chitti sandbox exec --backend landlock -w $ws -- sh -c true"

python3 - "$out" <<'PY'
import json, sys
results = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
med = {name: r["median"] * 1000 for name, r in results.items()}
print()
print(f"{'command':<18}{'median ms':>10}")
for name, m in med.items():
    print(f"{name:<18}{m:>10.2f}")
print()
ll = med["chitti-landlock"] / med["bare"]
bw = med["chitti-bwrap"] / med["raw-bwrap"]
print(f"landlock / bare      {ll:5.2f}x  (target <= 2.5x)  {'OK' if ll <= 2.5 else 'MISSED'}")
print(f"bwrap / raw bwrap    {bw:5.2f}x  (target <= 1.2x)  {'OK' if bw <= 1.2 else 'MISSED'}")
PY

echo
echo "200 MB output flood captured with --json (peak RSS of chitti and everything it ran):"
for backend in bwrap landlock; do
    /usr/bin/time -f "%M %e" -o "$out.time" \
        "$chitti" sandbox exec --backend "$backend" -w "$ws" --json -- \
        sh -c 'yes chitti | head -c 200000000' >/dev/null
    read -r kb secs < "$out.time"
    mib=$(( kb / 1024 ))
    printf '%-10s peak RSS %4d MiB in %5s s  (target <= 32 MiB)  %s\n' "$backend" "$mib" "$secs" \
        "$([ "$mib" -le 32 ] && echo OK || echo MISSED)"
done
