#!/usr/bin/env bash
# The house rules, checked on the tree as it is (run by deploy/test.sh from
# the workspace root, outside `bazel test`, because it runs `bazel query`):
#   1. no non-test source file (.cc, .h, .cu) over 700 lines;
#   2. no worker/, server/, rpc/ or common/ target depends on deploy/, and
#      no worker/ target but a test (or test-only helper) on server/, on the
#      real dependency graph;
#   3. no flag name defined by two ABSL_FLAGs outside *_test.cc (the
#      benchmarks included);
#   4. no history tag (an issue or stop number, or a milestone label) in
#      code, scripts or docs: comments say what is true now;
#   5. every flag of a file that lists the flags `launch` forwards (a
#      GivenFlagArgs call or kStoreFlagNames) is in that list, or named on
#      the file's "// Not forwarded by launch:" line: a new worker or server
#      flag cannot be dropped on its way from launch to the processes.
# Prints one line per violation and "structure: N problems"; exits 1 if any.
set -uo pipefail
cd "$(dirname "$0")/.."
problems=0
fail() { echo "structure: $*"; problems=$((problems + 1)); }

# 1. File length.
while IFS= read -r f; do
  n=$(wc -l < "$f")
  ((n > 700)) && fail "$f has $n lines (at most 700 for non-test sources)"
done < <(git ls-files --cached --others --exclude-standard -- '*.cc' '*.h' '*.cu' |
         grep -vE '(_test\.cc|_test_util\.h|/test_[a-z_]*\.h|test_util\.h)$' |
         while read -r f; do [[ -f "$f" ]] && echo "$f"; done)

# 2. Layering, from bazel's own graph.
if command -v bazel >/dev/null; then
  for pkg in worker server rpc common; do
    bad=$(bazel query --noshow_progress \
      "kind(rule, deps(//$pkg/...)) intersect //deploy/..." 2>/dev/null)
    [[ -n "$bad" ]] && fail "//$pkg/... depends on deploy/: $(echo $bad)"
  done
  # Tests may run a real server in process; the worker itself may not.
  bad=$(bazel query --noshow_progress \
    "kind(rule, deps(//worker/... except attr(testonly, 1, //worker/...))) intersect //server/..." 2>/dev/null)
  [[ -n "$bad" ]] && fail "//worker/... (non-test) depends on server/: $(echo $bad)"
else
  fail "bazel not found: cannot check the dependency graph"
fi

# 3. One definition per flag.
dups=$(git ls-files --cached --others --exclude-standard -- '*.cc' |
       grep -vE '_test\.cc$' |
       while read -r f; do [[ -f "$f" ]] && cat "$f"; done |
       tr '\n' ' ' | grep -oE 'ABSL_FLAG\( *[^,]+, *[a-z0-9_]+' |
       sed -E 's/.*, *//' | sort | uniq -d)
for d in $dups; do
  fail "flag --$d is defined more than once: $(git grep --untracked -lE "ABSL_FLAG\\([^,]+, *$d," -- '*.cc' | grep -vE '_test\.cc$' | tr '\n' ' ')"
done

# 4. History tags.
tags='([Ii]ssue [0-9]+|\([Ii]ssue|[Ss]top [0-9]+|Recovery \(|Hostile input[:(]|Compute and learning|Security and operations|Across machines:|GPU bring-up)'
while IFS= read -r hit; do
  fail "history tag: $hit"
done < <(git grep --untracked -nE "$tags" -- . ':!tests/structure_check.sh' ':!third_party' \
           ':!*.safetensors' 2>/dev/null | cut -c1-160)

# 5. Forwarded flags.
while IFS= read -r hit; do
  fail "$hit"
done < <(git grep --untracked -lE 'GivenFlagArgs\(|kStoreFlagNames' -- '*.cc' |
         grep -vE '_test\.cc$|^common/flag_args\.cc$' |
         /usr/bin/python3 -c '
import re, sys
for path in sys.stdin.read().split():
    s = open(path).read()
    defined = re.findall(r"ABSL_FLAG\(\s*[^,]+?,\s*([a-z0-9_]+)\s*,", s)
    m = (re.search(r"kStoreFlagNames\[\]\s*=\s*\{(.*?)\}", s, re.S) or
         re.search(r"GivenFlagArgs\(\s*\{(.*?)\}", s, re.S))
    listed = set(re.findall(r"\"([a-z0-9_]+)\"", m.group(1))) if m else set()
    n = re.search(r"// Not forwarded by launch:([^\n]*)", s)
    exempt = set(n.group(1).split()) if n else set()
    for name in defined:
        if name not in listed and name not in exempt:
            print("%s: --%s is neither forwarded by launch nor on the "
                  "file\x27s \"// Not forwarded by launch:\" line" % (path, name))
')

echo "structure: $problems problems"
((problems == 0))
