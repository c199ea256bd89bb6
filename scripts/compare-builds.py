#!/usr/bin/env python3
"""Compares the start-up of two or more chitti builds fairly: A/B for a change.

Timing two binaries against each other is not enough on a virtual machine: how fast a
binary starts also depends on the file, not only its bytes (most likely on where its pages
landed in memory), and two copies of the very same file have differed here by up to 0.1 ms
per call (about 5%), more than most changes are worth. So each build is copied COPIES times
into one fresh directory, every copy runs RUNS times, interleaved with all the others (one
call of each copy per round), and a build's figure is the median of its copies' medians.
The spread of those copies is printed too: a difference smaller than it is not a result.

Usage: compare-builds.py [--runs N] [--copies K] BINARY... -- ARGUMENTS...
   e.g. compare-builds.py old/chitti new/chitti -- sandbox exec --backend landlock \
            -w /var/tmp/ws -- sh -c true
Everything after the first `--` is passed to each binary (it may hold `--` itself).
Prints one line per build: median ms, difference from the first build, copy medians.
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="compare-builds.py",
        usage="%(prog)s [--runs N] [--copies K] BINARY... -- ARGUMENTS...",
        description="Compares the start-up of chitti builds (see the top of this file).",
    )
    parser.add_argument("--runs", type=positive, default=200, help="runs of every copy")
    parser.add_argument("--copies", type=positive, default=4, help="copies of every build")
    parser.add_argument("binaries", nargs="+", metavar="BINARY")
    # The arguments may hold `--` themselves: split at the first one before argparse sees it.
    if "--" not in argv:
        parser.error("missing `--` before the arguments")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    args.arguments = argv[split + 1 :]
    for binary in args.binaries:
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            parser.error(f"`{binary}` is not an executable file")
    return args


def time_call(path: str, arguments: list[str], devnull: int) -> float:
    """Milliseconds from spawning `path` to reaping it; its output is discarded."""
    redirect = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
    start = time.perf_counter_ns()
    pid = os.posix_spawn(path, [path, *arguments], os.environ, file_actions=redirect)
    _, status = os.waitpid(pid, 0)
    elapsed = (time.perf_counter_ns() - start) / 1e6
    if status != 0:
        code = os.waitstatus_to_exitcode(status)
        sys.exit(f"compare-builds: `{path} {' '.join(arguments)}` failed ({code}): nothing to time")
    return elapsed


def main() -> int:
    args = parse(sys.argv[1:])
    binaries, arguments = args.binaries, args.arguments
    devnull = os.open(os.devnull, os.O_RDWR)
    # Under /var/tmp where it can be: /tmp is often mounted noexec. Readable by all, for a
    # run as another user.
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="chitti-compare.", dir=base) as scratch:
        os.chmod(scratch, 0o755)
        copied: list[tuple[int, str]] = []
        for copy in range(args.copies):
            for index, binary in enumerate(binaries):
                path = os.path.join(scratch, f"{index}-{copy}-{os.path.basename(binary)}")
                shutil.copyfile(binary, path)
                os.chmod(path, 0o755)
                copied.append((index, path))
        for _, path in copied:  # warm-up: page cache, first-run effects
            for _ in range(3):
                time_call(path, arguments, devnull)
        samples: dict[str, list[float]] = {path: [] for _, path in copied}
        for _ in range(args.runs):
            for _, path in copied:
                samples[path].append(time_call(path, arguments, devnull))
    first = None
    for index, binary in enumerate(binaries):
        medians = [statistics.median(samples[p]) for i, p in copied if i == index]
        median = statistics.median(medians)
        first = median if first is None else first
        spread = " ".join(f"{m:.3f}" for m in medians)
        print(f"{median:8.3f} ms {median - first:+7.3f}  copies: {spread}  {binary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
