#!/usr/bin/env python3
"""Says how the page cache holds each FILE: how many of its pages are cached, and how many
of those sit in large folios (several pages the kernel maps, counts and unmaps as one).

A binary cached in 4 KiB folios (as the linker writes it, or as it is read back from disk
after a reboot) starts and exits measurably slower than the same bytes in 64 KiB folios
(as `cp` writes them): docs/performance.md, 2026-11-30. scripts/bench.sh prints this for
what it measures, so that a run says which state it saw.

Reads /proc/self/pagemap and /proc/kpageflags, which give page frames to root only;
otherwise the folio sizes are reported as unknown. Only pages already cached are looked
at: looking at the others would read them in, and so change what is reported.

Usage: page-cache-folios.py FILE...
"""

import ctypes
import mmap
import os
import struct
import sys

PAGE = os.sysconf("SC_PAGE_SIZE")
KPF_COMPOUND_HEAD = 1 << 15
KPF_COMPOUND_TAIL = 1 << 16
PFN_MASK = (1 << 55) - 1
PRESENT = 1 << 63


def describe(path: str) -> str:
    size = os.path.getsize(path)
    pages = (size + PAGE - 1) // PAGE
    if pages == 0:
        return "empty"
    with open(path, "rb") as file:
        # A private mapping, writable so that ctypes can take its address; only read.
        view = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_COPY)
    try:
        anchor = ctypes.c_char.from_buffer(view)
        base = ctypes.addressof(anchor)
        del anchor
        resident = _resident(base, size, pages)
        frames = _frames(view, base, resident)
    finally:
        view.close()
    if frames is None:
        return f"{len(resident)} of {pages} pages cached (folio sizes unknown: needs root)"
    large = sum(1 for flags in frames if flags & (KPF_COMPOUND_HEAD | KPF_COMPOUND_TAIL))
    return f"{len(resident)} of {pages} pages cached, {large} of them in large folios"


def _resident(base: int, size: int, pages: int) -> list[int]:
    libc = ctypes.CDLL(None, use_errno=True)
    vector = (ctypes.c_ubyte * pages)()
    if libc.mincore(ctypes.c_void_p(base), ctypes.c_size_t(size), vector) != 0:
        raise OSError(ctypes.get_errno(), "mincore")
    return [page for page in range(pages) if vector[page] & 1]


def _frames(view: mmap.mmap, base: int, resident: list[int]) -> list[int] | None:
    try:
        pagemap = open("/proc/self/pagemap", "rb", buffering=0)
        kpageflags = open("/proc/kpageflags", "rb", buffering=0)
    except OSError:
        return None
    with pagemap, kpageflags:
        flags = []
        for page in resident:
            view[page * PAGE]  # maps the cached page into this process, nothing more
            pagemap.seek((base // PAGE + page) * 8)
            (entry,) = struct.unpack("<Q", pagemap.read(8))
            frame = entry & PFN_MASK
            if not entry & PRESENT or frame == 0:
                return None  # frame numbers are hidden from this user
            kpageflags.seek(frame * 8)
            flags.append(struct.unpack("<Q", kpageflags.read(8))[0])
        return flags


def main() -> int:
    if len(sys.argv) < 2:
        sys.exit("usage: page-cache-folios.py FILE...")
    failed = 0
    for path in sys.argv[1:]:
        try:
            print(f"{path}: {describe(os.path.realpath(path))}")
        except (OSError, ValueError) as e:
            print(f"{path}: cannot tell ({e})")
            failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
