"""The kernel's CPU per GB for the bytes of produce and fetch: what no broker goes below here.

    python bench/bench_floors.py [--quick] [--rounds 3] [--no-load] [--dir DIR] [--no-write]

Issue 25 asks for a broker CPU per GB at most 0.5x Kafka's under `bench_produce_fetch.py
--contention` (one busy-looping process pinned per core). Part of every broker's figure is the
kernel's work on the bytes, the same for any broker that moves them the same way. This measures
that part with a minimal program (no protocol, no validation, no Python per byte; one process
per side over loopback TCP), under the same busy load unless --no-load:
  - fetch: sendfile(2) of a page-cached file to a connected socket (Kafka's and Kompakt's
    zero-copy path), 8 MiB per call; the reader is another process that discards the bytes;
  - produce: recv(2) into a buffer and pwrite(2) of it at the end of a file, the client sending
    REQUEST_BYTES at a time (a Kafka broker's work on the bytes: it does not sync); then with one
    fdatasync(2) per request (the most a broker that acknowledges only synced data does: the group
    commit shares one sync between the requests of a round); then with CRC-32C over the bytes too
    (every broker checks each batch's CRC);
the sender's (fetch) or receiver's (produce) CPU per GB counts, as the broker's would.

Results: stdout and, unless --no-write, a dated section appended to bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from multiprocessing import get_context
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_produce_fetch as B                     # noqa: E402 - after the path set-up above

REQUEST_BYTES = 600 * 1024        # a librdkafka produce request of the --contention flood (~576 KB-1 MB)
SENDFILE_CHUNK = 8 << 20
FLOOR_BYTES = 512 << 20           # bytes moved per floor measurement


# -- floors: the kernel's CPU per GB for the bytes --------------------------------------------------

def _drain(port: int, total: int) -> None:
    """Reader process of the fetch floor: read `total` bytes and drop them."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        buf = memoryview(bytearray(1 << 20))
        got = 0
        while got < total:
            n = s.recv_into(buf)
            if not n:
                break
            got += n


def _feed(port: int, total: int) -> None:
    """Writer process of the produce floors: send `total` bytes, REQUEST_BYTES at a time, then
    wait for the receiver to close."""
    data = os.urandom(REQUEST_BYTES)
    with socket.create_connection(("127.0.0.1", port)) as s:
        sent = 0
        while sent < total:
            s.sendall(data)
            sent += len(data)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)


def _accept(target, total: int):
    """A listening socket, the peer process started on it, and the accepted connection."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    peer = get_context("fork").Process(target=target, args=(ls.getsockname()[1], total))
    peer.start()
    conn, _ = ls.accept()
    ls.close()
    return peer, conn


def fetch_floor(path: str, total: int) -> float:
    """CPU-s per GB of sendfile(2) from the page-cached `path` to a loopback reader."""
    peer, conn = _accept(_drain, total)
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    try:
        t0 = time.thread_time()
        sent = 0
        while sent < total:
            off = sent % size
            n = os.sendfile(conn.fileno(), fd, off, min(SENDFILE_CHUNK, size - off, total - sent))
            sent += n
        cpu = time.thread_time() - t0
    finally:
        os.close(fd)
        conn.close()
        peer.join()
    return cpu / (total / 1e9)


def produce_floor(directory: str, total: int, sync: bool, crc: bool) -> float:
    """CPU-s per GB of receiving `total` bytes from a loopback writer and appending them to a file
    (a fresh one), one pwrite(2) per REQUEST_BYTES received, with one fdatasync(2) after each
    (`sync`) and CRC-32C over each (`crc`)."""
    import crc32c
    peer, conn = _accept(_feed, total)
    path = os.path.join(directory, f"floor-{time.monotonic_ns()}.log")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    buf = bytearray(REQUEST_BYTES)
    view = memoryview(buf)
    try:
        t0 = time.thread_time()
        pos = 0
        while True:
            have = 0
            while have < REQUEST_BYTES:
                n = conn.recv_into(view[have:])
                if not n:
                    break
                have += n
            if not have:
                break
            if crc:
                crc32c.crc32c(view[:have])
            os.pwrite(fd, view[:have], pos)
            pos += have
            if sync:
                os.fdatasync(fd)
        cpu = time.thread_time() - t0
    finally:
        conn.close()
        os.close(fd)
        os.unlink(path)
        peer.join()
    return cpu / (pos / 1e9)


def floors(args, rounds: int) -> list[str]:
    total = FLOOR_BYTES // (8 if args.quick else 1)
    names = ["fetch: sendfile, page cache -> socket", "produce: recv + pwrite",
             "produce: recv + pwrite + fdatasync per request", "produce: recv + CRC-32C + pwrite + fdatasync per request"]
    res: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="kompakt-bounds-", dir=args.dir) as d:
        path = os.path.join(d, "cached.log")
        with open(path, "wb") as fh:                 # 64 MiB written: in the page cache from here on
            for _ in range(64):
                fh.write(os.urandom(1 << 20))
        for rnd in range(rounds):
            res[names[0]].append(fetch_floor(path, total))
            res[names[1]].append(produce_floor(d, total, sync=False, crc=False))
            res[names[2]].append(produce_floor(d, total, sync=True, crc=False))
            res[names[3]].append(produce_floor(d, total, sync=True, crc=True))
            print(f"floors round {rnd}: " + ", ".join(f"{n} {res[n][-1]:.3f}" for n in names)
                  + f" CPU-s/GB (load {os.getloadavg()[0]:.1f})", flush=True)
    rows = [[n, f"{statistics.median(v):.3f}", f"{min(v):.3f}-{max(v):.3f}"] for n, v in res.items()]
    return B._table(["work (one process, minimal loop)", "CPU-s per GB (median)", "range"], "lrr", rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="an eighth of the bytes (a smoke run)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-load", action="store_true", help="without the busy process per core")
    ap.add_argument("--dir", default=None, help="the directory of the files (default: the temp dir)")
    ap.add_argument("--no-write", action="store_true", help="do not append to bench/RESULTS.md")
    args = ap.parse_args()
    busy = [] if args.no_load else B.start_busy_load()
    load0 = os.getloadavg()[0]
    try:
        table = floors(args, args.rounds)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    print("\n".join(table))
    about = (f"load average {load0:.1f} at the start ({'busy load included' if busy else 'no busy load'}), "
             f"{os.getloadavg()[0]:.1f} at the end. "
             f"{'One busy-looping process pinned per core, as `--contention`. ' if busy else ''}"
             f"Medians of {args.rounds} round(s), each moving {FLOOR_BYTES // (8 if args.quick else 1) >> 20} MiB; "
             f"produce in {REQUEST_BYTES >> 10} KiB requests; files in {args.dir or tempfile.gettempdir()}.")
    flags = " ".join(f for f, on in (("--quick", args.quick), ("--no-load", args.no_load)) if on)
    B._write_results(args, B._results_section(
        f"Kernel floors: CPU per GB of the bytes (`python bench/bench_floors.py {flags + ' ' if flags else ''}"
        f"--rounds {args.rounds}`)", about, table))


if __name__ == "__main__":
    main()
