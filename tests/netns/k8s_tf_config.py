#!/usr/bin/env python3
"""Prints the TF_CONFIG each replica of Downpour's Kubernetes manifests gets.

    python3 tests/netns/k8s_tf_config.py [deploy/k8s/tfjob.yaml]
        For a Kubeflow TFJob: the TF_CONFIG the training-operator would set
        in every replica, one line per replica:
            <type> <index> <json>
        e.g.  ps 0 {"cluster":{"ps":["downpour-ps-0.default.svc:2222",...],
              "worker":[...]},"task":{"type":"ps","index":0},
              "environment":"cloud"}
        The operator names replica i of type T of job J in namespace N
        "J-t-i.N.svc:PORT" (t = T lower-case; PORT = the containerPort named
        "tfjob-port" of the container named "tensorflow", 2222 by default;
        with the operator's CUSTOM_CLUSTER_DOMAIN, "." + that is appended:
        --cluster-domain).  The JSON is compact with the cluster's keys
        sorted, as Go's encoding/json writes it.  The manifest's
        "# tfjob-meta: {...}" comment line (name, namespace, port, replicas)
        is checked against the manifest itself: a mismatch is an error.

    python3 tests/netns/k8s_tf_config.py --statefulset [deploy/k8s/statefulset.yaml]
        For the plain StatefulSet variant: runs each pod's shell command
        (with HOSTNAME=<statefulset>-<ordinal>, the container's env, and a
        stub `node` on PATH that prints the TF_CONFIG it was given) and prints
        the same "<type> <index> <json>" lines; checks that the cluster lists
        are "<sts>-<i>.<service>:<port>" for every replica of every
        StatefulSet, and the task matches the pod.

    Options (either mode):
      --args        append a 4th field to each line: the replica's arguments
                    to `node`, as a JSON list (the TFJob container's command
                    after `node`; for the StatefulSet, what the stub got).
      --check-tls   check that the manifest is secure by default: every
                    replica mounts the Secret downpour-tls at
                    /etc/downpour/tls (read-only) and passes --tls_cert,
                    --tls_key, --tls_ca and --auth_token_file from there and
                    no --allow_insecure (with --require_task_certificates,
                    its own <type>-<index>.pem/.key); and that the
                    manifest's comment line "#   bash deploy/make_certs.sh
                    [--ps=S --workers=W] certs NAME..." names exactly the
                    servers' hosts (so the certificate covers what the
                    workers dial) and, for task certificates, every task.
      --cert-names  print only those names, one per line, for
                    `bash deploy/make_certs.sh certs $(... --cert-names)`.

Exit status 0 on success, 1 with a message on stderr otherwise.  Standard
library only (no yaml module): a small reader for the YAML subset these
manifests use (block mappings and sequences, `|` block scalars, simple flow
[...] / {...}, quoted and plain scalars, comments, `---` documents).
"""

import collections
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_TFJOB = os.path.join(REPO, "deploy", "k8s", "tfjob.yaml")
DEFAULT_STS = os.path.join(REPO, "deploy", "k8s", "statefulset.yaml")
TFJOB_DEFAULT_PORT = 2222


class Error(Exception):
    pass


class Replica(collections.namedtuple(
        "Replica", "type index tf_config args container pod_spec")):
    """One replica: its TF_CONFIG (compact JSON), its arguments to `node`,
    and the container and pod spec it runs in."""


# --- minimal YAML-subset reader ------------------------------------------------

def _indent(line):
    return len(line) - len(line.lstrip(" "))


def _strip_comment(text):
    """Drops a ' #...' comment outside quotes."""
    quote = None
    for k, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"" and (k == 0 or text[k - 1] in " [{,:"):
            quote = ch
        elif ch == "#" and (k == 0 or text[k - 1] in " \t"):
            return text[:k].rstrip()
    return text.rstrip()


def _split_flow(text):
    """'a, "b, c", d' -> ['a', '"b, c"', 'd'] (no nesting)."""
    parts, cur, quote = [], "", None
    for ch in text:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur += ch
        elif ch == ",":
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


_KEY_RE = re.compile(r"""^("[^"]*"|'[^']*'|[^\s'"\[\]{}#,][^:]*?)\s*:(?:\s+(.*))?$""")


