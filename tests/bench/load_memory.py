#!/usr/bin/python3
"""Peak resident memory of a ps_server while many
clients send large pushes at once, with and without the server's limits
(--grpc_memory_quota_mb, --max_streams_per_connection).

    /usr/bin/python3 tests/bench/load_memory.py [--clients=64] [--mib=60]
        [--server=bazel-bin/server/ps_server]

Starts ps_server twice (default limits, then --grpc_memory_quota_mb=0
--max_streams_per_connection=0), each time has N clients (one channel each)
send one Push of M MiB at once (a valid PushRequest header and payload; the
shard is not declared, so each is refused after it was read), and prints the
server's VmHWM (peak resident set) before and after, and how the calls ended.
Needs python3-grpcio (Debian), hence /usr/bin/python3.
"""
import argparse
import os
import subprocess
import tempfile
import threading
import time

import grpc


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def push_bytes(mib):
    data = b"\0" * (mib << 20)
    chunk = b"\x08\x00\x1a" + varint(len(data)) + data
    return b"\x08\x00\x10\x01\x1a" + varint(len(chunk)) + chunk


def vm_hwm_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def run(server, flags, clients, mib):
    port_file = tempfile.mktemp()
    proc = subprocess.Popen([server, "--port=0", f"--port_file={port_file}"] + flags,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not os.path.exists(port_file):
            time.sleep(0.05)
        time.sleep(0.2)
        port = int(open(port_file).read())
        before = vm_hwm_mib(proc.pid)
        payload = push_bytes(mib)
        codes = {}
        lock = threading.Lock()
        opts = [("grpc.max_send_message_length", -1),
                ("grpc.max_receive_message_length", -1)]
        barrier = threading.Barrier(clients)

        def client():
            ch = grpc.insecure_channel(f"127.0.0.1:{port}", options=opts)
            call = ch.unary_unary("/downpour.proto.ParameterServer/Push",
                                  request_serializer=None, response_deserializer=None)
            barrier.wait()
            try:
                call(payload, timeout=120)
                code = "OK"
            except grpc.RpcError as e:
                code = e.code().name
            with lock:
                codes[code] = codes.get(code, 0) + 1
            ch.close()

        start = time.time()
        threads = [threading.Thread(target=client) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.time() - start
        after = vm_hwm_mib(proc.pid)
        alive = proc.poll() is None
        return before, after, codes, took, alive
    finally:
        proc.terminate()
        proc.wait()
        if os.path.exists(port_file):
            os.remove(port_file)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--mib", type=int, default=60)
    ap.add_argument("--server", default="bazel-bin/server/ps_server")
    a = ap.parse_args()
    for name, flags in (("limits on (defaults)", []),
                        ("limits off", ["--grpc_memory_quota_mb=0",
                                        "--max_streams_per_connection=0"])):
        before, after, codes, took, alive = run(a.server, flags, a.clients, a.mib)
        print(f"{name}: {a.clients} clients x {a.mib} MiB pushes: peak RSS "
              f"{before:.0f} -> {after:.0f} MiB; calls {codes}; {took:.1f} s; "
              f"server {'alive' if alive else 'DEAD'}", flush=True)


if __name__ == "__main__":
    main()
