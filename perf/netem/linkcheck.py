#!/usr/bin/env python3
"""Check the emulated links without MPI collectives: run under perf/netem/run.sh.

    perf/netem/run.sh --ranks 4 --rate 1gbit -- python3 perf/netem/linkcheck.py [MiB]

Every rank i sends MiB (default 128) over one TCP connection to rank i+1 and
receives as much from rank i-1 at the same time (a ring: each link carries
one stream in each direction), after rank 0 and rank 1 ping-pong
1-byte messages on the idle links. Rank i listens on 198.18.0.(i+1); the rank comes from Open MPI's
OMPI_COMM_WORLD_RANK. Prints one line per rank: goodput in each direction and
the round trip, to compare with --rate (TCP payload is about 95% of the
shaped rate at MTU 1500: 1448 payload bytes per 1514-byte frame) and 4x
--delay (a round trip crosses four shaped link directions).
"""
import os
import socket
import sys
import threading
import time

PORT = 47123
CHUNK = 4 << 20


def addr(rank):
    return "198.18.0.%d" % (rank + 1)


def main():
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    total = (int(sys.argv[1]) if len(sys.argv) > 1 else 128) << 20
    nxt, prv = (rank + 1) % size, (rank - 1) % size

    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((addr(rank), PORT))
    lsock.listen(1)

    out = None
    for _ in range(200):  # the next rank may not listen yet
        try:
            out = socket.create_connection((addr(nxt), PORT))
            break
        except OSError:
            time.sleep(0.05)
    if out is None:
        sys.exit("rank %d: cannot connect to %s" % (rank, addr(nxt)))
    inc, _ = lsock.accept()
    for s in (out, inc):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # Start together: a byte around the ring before timing.
    if rank == 0:
        out.sendall(b"g")
        inc.recv(1)
    else:
        inc.recv(1)
    if rank != 0:
        out.sendall(b"g")

    rtt = ""  # idle links: measured before the bulk streams
    if size >= 2 and rank in (0, 1):
        peer = out if rank == 0 else inc
        n = 200
        one = bytearray(1)
        t0 = time.perf_counter()
        for _ in range(n):
            if rank == 0:
                peer.sendall(b"p")
                peer.recv_into(one, 1)
            else:
                peer.recv_into(one, 1)
                peer.sendall(b"p")
        if rank == 0:
            rtt = "  rtt to rank 1 %.1f us (mean of %d 1-byte TCP ping-pongs)" % (
                (time.perf_counter() - t0) / n * 1e6, n)

    buf = memoryview(bytearray(CHUNK))
    result = {}

    def send():
        t0 = time.perf_counter()
        left = total
        while left:
            n = min(left, CHUNK)
            out.sendall(buf[:n])
            left -= n
        result["send"] = time.perf_counter() - t0

    def recv():
        rbuf = memoryview(bytearray(CHUNK))
        t0 = time.perf_counter()
        got = 0
        while got < total:
            n = inc.recv_into(rbuf, min(CHUNK, total - got))
            if n == 0:
                raise RuntimeError("peer closed")
            got += n
        result["recv"] = time.perf_counter() - t0

    threads = [threading.Thread(target=send), threading.Thread(target=recv)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The sender's clock stops when the kernel took the last byte; the
    # receiver's when it arrived: the receiver's rate is the link's.
    mbps = total * 8 / result["recv"] / 1e6

    print("rank %d %s -> %s: %d MiB received from rank %d in %.3f s = %.0f Mbit/s goodput%s"
          % (rank, addr(prv), addr(rank), total >> 20, prv, result["recv"], mbps, rtt), flush=True)
    out.close()
    inc.close()
    lsock.close()


if __name__ == "__main__":
    main()
