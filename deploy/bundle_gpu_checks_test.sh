#!/usr/bin/env bash
# Test of the bundle's GPU check route on a machine without a GPU (the
# sh_test's data deps; Bazel cannot run inside Bazel, so this packs with
# make_bundle.sh, as bundle.sh would after its build):
#   1. pack a bundle with two GPU test programs and a 1024/500-example data
#      subset into an xz tarball under --max_tarball_mib, and unpack it
#      elsewhere; a limit the tarball passes fails make_bundle.sh;
#   2. `run_gpu_checks.sh --dry_run` with OUT set and a clean environment:
#      exit 0 within its budget, at most 8 files straight in $OUT (names the
#      GPU host's file rules accept), every step in summary.txt and
#      summary.json with the GPU steps NOT RUN and host/libs/train_cpu run
#      for real, the logs in logs.tar.gz, no current_step.log left;
#   3. the skip rule, on fake gtest programs: a test skipped because no GPU
#      is usable fails the gpu_tests step, a skip for another reason does
#      not;
#   4. a hang: a test program that never ends, under a small --budget_s, is
#      killed at the budget, and what ran before it is in summary.txt.
#
# Usage (deploy/BUILD passes runfiles paths):
#   bundle_gpu_checks_test.sh MAKE_BUNDLE PS_SERVER PS_WORKER LAUNCH \
#       COMPUTE_BENCH CUDA_BACKEND_TEST CUDA_LIBS_TEST
set -uo pipefail

MAKE_BUNDLE="$1" PS_SERVER="$2" PS_WORKER="$3" LAUNCH="$4" COMPUTE_BENCH="$5"
CUDA_BACKEND_TEST="$6" CUDA_LIBS_TEST="$7"
T="${TEST_TMPDIR:-$(mktemp -d)}/bundle_gpu_checks_test"
rm -rf "$T"
mkdir -p "$T"

failures=0
check() {  # DESCRIPTION COMMAND...: runs COMMAND, counts a failure
  local what="$1"
  shift
  if "$@"; then
    echo "ok: $what"
  else
    echo "FAIL: $what"
    failures=$((failures + 1))
  fi
}
contains() { grep -qE -- "$2" "$1"; }
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
RUN=(env -i PATH=/usr/bin:/bin HOME="$T" TMPDIR="$T")

# ---- 1. Pack and unpack ------------------------------------------------------
echo "== 1. make_bundle (xz, data subset, size limit)"
pack_args=(--binary=server/ps_server="$(abs "$PS_SERVER")"
  --binary=worker/ps_worker="$(abs "$PS_WORKER")"
  --binary=deploy/launch="$(abs "$LAUNCH")"
  --binary=tests/bench/compute_bench="$(abs "$COMPUTE_BENCH")"
  --test_binary=worker/nn/cuda_backend_test="$(abs "$CUDA_BACKEND_TEST")"
  --test_binary=worker/nn/cuda_libs_test="$(abs "$CUDA_LIBS_TEST")"
  --data_examples=1024,500 --xz_level=0 --version=test --quiet)
if ! "$MAKE_BUNDLE" --out="$T/build/downpour-bundle" --max_tarball_mib=40 \
    "${pack_args[@]}" > "$T/make_bundle.log" 2>&1; then
  cat "$T/make_bundle.log"
  echo "FAIL: make_bundle.sh"
  exit 1
fi
grep '^make_bundle:' "$T/make_bundle.log"
check "the tarball is xz" bash -c "xz -t '$T/build/downpour-bundle.tar.xz'"
check "the programs are stripped" \
  bash -c "! objdump -h '$T/build/downpour-bundle/libexec/worker/ps_worker' | grep -q '\.symtab'"
check "the data subset is 1024 training and 500 test examples (uncompressed IDX)" \
  bash -c "[[ \$(stat -c %s '$T/build/downpour-bundle/data/fashion-mnist/train-labels-idx1-ubyte') == 1032 &&
             \$(stat -c %s '$T/build/downpour-bundle/data/fashion-mnist/t10k-images-idx3-ubyte') == $((16 + 500 * 784)) ]]"
"$MAKE_BUNDLE" --out="$T/small/downpour-bundle" --max_tarball_mib=1 \
  "${pack_args[@]}" > "$T/make_small.log" 2>&1
rc=$?
check "a tarball over --max_tarball_mib fails make_bundle (exit $rc)" \
  bash -c "[[ $rc == 1 ]] && grep -q 'over the limit of 1 MiB' '$T/make_small.log'"
mkdir -p "$T/moved"
tar -C "$T/moved" -xJf "$T/build/downpour-bundle.tar.xz"
rm -rf "$T/build"
B="$T/moved/downpour-bundle"
check "unpacked bundle has run_gpu_checks.sh" test -x "$B/run_gpu_checks.sh"

# ---- 2. The dry run ----------------------------------------------------------------
echo "== 2. run_gpu_checks.sh --dry_run (results in \$OUT)"
mkdir -p "$T/out"
t0=$SECONDS
"${RUN[@]}" OUT="$T/out" "$B/run_gpu_checks.sh" --dry_run > "$T/dry.log" 2>&1
rc=$?
took=$((SECONDS - t0))
sed -n '/^run_gpu_checks: /,$p' "$T/dry.log" | tail -n 14
check "the dry run exits 0 (exit $rc) in $took s, under its 540 s budget" \
  test "$rc" -eq 0 -a "$took" -lt 540
n_files="$(find "$T/out" -mindepth 1 | wc -l)"
check "at most 8 files in \$OUT, all plain files straight inside ($n_files)" \
  bash -c "(( $n_files <= 8 )) && [[ -z \"\$(find '$T/out' -mindepth 1 ! -type f -o -mindepth 2)\" ]]"
