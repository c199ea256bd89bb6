#!/usr/bin/env python3
"""Per-call latency of sandboxed commands through one warm `chitti mcp` server.

Speaks newline-delimited JSON-RPC over the server's stdin/stdout: initialize,
notifications/initialized, a few warm-up calls, then N sequential `tools/call
execute_bash` of COMMAND, each timed from request written to response read.

Usage: mcp_bench.py CHITTI WORKSPACE BACKEND [CALLS] [COMMAND]
Prints one line: backend, calls, median and p90 in ms, total seconds.
"""

import json
import statistics
import subprocess
import sys
import time


def main() -> int:
    chitti, workspace, backend = sys.argv[1:4]
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    command = sys.argv[5] if len(sys.argv) > 5 else "true"
    server = subprocess.Popen(
        [chitti, "mcp", "--backend", backend, "-w", workspace],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        bufsize=0,
    )
    next_id = 0

    def send(message: dict) -> None:
        server.stdin.write((json.dumps(message) + "\n").encode())

    def request(method: str, params: dict) -> dict:
        nonlocal next_id
        next_id += 1
        send({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params})
        while True:
            line = server.stdout.readline()
            if not line:
                raise SystemExit(f"chitti mcp closed the connection (exit {server.wait()})")
            reply = json.loads(line)
            if reply.get("id") == next_id:
                if "error" in reply:
                    raise SystemExit(f"{method} failed: {reply['error']}")
                return reply["result"]

    request(
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "chitti-bench", "version": "1"},
        },
    )
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    call = {"name": "execute_bash", "arguments": {"command": command}}
    for _ in range(5):
        request("tools/call", call)
    times = []
    started = time.perf_counter()
    for _ in range(calls):
        t0 = time.perf_counter()
        result = request("tools/call", call)
        times.append((time.perf_counter() - t0) * 1000)
        if result.get("isError") or result["structuredContent"]["exit_code"] != 0:
            raise SystemExit(f"the call failed: {result}")
    total = time.perf_counter() - started
    server.stdin.close()
    server.wait(timeout=10)

    times.sort()
    median = statistics.median(times)
    p90 = times[int(len(times) * 0.9) - 1]
    print(f"{backend} {calls} {median:.2f} {p90:.2f} {total:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
