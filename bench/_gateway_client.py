"""A lean load client for bench/gateway.py: raw sockets and one ``selectors`` loop, no HTTP library.

    python bench/_gateway_client.py HOST PORT KEY STREAMS CALLS WARMUP BODY_FILE [THINK]

Opens STREAMS keep-alive connections; each sends WARMUP then CALLS requests one after the
other (POST /v1/messages, BODY_FILE as the body) and reads each chunked answer to its last
chunk. THINK (seconds, default 0): each request, the first included, waits a random 0-THINK
first, so the streams do not send in lockstep (64 runtimes do not). Prints one JSON line: the
timed calls' latencies (s, request written to last byte), the same to the answer's first byte
(``firsts``), bytes read, this process's CPU time (user + system) and its wait on a run queue
(runq_s, from /proc/self/schedstat; 0 elsewhere). Several of these processes make the 64-stream
load, so the client is not what the benchmark measures.
"""

from __future__ import annotations

import heapq
import json
import random
import resource
import selectors
import socket
import sys
import time

END = b"\r\n0\r\n\r\n"  # the last chunk of a chunked answer (after the previous chunk's CRLF)


def runq() -> float:
    try:
        with open("/proc/self/schedstat") as file:
            return int(file.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


def main(host: str, port: int, key: str, streams: int, calls: int, warmup: int, body: bytes, think: float) -> None:
    request = (f"POST /v1/messages HTTP/1.1\r\nhost: {host}:{port}\r\nx-api-key: {key}\r\n"
               f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body
    selector = selectors.DefaultSelector()
    latencies: list[float] = []
    firsts: list[float] = []  # request written to the first byte of the answer
    size = 0
    left: dict[socket.socket, int] = {}
    started: dict[socket.socket, float] = {}
    tail: dict[socket.socket, bytes] = {}
    first: dict[socket.socket, float] = {}
    for _ in range(streams):
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        left[sock] = warmup + calls
        selector.register(sock, selectors.EVENT_READ)
    rng = random.Random(port * 1000 + streams)
    due: list[tuple[float, int, socket.socket]] = []  # (when, tie-break, connection): requests waiting their think time

    def send_later(sock: socket.socket) -> None:
        tail[sock] = b""
        if think:
            heapq.heappush(due, (time.perf_counter() + rng.uniform(0, think), sock.fileno(), sock))
        else:
            started[sock] = time.perf_counter()
            sock.sendall(request)

    before = resource.getrusage(resource.RUSAGE_SELF)
    waited = runq()
    for sock in left:
        send_later(sock)
    open_streams = streams
    while open_streams:
        now = time.perf_counter()
        while due and due[0][0] <= now:
            sock = heapq.heappop(due)[2]
            started[sock] = time.perf_counter()
            sock.sendall(request)
        for key_, _ in selector.select(max(0.0, due[0][0] - now) if due else None):
            sock = key_.fileobj
            assert isinstance(sock, socket.socket)
            data = sock.recv(262144)
            if not data:
                raise SystemExit("the server closed a connection")
            size += len(data)
            seen = tail[sock] + data
            if not tail[sock]:  # the first bytes of this answer
                if not seen.startswith(b"HTTP/1.1 200"):
                    raise SystemExit(f"not a 200 answer: {seen[:200]!r}")
                first[sock] = time.perf_counter()
            if not seen.endswith(END):
                tail[sock] = seen[-len(END):] if len(seen) >= len(END) else seen
                continue
            now = time.perf_counter()
            left[sock] -= 1
            if left[sock] < calls:
                latencies.append(now - started[sock])
                firsts.append(first[sock] - started[sock])
            if left[sock] == 0:
                selector.unregister(sock)
                sock.close()
                open_streams -= 1
                continue
            send_later(sock)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(json.dumps({"latencies": latencies, "firsts": firsts, "bytes": size, "cpu_s": cpu, "runq_s": runq() - waited, "calls": streams * (warmup + calls)}))


if __name__ == "__main__":
    host, port, key, streams, calls, warmup, body_file = sys.argv[1:8]
    with open(body_file, "rb") as file:
        main(host, int(port), key, int(streams), int(calls), int(warmup), file.read(),
             float(sys.argv[8]) if len(sys.argv) > 8 else 0.0)