def _scalar(text):
    text = _strip_comment(text.strip())
    if text.startswith('"'):
        return json.loads(text)
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    if text.startswith("["):
        if not text.endswith("]"):
            raise Error("unsupported flow sequence: %s" % text)
        return [_scalar(p) for p in _split_flow(text[1:-1])]
    if text.startswith("{"):
        if not text.endswith("}"):
            raise Error("unsupported flow mapping: %s" % text)
        out = {}
        for p in _split_flow(text[1:-1]):
            m = _KEY_RE.match(p)
            if not m:
                raise Error("bad flow mapping entry: %s" % p)
            out[_scalar(m.group(1))] = _scalar(m.group(2) or "")
        return out
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    return text


class _Reader:
    def __init__(self, lines):
        self.lines = lines

    def skip(self, i):
        while i < len(self.lines):
            s = self.lines[i].strip()
            if s and not s.startswith("#"):
                break
            i += 1
        return i

    def node(self, i):
        i = self.skip(i)
        if i >= len(self.lines):
            return None, i
        line = self.lines[i]
        text = line.strip()
        if text == "-" or text.startswith("- "):
            return self.seq(i, _indent(line))
        return self.mapping(i, _indent(line))

    def value(self, i, rest, ind):
        """The value after `key:` (or `- `) on a line of indent `ind`."""
        rest = _strip_comment(rest or "")
        if rest[:1] in ("|", ">"):
            return self.block_scalar(i, ind, rest)
        if rest:
            return _scalar(rest), i
        j = self.skip(i)
        if j < len(self.lines):
            cur = _indent(self.lines[j])
            t = self.lines[j].strip()
            if cur > ind:
                return self.node(j)
            if cur == ind and (t == "-" or t.startswith("- ")):
                return self.seq(j, cur)
        return None, i

    def block_scalar(self, i, ind, header):
        body, content_indent = [], None
        while i < len(self.lines):
            line = self.lines[i]
            if line.strip():
                cur = _indent(line)
                if cur <= ind:
                    break
                if content_indent is None:
                    content_indent = cur
                body.append(line[content_indent:] if cur >= content_indent else line.lstrip())
            else:
                body.append("")
            i += 1
        while body and body[-1] == "":
            body.pop()
        if header.startswith(">"):
            text = " ".join(body)
        else:
            text = "\n".join(body)
        if not header.endswith("-"):
            text += "\n"
        return text, i

    def mapping(self, i, ind):
        out = {}
        while True:
            i = self.skip(i)
            if i >= len(self.lines):
                break
            line = self.lines[i]
            cur = _indent(line)
            if cur < ind:
                break
            text = _strip_comment(line.strip())
            if cur > ind:
                raise Error("line %d: unexpected indentation: %s" % (i + 1, text))
            if text == "-" or text.startswith("- "):
                break
            m = _KEY_RE.match(text)
            if not m:
                raise Error("line %d: not a 'key: value' line: %s" % (i + 1, text))
            key = _scalar(m.group(1))
            out[key], i = self.value(i + 1, m.group(2), ind)
        return out, i

    def seq(self, i, ind):
        out = []
        while True:
            i = self.skip(i)
            if i >= len(self.lines):
                break
            line = self.lines[i]
            text = _strip_comment(line.strip())
            if _indent(line) != ind or not (text == "-" or text.startswith("- ")):
                break
            item = text[1:].lstrip()
            item_ind = ind + 1 + (len(text) - 1 - len(item))
            i += 1
            m = _KEY_RE.match(item) if item[:1] not in ("'", '"', "[", "{") else None
            if item == "" or item[:1] in ("|", ">"):
                val, i = self.value(i, item, ind)
            elif m:
                first, i = self.value(i, m.group(2), item_ind)
                rest, i = self.mapping(i, item_ind)
                val = {_scalar(m.group(1)): first}
                val.update(rest)
            else:
                val = _scalar(item)
            out.append(val)
        return out, i


def load_documents(text):
    docs, cur = [], []
    for line in text.split("\n"):
        if line.rstrip() == "---" or line.startswith("--- "):
            docs.append(cur)
            cur = []
        else:
            cur.append(line.replace("\t", "    ").rstrip("\r"))
    docs.append(cur)
    out = []
    for lines in docs:
        r = _Reader(lines)
        val, i = r.node(0)
        if r.skip(i) < len(lines):
            raise Error("line %d: could not read: %s" % (r.skip(i) + 1, lines[r.skip(i)].strip()))
        if val is not None:
            out.append(val)
    return out


