#!/usr/bin/env bash
# Regenerates docs/flags.md from the built binaries (see deploy/flags_doc.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build //server:ps_server //worker:ps_worker //deploy:launch
bin="$(bazel info bazel-bin)"
/usr/bin/python3 deploy/flags_doc.py ps_server="$bin/server/ps_server" \
  ps_worker="$bin/worker/ps_worker" launch="$bin/deploy/launch" > docs/flags.md
echo "flags_doc: wrote docs/flags.md"
