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
import sys

from mcp_bench import McpServer, median_and_p90


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per build")
    parser.add_argument("--backend", default="landlock")
    parser.add_argument("--command", default="true")
    parser.add_argument("workspace")
    parser.add_argument("chitti", nargs="+")
    args = parser.parse_args()

    servers = [McpServer(c, args.workspace, args.backend) for c in args.chitti]
    times: list[list[float]] = [[] for _ in servers]
    for server in servers:
        server.start(warm_up=10, command=args.command)
    for round_ in range(args.calls):
        order = range(len(servers)) if round_ % 2 == 0 else reversed(range(len(servers)))
        for k in order:
            times[k].append(servers[k].call(args.command))
    for server in servers:
        server.stop()

    base = median_and_p90(times[0])[0]
    for server, own in zip(servers, times):
        median, p90 = median_and_p90(own)
        print(f"{median:8.3f} ms  {median - base:+.3f}  p90 {p90:.3f}  {server.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