check "file names are letters, digits, '.', '_' and '-'" \
  bash -c "! ls '$T/out' | grep -qvE '^[A-Za-z0-9._-]+\$'"
for f in summary.txt summary.json logs.tar.gz; do
  check "\$OUT/$f exists" test -s "$T/out/$f"
done
check "no current_step.log left" test ! -e "$T/out/current_step.log"
S="$T/out/summary.txt"
for s in host gpu_tests train_cuda train_cuda_2replicas bench_fashion_cnn bench_resnet20 \
         job_split profile bench_compiled; do
  check "summary: $s NOT RUN" contains "$S" "^NOT RUN +$s "
done
for s in libs train_cpu; do
  check "summary: $s PASS (ran for real)" contains "$S" "^PASS +$s "
done
check "summary: gpu_tests names the tests that need a GPU" \
  contains "$S" "gpu_tests .*test\(s\) need a GPU"
check "summary: train_cpu's accuracy and step split" \
  contains "$S" "train_cpu: test accuracy [0-9.]+, [0-9.]+ examples/sec; split: w0 "
check "summary: 11 steps, 0 failed" contains "$S" '^11 step\(s\), 0 failed$'
check "summary.json parses, with 11 steps" \
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['dry_run'] and len(d['steps']) == 11 and d['failed'] == 0" "$T/out/summary.json"
tar -tzf "$T/out/logs.tar.gz" > "$T/logs.list"
check "logs.tar.gz holds the step logs and the launch logs" \
  bash -c "grep -qx './train_cpu.log' '$T/logs.list' && grep -qx './gpu_tests.log' '$T/logs.list' && grep -q '^./train_cpu_logs/worker_0.log' '$T/logs.list'"
check "the GPU test programs ran (their GPU tests skipped)" \
  contains "$T/dry.log" 'worker/nn/cuda_backend_test: ok \([1-9][0-9]* skipped for want of a GPU'

# ---- 3. The skip rule ------------------------------------------------------------------
echo "== 3. skips: no GPU fails, another reason does not"
fake() {  # NAME REASON: a gtest-like program whose one test skips for REASON
  mkdir -p "$B/libexec/fake"
  cat > "$B/libexec/fake/$1" <<EOF
#!/bin/bash
echo '[ RUN      ] Fake.Test'
echo 'fake.cc:1: Skipped'
echo '$2'
echo ''
echo '[  SKIPPED ] Fake.Test (0 ms)'
EOF
  chmod 755 "$B/libexec/fake/$1"
  printf 'fake/%s\t\n' "$1"
}
cp "$B/libexec/gpu_tests.txt" "$T/gpu_tests.orig"
fake other_skip_test 'no cuDNN here' > "$B/libexec/gpu_tests.txt"
"${RUN[@]}" "$B/run_gpu_checks.sh" --steps=gpu_tests --results="$T/skip_other" > "$T/skip_other.log" 2>&1
rc=$?
check "a skip for another reason passes (exit $rc)" \
  bash -c "[[ $rc == 0 ]] && grep -qE '^PASS +gpu_tests .*1 test\(s\) skipped for other reasons' '$T/skip_other/summary.txt'"
check "... and its reason is listed" contains "$T/skip_other.log" 'skipped \(no cuDNN here\)'
fake gpu_skip_test 'no usable CUDA device: cudaGetDeviceCount failed' >> "$B/libexec/gpu_tests.txt"
"${RUN[@]}" "$B/run_gpu_checks.sh" --steps=gpu_tests --results="$T/skip_gpu" > "$T/skip_gpu.log" 2>&1
rc=$?
check "a skip for want of a GPU fails the step (exit $rc)" \
  bash -c "[[ $rc == 1 ]] && grep -qE '^FAIL +gpu_tests .*1 test\(s\) skipped: no usable CUDA device' '$T/skip_gpu/summary.txt'"

# ---- 4. A hang keeps what was done --------------------------------------------------------
echo "== 4. a hanging test program under a 20 s budget"
cat > "$B/libexec/fake/hang_test" <<'EOF'
#!/bin/bash
echo '[ RUN      ] Fake.Hang'
exec sleep 977
EOF
chmod 755 "$B/libexec/fake/hang_test"
printf 'fake/hang_test\t\n' > "$B/libexec/gpu_tests.txt"
t0=$SECONDS
"${RUN[@]}" "$B/run_gpu_checks.sh" --dry_run --steps=host,gpu_tests,train_cpu \
  --budget_s=20 --results="$T/hang" > "$T/hang.log" 2>&1
rc=$?
took=$((SECONDS - t0))
cat "$T/hang/summary.txt" 2>/dev/null
check "the run ends near its budget, failing (exit $rc, $took s)" \
  test "$rc" -eq 1 -a "$took" -lt 40
check "host, run before the hang, is in summary.txt" \
  contains "$T/hang/summary.txt" '^NOT RUN +host .*no GPU \(dry run: expected\)'
check "gpu_tests timed out" contains "$T/hang/summary.txt" '^FAIL +gpu_tests .*(timed out|FAILED|failed)'
check "train_cpu was not started: the budget was spent" \
  contains "$T/hang/summary.txt" '^FAIL +train_cpu .*budget'
check "no sleep of the hang is left" bash -c "! pgrep -f '^sleep 977' -u \$(id -u) > /dev/null"
cp "$T/gpu_tests.orig" "$B/libexec/gpu_tests.txt"

if ((failures > 0)); then
  echo "bundle_gpu_checks_test: $failures check(s) failed"
  exit 1
fi
echo "bundle_gpu_checks_test: all checks passed"
