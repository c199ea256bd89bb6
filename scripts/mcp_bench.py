#!/usr/bin/env python3
"""Per-call latency of sandboxed commands through one warm `chitti mcp` server.

Speaks newline-delimited JSON-RPC over the server's stdin/stdout: initialize,
notifications/initialized, a few warm-up calls, then N sequential `tools/call
execute_bash` of COMMAND, each timed from request written to response read.

Usage: mcp_bench.py CHITTI WORKSPACE BACKEND [CALLS] [COMMAND]
Prints one line: backend, calls, median and p90 in ms, total seconds.

`McpServer` is also the client of scripts/compare-mcp.py.
"""

import json
import statistics
import subprocess
import sys
import time


class McpServer:
    """A `chitti mcp` server started for one workspace and backend, and its client."""

    def __init__(self, chitti: str, workspace: str, backend: str):
        self.name = chitti
        self.proc = subprocess.Popen(
            [chitti, "mcp", "--backend", backend, "-w", workspace],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
        )
        self.next_id = 0

    def send(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit(f"{self.name}: chitti mcp closed the connection (exit {self.proc.wait()})")
            reply = json.loads(line)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    sys.exit(f"{self.name}: {method} failed: {reply['error']}")
                return reply["result"]

    def start(self, warm_up: int = 5, command: str = "true") -> None:
        """The MCP handshake, then `warm_up` calls of `command`."""
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "chitti-bench", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for _ in range(warm_up):
            self.call(command)

    def call(self, command: str) -> float:
        """One `execute_bash` of `command`, which must succeed; its latency in ms."""
        started = time.perf_counter()
        result = self.request(
            "tools/call", {"name": "execute_bash", "arguments": {"command": command}}
        )
        elapsed = (time.perf_counter() - started) * 1000
        if result.get("isError") or result["structuredContent"]["exit_code"] != 0:
            sys.exit(f"{self.name}: the call failed: {result}")
        return elapsed

    def stop(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def median_and_p90(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[int(len(times) * 0.9) - 1]


def main() -> int:
    chitti, workspace, backend = sys.argv[1:4]
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    command = sys.argv[5] if len(sys.argv) > 5 else "true"
    server = McpServer(chitti, workspace, backend)
    server.start(command=command)
    started = time.perf_counter()
    times = [server.call(command) for _ in range(calls)]
    total = time.perf_counter() - started
    server.stop()

    median, p90 = median_and_p90(times)
    print(f"{backend} {calls} {median:.2f} {p90:.2f} {total:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
