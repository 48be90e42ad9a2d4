#!/usr/bin/env bash
# Fails when docs/flags.md differs from what the binaries' --helpfull say.
# Usage: flags_doc_test.sh <flags_doc.py> <flags.md> <ps_server> <ps_worker> <launch>
set -euo pipefail
generated="${TEST_TMPDIR:-/tmp}/flags.md"
/usr/bin/python3 "$1" ps_server="$3" ps_worker="$4" launch="$5" > "$generated"
if ! diff "$generated" "$2"; then
  echo "FAIL: docs/flags.md is stale; run: bash deploy/flags_doc.sh"
  exit 1
fi
echo "PASS: docs/flags.md matches the binaries"