def _get(obj, *path, default=None):
    for p in path:
        if not isinstance(obj, dict) or p not in obj:
            return default
        obj = obj[p]
    return obj


def go_json(obj):
    """Compact JSON as Go's encoding/json writes a struct/map here."""
    return json.dumps(obj, separators=(",", ":"))


# --- TFJob ----------------------------------------------------------------------

# The operator's pod label holding a replica's index, which the TFJob's
# containers read through the Downward API.
REPLICA_INDEX_FIELD = "metadata.labels['training.kubeflow.org/replica-index']"


def expand_args(args, container, index):
    """Kubernetes' $(VAR) expansion of a container's arguments, for the
    variables known before the pod starts: literal values and the replica's
    index from the operator's label."""
    env = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif _get(e, "valueFrom", "fieldRef", "fieldPath") == REPLICA_INDEX_FIELD:
            env[e["name"]] = str(index)
    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                   lambda m: env.get(m.group(1), m.group(0)), a) for a in args]


def tfjob_configs(path, cluster_domain=""):
    with open(path) as f:
        text = f.read()
    docs = [d for d in load_documents(text) if isinstance(d, dict) and d.get("kind") == "TFJob"]
    if len(docs) != 1:
        raise Error("%s: expected one TFJob document, found %d" % (path, len(docs)))
    job = docs[0]
    if job.get("apiVersion") != "kubeflow.org/v1":
        raise Error("%s: apiVersion is %r, not kubeflow.org/v1" % (path, job.get("apiVersion")))
    name = _get(job, "metadata", "name")
    namespace = _get(job, "metadata", "namespace") or "default"
    if not name:
        raise Error("%s: metadata.name missing" % path)
    specs = _get(job, "spec", "tfReplicaSpecs")
    if not isinstance(specs, dict) or not specs:
        raise Error("%s: spec.tfReplicaSpecs missing" % path)

    replicas, ports, pods = {}, {}, {}
    for rtype, spec in specs.items():
        n = spec.get("replicas", 1)
        if not isinstance(n, int) or n < 0:
            raise Error("%s: %s.replicas = %r" % (path, rtype, n))
        containers = _get(spec, "template", "spec", "containers") or []
        tf = [c for c in containers if c.get("name") == "tensorflow"]
        if not tf:
            raise Error("%s: %s has no container named 'tensorflow' (the operator needs it)" % (path, rtype))
        port = TFJOB_DEFAULT_PORT
        for p in tf[0].get("ports") or []:
            if p.get("name") == "tfjob-port":
                port = p.get("containerPort")
        if not isinstance(port, int) or not 0 < port < 65536:
            raise Error("%s: %s tfjob-port = %r" % (path, rtype, port))
        replicas[rtype] = n
        ports[rtype] = port
        command = list(tf[0].get("command") or []) + list(tf[0].get("args") or [])
        pods[rtype] = (command[1:], tf[0], _get(spec, "template", "spec") or {})

    # The machine-readable header must agree with the manifest.
    m = re.search(r"^#\s*tfjob-meta:\s*(\{.*\})\s*$", text, re.M)
    if m:
        meta = json.loads(m.group(1))
        problems = []
        if meta.get("name") != name:
            problems.append("name %r != %r" % (meta.get("name"), name))
        if meta.get("namespace", "default") != namespace:
            problems.append("namespace %r != %r" % (meta.get("namespace"), namespace))
        if meta.get("replicas") != replicas:
            problems.append("replicas %r != %r" % (meta.get("replicas"), replicas))
        if any(meta.get("port", TFJOB_DEFAULT_PORT) != p for p in ports.values()):
            problems.append("port %r != %r" % (meta.get("port"), ports))
        if problems:
            raise Error("%s: the tfjob-meta comment disagrees with the manifest: %s" % (path, "; ".join(problems)))

    cluster = {}
    for rtype, n in replicas.items():
        rt = rtype.lower()
        suffix = "." + cluster_domain if cluster_domain else ""
        cluster[rt] = ["%s-%s-%d.%s.svc%s:%d" % (name, rt, i, namespace, suffix, ports[rtype])
                       for i in range(n)]
    cluster = dict(sorted(cluster.items()))  # Go sorts map keys
    out = []
    for rtype, n in replicas.items():
        for i in range(n):
            cfg = {"cluster": cluster, "task": {"type": rtype.lower(), "index": i},
                   "environment": "cloud"}
            args, container, pod_spec = pods[rtype]
            out.append(Replica(rtype.lower(), i, go_json(cfg), expand_args(args, container, i),
                               container, pod_spec))
    return out


