#!/usr/bin/env python3
"""Compares warm `chitti mcp` calls of two or more chitti builds fairly: A/B for a change.

Separate runs of scripts/mcp_bench.py drift apart by tenths of a millisecond on a virtual
machine, more than most changes. This starts one server per build and, from one client,
alternates `tools/call execute_bash` between them (the order reversed every other round), so
that every build sees the same moments of the machine. Each build directory must hold
`chitti` and `chitti-agent` side by side (`chitti mcp` runs the agent next to it).

Usage: compare-mcp.py [--calls N] [--backend B] [--command CMD] WORKSPACE CHITTI...
Prints each build's median and p90 in ms.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time


class Server:
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
        self.times: list[float] = []

    def send(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit(f"{self.name}: the server closed the connection")
            reply = json.loads(line)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    sys.exit(f"{self.name}: {method} failed: {reply['error']}")
                return reply["result"]

    def start(self) -> None:
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "compare-mcp", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, command: str) -> float:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per build")
    parser.add_argument("--backend", default="landlock")
    parser.add_argument("--command", default="true")
    parser.add_argument("workspace")
    parser.add_argument("chitti", nargs="+")
    args = parser.parse_args()

    servers = [Server(c, args.workspace, args.backend) for c in args.chitti]
    for server in servers:
        server.start()
        for _ in range(10):
            server.call(args.command)
    for round_ in range(args.calls):
        order = servers if round_ % 2 == 0 else list(reversed(servers))
        for server in order:
            server.times.append(server.call(args.command))
    for server in servers:
        server.stop()

    base = statistics.median(servers[0].times)
    for server in servers:
        times = sorted(server.times)
        median = statistics.median(times)
        p90 = times[int(len(times) * 0.9) - 1]
        print(f"{median:8.3f} ms  {median - base:+.3f}  p90 {p90:.3f}  {server.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
