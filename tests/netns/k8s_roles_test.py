#!/usr/bin/env python3
"""Kubernetes without a cluster: the manifests' roles, checked offline.

    python3 tests/netns/k8s_roles_test.py <node> <k8s_tf_config.py> <tfjob.yaml> <statefulset.yaml>

For every replica of the TFJob manifest (and of the plain StatefulSet
variant), takes the TF_CONFIG the operator (or the pod's own script) would
give it (tests/netns/k8s_tf_config.py), runs `node --print_spec` with it and
checks that node resolves the right role, index, own address and peers: ps i
is shard i, worker 0 is the chief, and the cluster lists are the manifest's
in order. `node` gets the replica's own arguments from the manifest.
Both manifests must be secure by default (k8s_tf_config.py --check-tls: the
Secret downpour-tls mounted at /etc/downpour/tls, the TLS and token flags
from there with each replica's own certificate, no --allow_insecure, the
documented make_certs.sh names = the servers' hosts), and copies with
--allow_insecure, a stale make_certs.sh line or workers sharing a
certificate must be refused. Also checks that a malformed TF_CONFIG is refused
with a reason (exit 2). Prints PASS or FAIL lines; exit status 0 / 1.
"""
import json
import os
import subprocess
import sys
import tempfile


def expected_line(cfg):
    cluster = cfg["cluster"]
    workers = cluster.get("chief", []) + cluster.get("worker", [])
    ps = cluster["ps"]
    ttype, index = cfg["task"]["type"], cfg["task"]["index"]
    if ttype == "chief":
        ttype, index = "worker", 0
    elif ttype == "worker" and cluster.get("chief"):
        index += 1
    self_addr = (ps if ttype == "ps" else workers)[index]
    chief = "true" if ttype == "worker" and index == 0 else "false"
    return (f"role={ttype} index={index} chief={chief} self={self_addr} "
            f"ps={','.join(ps)} workers={','.join(workers)} source=TF_CONFIG")


def run_node(node, tf_config, args=("--epochs=3", "--bind=0.0.0.0")):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("SLURM_"):
            del env[k]
    env["TF_CONFIG"] = tf_config
    return subprocess.run([node, "--print_spec"] + list(args),
                          env=env, capture_output=True, text=True, timeout=30)


def insecure_copies_refused(tool, tfjob, sts):
    """--check-tls must fail on a plaintext or mis-documented manifest."""
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for src, mode, old, new, why in (
                (tfjob, [], "- --auth_token_file=/etc/downpour/tls/token",
                 "- --auth_token_file=/etc/downpour/tls/token\n                - --allow_insecure",
                 "TFJob with TLS and --allow_insecure"),
                (tfjob, [], "- --tls_cert=/etc/downpour/tls/worker-$(REPLICA_INDEX).pem",
                 "- --tls_cert=/etc/downpour/tls/worker-0.pem",
                 "TFJob whose workers all present worker 0's certificate"),
                (sts, ["--statefulset"], "--auth_token_file=$TLS/token",
                 "--allow_insecure", "StatefulSet without a token, --allow_insecure"),
                (tfjob, [], "downpour-ps-1.default.svc\n", "\n",
                 "TFJob whose make_certs.sh line lacks a server")):
            with open(src) as f:
                text = f.read()
            if text.count(old) < 1:
                print(f"FAIL: {why}: {old!r} not in {src}")
                fails += 1
                continue
            bad = os.path.join(tmp, os.path.basename(src))
            with open(bad, "w") as f:
                f.write(text.replace(old, new))
            out = subprocess.run([sys.executable, tool, "--check-tls"] + mode + [bad],
                                 capture_output=True, text=True, timeout=60)
            if out.returncode == 0:
                print(f"FAIL: {why}: accepted by --check-tls")
                fails += 1
            else:
                print(f"ok: {why} refused: {out.stderr.strip()}")
    return fails


def main():
    node, tool, tfjob, sts = sys.argv[1:5]
    fails = 0
    for args, what in (([tfjob], "TFJob"), (["--statefulset", sts], "StatefulSet")):
        out = subprocess.run([sys.executable, tool, "--args", "--check-tls"] + args,
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            print(f"FAIL: {what}: k8s_tf_config.py: {out.stderr.strip()}")
            fails += 1
            continue
        lines = [l for l in out.stdout.splitlines() if l.strip()]
        if len(lines) != 4:
            print(f"FAIL: {what}: expected 4 replicas, got {len(lines)}")
            fails += 1
        roles = set()
        for line in lines:
            rtype, rindex, text, node_args = line.split(" ", 3)
            got = run_node(node, text, json.loads(node_args))
            want = expected_line(json.loads(text))
            if got.returncode != 0 or got.stdout.strip() != want:
                print(f"FAIL: {what} {rtype} {rindex}: node printed "
                      f"{got.stdout.strip()!r} (exit {got.returncode}, "
                      f"{got.stderr.strip()!r}), expected {want!r}")
                fails += 1
            else:
                print(f"ok: {what} {rtype} {rindex}: {want}")
                roles.add(want.split(" ")[0] + want.split(" ")[1])
        if roles != {"role=psindex=0", "role=psindex=1",
                     "role=workerindex=0", "role=workerindex=1"}:
            print(f"FAIL: {what}: roles {sorted(roles)}")
            fails += 1
    # A chief entry is worker 0 and the listed workers follow it.
    chief_cfg = {"cluster": {"ps": ["p:1"], "chief": ["c:1"], "worker": ["w:1"]},
                 "task": {"type": "worker", "index": 0}, "environment": "cloud"}
    got = run_node(node, json.dumps(chief_cfg))
    if got.stdout.strip() != expected_line(chief_cfg) or "index=1" not in got.stdout:
        print(f"FAIL: chief + worker: {got.stdout.strip()!r}")
        fails += 1
    for bad, why in (('{"cluster":', "malformed JSON"),
                     ('{"cluster":{"ps":["p:1"],"worker":["w:1"]},'
                      '"task":{"type":"ps","index":3}}', "index out of range")):
        got = run_node(node, bad)
        if got.returncode != 2 or "TF_CONFIG" not in got.stderr:
            print(f"FAIL: {why}: exit {got.returncode}, {got.stderr.strip()!r}")
            fails += 1
        else:
            print(f"ok: {why} refused: {got.stderr.strip()}")
    fails += insecure_copies_refused(tool, tfjob, sts)
    print("PASS" if fails == 0 else f"FAIL ({fails})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