# --- StatefulSets -----------------------------------------------------------------

STUB_NODE = """#!/bin/sh
printf 'STUB_TF_CONFIG %s\\n' "$TF_CONFIG"
for a in "$@"; do printf 'STUB_ARG %s\\n' "$a"; done
exit 3
"""


def statefulset_configs(path):
    with open(path) as f:
        docs = load_documents(f.read())
    services = {d["metadata"]["name"]: d for d in docs
                if isinstance(d, dict) and d.get("kind") == "Service"}
    sets = [d for d in docs if isinstance(d, dict) and d.get("kind") == "StatefulSet"]
    if not sets:
        raise Error("%s: no StatefulSet" % path)
    expected_cluster, pods = {}, []
    for sts in sets:
        name = sts["metadata"]["name"]
        svc_name = _get(sts, "spec", "serviceName")
        n = _get(sts, "spec", "replicas", default=1)
        svc = services.get(svc_name)
        if svc is None:
            raise Error("%s: StatefulSet %s: no Service %r" % (path, name, svc_name))
        if _get(svc, "spec", "clusterIP") != "None":
            raise Error("%s: Service %s is not headless (clusterIP: None)" % (path, svc_name))
        containers = _get(sts, "spec", "template", "spec", "containers") or []
        if len(containers) != 1:
            raise Error("%s: StatefulSet %s: expected one container" % (path, name))
        c = containers[0]
        env = {e["name"]: str(e.get("value", "")) for e in c.get("env") or []}
        role = env.get("ROLE")
        if role not in ("ps", "worker"):
            raise Error("%s: StatefulSet %s: env ROLE = %r" % (path, name, role))
        port = int(env.get("PORT", "0"))
        cports = [p.get("containerPort") for p in c.get("ports") or []]
        sports = [p.get("port") for p in _get(svc, "spec", "ports") or []]
        if port not in cports or port not in sports:
            raise Error("%s: %s: PORT %d not among containerPorts %r / Service ports %r"
                        % (path, name, port, cports, sports))
        expected_cluster[role] = ["%s-%d.%s:%d" % (name, i, svc_name, port) for i in range(n)]
        argv = list(c.get("command") or []) + list(c.get("args") or [])
        for i in range(n):
            pods.append((name, role, i, argv, env, c, _get(sts, "spec", "template", "spec") or {}))

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        stub = os.path.join(tmp, "node")
        with open(stub, "w") as f:
            f.write(STUB_NODE)
        os.chmod(stub, 0o755)
        for name, role, i, argv, env, container, pod_spec in pods:
            penv = {"PATH": tmp + ":/usr/bin:/bin", "HOSTNAME": "%s-%d" % (name, i)}
            penv.update(env)
            if not argv or argv[0] not in ("/bin/sh", "sh", "/bin/bash", "bash"):
                raise Error("%s: %s: command is not a shell: %r" % (path, name, argv[:2]))
            argv = ["/bin/sh"] + argv[1:]
            r = subprocess.run(argv, env=penv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=30)
            got = [l[len("STUB_TF_CONFIG "):] for l in r.stdout.splitlines()
                   if l.startswith("STUB_TF_CONFIG ")]
            if r.returncode != 3 or len(got) != 1:
                raise Error("%s: pod %s-%d: the command did not run node once (rc %d): %s %s"
                            % (path, name, i, r.returncode, r.stdout, r.stderr))
            cfg = json.loads(got[0])
            if cfg.get("task") != {"type": role, "index": i}:
                raise Error("pod %s-%d: task %r" % (name, i, cfg.get("task")))
            if cfg.get("cluster") != expected_cluster:
                raise Error("pod %s-%d: cluster %r, expected %r (NUM_PS / NUM_WORKERS env "
                            "vs. replicas?)" % (name, i, cfg.get("cluster"), expected_cluster))
            args = [l[len("STUB_ARG "):] for l in r.stdout.splitlines()
                    if l.startswith("STUB_ARG ")]
            out.append(Replica(role, i, got[0], args, container, pod_spec))
    return out


# --- transport security -------------------------------------------------------------

