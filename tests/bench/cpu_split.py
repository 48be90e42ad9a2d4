#!/usr/bin/env python3
"""Where a running job's CPU goes, from /proc: the workers' training threads,
the servers, the workers' other threads (exchange, gRPC, input pipeline) and
what is left idle, over a window of its run.

    cpu_split.py --parent PID [--skip S] [--seconds N]

Looks at the ps_server and ps_worker processes (or binaries whose names
begin so) descended from PID (the launcher), waits --skip seconds (the
start: declaring, the first pull), then reads each thread's user + system
time once a second for up to --seconds,
ending early when a process of the first reading is gone. A worker's
training thread is its main thread (its thread id is its process id). Prints
one line: the shares of all cores' time and the exchange's CPU (servers and
workers' other threads) per training-thread CPU second, a figure that the
machine's changing speed moves less than examples per second. Exits 1 with a
line on stderr when it saw no worker, or less than a second of the window.
"""
import argparse
import os
import sys
import time


def ancestry(pid):
    """The chain of parent pids of `pid` (itself first)."""
    chain = []
    while pid > 1:
        chain.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            break
        pid = int(stat[stat.rindex(")") + 2:].split()[1])
    return chain


def job_processes(parent):
    procs = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        # A binary given by path (launch --ps_worker_bin=...) may have
        # another name: ps_worker_old, say.
        kind = next((k for k in ("ps_server", "ps_worker")
                     if comm.startswith(k)), None)
        if kind is not None and parent in ancestry(int(name)):
            procs[int(name)] = kind
    return procs


def reading(procs):
    """{(pid, tid): (comm, cpu ticks)} for every thread of `procs`, or None
    when one of them is gone."""
    out = {}
    for pid, comm in procs.items():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return None
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue  # A thread that just ended.
            fields = stat[stat.rindex(")") + 2:].split()
            out[(pid, int(tid))] = (comm, int(fields[11]) + int(fields[12]))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--parent", type=int, required=True)
    p.add_argument("--skip", type=float, default=5)
    p.add_argument("--seconds", type=float, default=10)
    a = p.parse_args()
    time.sleep(a.skip)
    procs = job_processes(a.parent)
    if "ps_worker" not in procs.values():
        print("cpu_split: no ps_worker under pid %d" % a.parent, file=sys.stderr)
        return 1
    first = reading(procs)
    t0 = time.monotonic()
    last, t1 = first, t0
    while first is not None and time.monotonic() - t0 < a.seconds:
        time.sleep(1)
        r = reading(procs)
        if r is None:
            break
        last, t1 = r, time.monotonic()
    if first is None or t1 - t0 < 1:
        print("cpu_split: the job ended within a second of the window",
              file=sys.stderr)
        return 1
    hz = os.sysconf("SC_CLK_TCK")
    total = (t1 - t0) * hz * len(os.sched_getaffinity(0))
    train = servers = other = 0
    for key, (comm, ticks) in last.items():
        d = ticks - first.get(key, (comm, ticks))[1]
        if comm == "ps_server":
            servers += d
        elif key[0] == key[1]:
            train += d
        else:
            other += d
    idle = max(0.0, total - train - servers - other)
    print("training %.1f%% servers %.1f%% workers' other threads %.1f%% "
          "idle %.1f%%; exchange CPU per training CPU %.3f"
          % (100 * train / total, 100 * servers / total, 100 * other / total,
             100 * idle / total, (servers + other) / max(train, 1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
