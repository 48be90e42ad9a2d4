#!/usr/bin/env bash
# Sandblaster L-BFGS started by the local launcher (2 servers, 3 workers, a
# small subset of Fashion-MNIST): the job ends by itself, every worker's
# DONE line reports its used and backup portions, the portions used times
# their size are exactly the examples SUMMARY counts, and SUMMARY reports
# the iterations, the line-search evaluations and the test accuracy, and
# names L-BFGS as the optimizer, with no learning rate.
#
# Usage: launch_sandblaster_test.sh <launch>
set -euo pipefail
launch="$(realpath "$1")"
data=/usr/share/datasets/fashion-mnist
if [[ ! -e "$data/train-labels-idx1-ubyte.gz" ]]; then
  echo "SKIP: dataset-fashion-mnist is not installed"
  exit 0
fi
work="${TEST_TMPDIR:-$(mktemp -d)}/sandblaster"
rm -rf "$work"; mkdir -p "$work"

"$launch" --mode=sandblaster --servers=2 --workers=3 --epochs=2 \
  --max_train_examples=3000 --sandblaster_batch=1000 --portion_examples=100 \
  --log_dir="$work/logs" --summary_json="$work/summary.json" \
  > "$work/out" 2>&1 || { echo "FAIL: launch exited $?"; tail -30 "$work/out"; exit 1; }

/usr/bin/python3 - "$work/out" "$work/summary.json" <<'PY'
import json, re, sys
out = open(sys.argv[1]).read()
summary = json.load(open(sys.argv[2]))
done = [json.loads(m) for m in re.findall(r'DONE (\{.*\})', out)]
assert len(done) == 3, f"{len(done)} DONE lines:\n{out[-3000:]}"
for d in done:
    for key in ("portions", "backup_portions"):
        assert key in d and d[key] >= 0, f"DONE without {key}: {d}"
    assert d["portions"] > 0, f"worker {d['worker']} used no portion: {d}"
used = sum(d["portions"] for d in done)
assert summary["mode"] == "sandblaster", summary
assert summary["optimizer"] == "lbfgs" and "lr" not in summary, summary
assert used * 100 == summary["examples"], (used, summary["examples"])
assert summary["iterations"] >= 1, summary
assert summary["line_search_evaluations"] >= 1, summary
assert 0.2 < summary["test_accuracy"] <= 1.0, summary
print(f"PASS: {summary['iterations']} iterations, "
      f"{summary['line_search_evaluations']} line-search evaluations, "
      f"{used} portions used, test accuracy {summary['test_accuracy']}")
PY