TLS_DIR = "/etc/downpour/tls"
TLS_SECRET = "downpour-tls"
TLS_FLAGS = (("tls_cert", "server.pem"), ("tls_key", "server.key"),
             ("tls_ca", "ca.pem"), ("auth_token_file", "token"))


def cert_names(rows):
    """The servers' hosts, in order: what workers dial, so what the
    certificate's subject alternative names must cover."""
    names = []
    for row in rows:
        for addr in json.loads(row.tf_config)["cluster"].get("ps", []):
            host = addr.rsplit(":", 1)[0]
            if host not in names:
                names.append(host)
    return names


def check_tls(path, rows):
    """Error unless every replica runs with the Secret's TLS files and token."""
    for row in rows:
        who = "%s: %s %d" % (path, row.type, row.index)
        mounts = [m for m in row.container.get("volumeMounts") or []
                  if m.get("mountPath") == TLS_DIR]
        if len(mounts) != 1 or mounts[0].get("readOnly") is not True:
            raise Error("%s: no read-only volumeMount at %s" % (who, TLS_DIR))
        vols = [v for v in row.pod_spec.get("volumes") or []
                if v.get("name") == mounts[0].get("name")]
        if len(vols) != 1 or _get(vols[0], "secret", "secretName") != TLS_SECRET:
            raise Error("%s: the volume at %s is not the Secret %s" % (who, TLS_DIR, TLS_SECRET))
        flags = TLS_FLAGS
        if "--require_task_certificates" in row.args:
            # A certificate per task, named for it (deploy/make_certs.sh --ps --workers).
            name = "%s-%d" % (row.type, row.index)
            flags = (("tls_cert", name + ".pem"), ("tls_key", name + ".key")) + TLS_FLAGS[2:]
        for flag, file in flags:
            want = "--%s=%s/%s" % (flag, TLS_DIR, file)
            if want not in row.args:
                raise Error("%s: node is not given %s (args %r)" % (who, want, row.args))
        if any(a.split("=")[0] in ("--allow_insecure", "-allow_insecure") for a in row.args):
            raise Error("%s: --allow_insecure in a recipe that should be secure by default" % who)
    with open(path) as f:
        m = re.search(r"^#\s*bash deploy/make_certs\.sh((?:\s+--\S+)*)\s+certs\s+(.*?)\s*$",
                      f.read(), re.M)
    if not m:
        raise Error("%s: no '#   bash deploy/make_certs.sh certs NAME...' line" % path)
    if any("--require_task_certificates" in row.args for row in rows):
        want = "--ps=%d --workers=%d" % (sum(r.type == "ps" for r in rows),
                                         sum(r.type == "worker" for r in rows))
        if m.group(1).split() != want.split():
            raise Error("%s: the make_certs.sh line must ask for a certificate per task: %s"
                        % (path, want))
    documented, needed = m.group(2).split(), cert_names(rows)
    if documented != needed:
        raise Error("%s: the make_certs.sh line names %s, the servers are dialled as %s"
                    % (path, " ".join(documented), " ".join(needed)))


def main(argv):
    args = argv[1:]
    sts = with_args = tls = names = False
    domain = ""
    paths = []
    while args:
        a = args.pop(0)
        if a == "--statefulset":
            sts = True
        elif a == "--args":
            with_args = True
        elif a == "--check-tls":
            tls = True
        elif a == "--cert-names":
            names = True
        elif a.startswith("--cluster-domain="):
            domain = a.split("=", 1)[1]
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        elif a.startswith("-"):
            print("k8s_tf_config: unknown option %s" % a, file=sys.stderr)
            return 2
        else:
            paths.append(a)
    if len(paths) > 1:
        print("k8s_tf_config: one manifest at a time", file=sys.stderr)
        return 2
    try:
        path = paths[0] if paths else (DEFAULT_STS if sts else DEFAULT_TFJOB)
        rows = statefulset_configs(path) if sts else tfjob_configs(path, domain)
        if tls:
            check_tls(path, rows)
    except (Error, OSError, ValueError, KeyError, subprocess.SubprocessError) as e:
        print("k8s_tf_config: %s" % e, file=sys.stderr)
        return 1
    if names:
        print("\n".join(cert_names(rows)))
        return 0
    for row in rows:
        line = "%s %d %s" % (row.type, row.index, row.tf_config)
        print(line + (" " + go_json(row.args) if with_args else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
