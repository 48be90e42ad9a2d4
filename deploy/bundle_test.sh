#!/usr/bin/env bash
# Test of deploy/make_bundle.sh on the real binaries (the sh_test's data
# deps; Bazel cannot run inside Bazel, so this is make_bundle.sh without
# bundle.sh's build step):
#   1. pack a bundle (a 2048/1000-example data subset, xz -0 for speed) and
#      its tarball; the layout and what is (not) packed;
#   2. unpack the tarball elsewhere and delete the original (relocatable);
#   3. with `env -i PATH=/usr/bin:/bin` (no LD_LIBRARY_PATH from outside):
#      bin/ps_server --helpfull, bin/check_libs (every library resolves, the
#      packed ones from the bundle), ldd of ps_worker shows libgrpc++,
#      libprotobuf, libabsl_*, libopenblas and libz inside the bundle, and
#      LD_DEBUG of a real start shows them loaded from there;
#   4. in a private mount namespace where the system's copies of every packed
#      library (gRPC, protobuf, abseil, OpenBLAS, zlib, OpenSSL, libstdc++,
#      ...) and /usr/share/datasets/fashion-mnist are covered by empty files,
#      so only the bundle can provide them: the unbundled ps_server fails to
#      start, and a 1-server, 1-worker cluster from the bundle trains on the
#      packed data and prints its SUMMARY line (without mount namespaces, the
#      same run without hiding);
#   5. downpour_env.sh's CUDA library search: the toolkit folder, PyTorch's
#      nvidia wheels (cuDNN as a namespace and as a regular package, cuBLAS in
#      nvidia/cu13/lib), DOWNPOUR_CUDA_LIB_DIRS first, a clear message and
#      status 127 for a missing library;
#   6. bin/compute_bench --device=cuda on a machine without a GPU: exit 3
#      and a message; --device=cpu runs one tiny measurement and prints its
#      JSON line;
#   7. ps_worker links no CUDA library (ldd), and run_gpu_checks.sh on a
#      bundle without GPU test programs fails its gpu_tests step (zero tests
#      is not a pass). bundle_gpu_checks_test.sh tests the rest of the GPU
#      check route;
#   8. the recipes that run the bundle: every path the container image's
#      Dockerfile (deploy/docker/Dockerfile, packed) COPYs is in the bundle;
#      the image's file system laid out as the Dockerfile does (its COPY
#      lines and its RUN, under a prefix: there is no container engine
#      here) runs a 1-server, 1-worker job of the recipes' `node` with
#      their --data_dir and /out, in a clean environment; and the Slurm
#      script, submitted from the unpacked bundle's root with a stand-in
#      srun that starts its tasks on this machine, runs the same job from
#      the bundle's bin/node (no bazel-bin) and exits 0 with the summary.
#   Step 4 hides the CUDA toolkit's cudart, cuBLAS and cuDNN as well: the CPU
#   path must run without any CUDA library.
#
# Usage (deploy/BUILD passes runfiles paths):
#   bundle_test.sh MAKE_BUNDLE PS_SERVER PS_WORKER LAUNCH COMPUTE_BENCH NODE \
#     DOCKERFILE SBATCH MAKE_CERTS
set -uo pipefail

MAKE_BUNDLE="$1" PS_SERVER="$2" PS_WORKER="$3" LAUNCH="$4" COMPUTE_BENCH="$5"
NODE="$6" DOCKERFILE="$7" SBATCH="$8" MAKE_CERTS="$9"
T="${TEST_TMPDIR:-$(mktemp -d)}/bundle_test"
rm -rf "$T"
mkdir -p "$T"
DATA=/usr/share/datasets/fashion-mnist

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

# ---- 1. Pack ---------------------------------------------------------------
echo "== 1. make_bundle"
if ! "$MAKE_BUNDLE" --out="$T/build/downpour-bundle" \
    --binary=server/ps_server="$(abs "$PS_SERVER")" \
    --binary=worker/ps_worker="$(abs "$PS_WORKER")" \
    --binary=deploy/launch="$(abs "$LAUNCH")" \
    --binary=tests/bench/compute_bench="$(abs "$COMPUTE_BENCH")" \
    --binary=deploy/node="$(abs "$NODE")" \
    --file=deploy/docker/Dockerfile="$(abs "$DOCKERFILE")" \
    --file=deploy/slurm/downpour.sbatch="$(abs "$SBATCH")" \
    --file=deploy/make_certs.sh="$(abs "$MAKE_CERTS")" \
    --data_dir="$DATA" --data_examples=2048,1000 --xz_level=0 --version=test \
    --quiet > "$T/make_bundle.log" 2>&1; then
  cat "$T/make_bundle.log"
  echo "FAIL: make_bundle.sh"
  exit 1
fi
cat "$T/make_bundle.log"
S="$T/build/downpour-bundle"
for f in bin/ps_server bin/ps_worker bin/launch bin/node bin/compute_bench bin/check_libs \
         libexec/server/ps_server libexec/worker/ps_worker libexec/deploy/node \
         libexec/deploy/launch libexec/tests/bench/compute_bench run_gpu_checks.sh; do
  check "$f is executable" test -x "$S/$f"
done
for pat in 'libgrpc\+\+\.so\.' 'libprotobuf\.so\.' 'libabsl_flags_parse\.so\.' \
           'libopenblas\.so\.' 'libz\.so\.1$' 'libcrypto\.so\.'; do
  check "lib/ has $pat" bash -c "ls '$S/lib' | grep -qE '$pat'"
done
check "lib/cxx/ has libstdc++ and libgcc_s" \
  test -f "$S/lib/cxx/libstdc++.so.6" -a -f "$S/lib/cxx/libgcc_s.so.1"
check "no glibc, loader or driver library is packed" \
  bash -c "! ls -R '$S/lib' | grep -qE '^(libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|ld-linux|libcuda\.so|libnvidia)'"
check "the 4 Fashion-MNIST files are packed" \
  bash -c "[[ \$(ls '$S/data/fashion-mnist' | grep -c 'ubyte$') == 4 ]]"
lib_mb="$(du -sm "$S/lib" | cut -f1)"
check "lib/ is tens of MiB, not hundreds ($lib_mb MiB)" test "$lib_mb" -lt 150
check "the tarball exists" test -s "$T/build/downpour-bundle.tar.xz"

# ---- 2. Relocate -------------------------------------------------------------
echo "== 2. unpack elsewhere"
mkdir -p "$T/moved"
tar -C "$T/moved" -xJf "$T/build/downpour-bundle.tar.xz"
rm -rf "$T/build/downpour-bundle"
B="$T/moved/downpour-bundle"
check "unpacked bundle has bin/launch" test -x "$B/bin/launch"

# ---- 3. Clean environment -----------------------------------------------------
echo "== 3. env -i"
RUN=(env -i PATH=/usr/bin:/bin HOME="$T" TMPDIR="$T")
"${RUN[@]}" "$B/bin/ps_server" --helpfull > "$T/help.log" 2>&1
check "bin/ps_server --helpfull runs" contains "$T/help.log" 'server/server_flags\.cc:'
"${RUN[@]}" "$B/bin/check_libs" > "$T/check_libs.log" 2>&1
rc=$?
check "bin/check_libs passes (exit $rc)" test "$rc" -eq 0
[[ $rc == 0 ]] || cat "$T/check_libs.log"
# ldd of ps_worker under the bundle's environment, as check_libs printed it.
sed -n '/^== worker\/ps_worker$/,/^check_libs: worker\/ps_worker:/p' \
  "$T/check_libs.log" > "$T/ldd_worker.log"
for so in 'libgrpc\+\+\.so\.[0-9.]+' 'libprotobuf\.so\.[0-9]+' \
          'libabsl_status\.so\.[0-9]+' 'libopenblas\.so\.0' 'libz\.so\.1'; do
  check "ldd: $so resolves inside the bundle" \
    contains "$T/ldd_worker.log" "^[[:space:]]*$so => $B/lib/"
done

# What the loader really opened when ps_worker started.
"${RUN[@]}" LD_DEBUG=libs LD_DEBUG_OUTPUT="$T/lddebug" "$B/bin/ps_worker" --help \
  > /dev/null 2>&1
cat "$T"/lddebug.* > "$T/lddebug.log" 2>/dev/null
check "LD_DEBUG: libgrpc++ initialised from the bundle" \
  contains "$T/lddebug.log" "calling init: $B/lib/libgrpc\+\+\.so"
check "LD_DEBUG: libopenblas initialised from the bundle" \
  contains "$T/lddebug.log" "calling init: $B/lib/libopenblas\.so"
leaks="$(grep -oE 'calling init: /[^ ]+' "$T/lddebug.log" | sed 's/calling init: //' |
  while read -r p; do
    if [[ -e "$B/lib/$(basename "$p")" && "$p" != "$B/lib/"* ]]; then echo "$p"; fi
  done | sort -u)"
check "LD_DEBUG: no packed library was loaded from the system${leaks:+ ($leaks)}" \
  test -z "$leaks"

# ---- 4. System libraries hidden ------------------------------------------------
echo "== 4. hidden system libraries"
hide_list="$T/hide.txt"
: > "$hide_list"
for f in "$B"/lib/* "$B"/lib/cxx/*; do
  [[ -f "$f" ]] || continue
  so="$(basename "$f")"
  for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 \
           /usr/local/lib; do
    [[ -e "$d/$so" ]] && readlink -f "$d/$so" >> "$hide_list"
  done
done
# The CUDA libraries too: the CPU path needs none (static cudart, dlopened
# cuBLAS/cuDNN).
for f in /usr/local/cuda/lib64/lib{cudart,cublas,cublasLt,cudnn}*.so*; do
  [[ -e "$f" ]] && readlink -f "$f" >> "$hide_list"
done
sort -u -o "$hide_list" "$hide_list"
cat > "$T/hidden.sh" <<EOF
set -u
while read -r f; do mount --bind /dev/null "\$f" || exit 90; done < "$hide_list"
if [[ -d "$DATA" ]]; then
  mkdir -p "$T/empty"
  mount --bind "$T/empty" "$DATA" || exit 90
fi
echo "hidden: \$(wc -l < "$hide_list") system library files, $DATA"
echo "-- the unbundled ps_server, expected to fail:"
"$(abs "$PS_SERVER")" --help > "$T/unbundled.log" 2>&1 && exit 91
head -n 2 "$T/unbundled.log"
echo "-- bin/check_libs"
env -i PATH=/usr/bin:/bin HOME="$T" "$B/bin/check_libs" > "$T/check_libs_hidden.log" 2>&1 || exit 92
echo "-- bin/launch, 1 server, 1 worker, on the packed data"
exec env -i PATH=/usr/bin:/bin HOME="$T" TMPDIR="$T" "$B/bin/launch" \
  --servers=1 --workers=1 --epochs=1 --max_train_examples=1024 --batch_size=64 \
  --worker_args="--device=cpu --max_test_examples=1000" --log_dir="$T/logs"
EOF
if unshare --mount --propagation private true 2>/dev/null; then
  unshare --mount --propagation private bash "$T/hidden.sh" > "$T/cluster.log" 2>&1
  rc=$?
  cat "$T/cluster.log" | grep -vE '^(worker 0: step|ps 0: |eval: SERVER_STATS)' | tail -n 25
  check "system copies hidden and the unbundled ps_server fails (exit $rc)" \
    test "$rc" -ne 90 -a "$rc" -ne 91
  check "bin/check_libs passes with the system copies hidden (exit $rc)" test "$rc" -ne 92
  [[ $rc == 92 ]] && cat "$T/check_libs_hidden.log"
  check "check_libs chose the packed libstdc++ with the system one hidden" \
    contains "$T/check_libs_hidden.log" 'libstdc\+\+\.so\.6 libgcc_s\.so\.1 bundle'
else
  echo "NOTE: no private mount namespace here: the cluster runs without hiding the system libraries"
  env -i PATH=/usr/bin:/bin HOME="$T" TMPDIR="$T" "$B/bin/launch" \
    --servers=1 --workers=1 --epochs=1 --max_train_examples=1024 --batch_size=64 \
    --worker_args="--device=cpu --max_test_examples=1000" --log_dir="$T/logs" \
    > "$T/cluster.log" 2>&1
  rc=$?
  tail -n 5 "$T/cluster.log"
fi
check "bundled launch exits 0 (exit $rc)" test "$rc" -eq 0
check "bundled launch prints its SUMMARY line" \
  contains "$T/cluster.log" '^SUMMARY \{.*"examples":1024.*"test_accuracy":'
check "the worker prints its DONE line" \
  contains "$T/logs/worker_0.log" '^DONE \{"worker":0,"steps":16,'

# ---- 5. CUDA library search -----------------------------------------------------
echo "== 5. downpour_env.sh CUDA search"
resolve() {  # prints LD_LIBRARY_PATH, or the error; env from the caller
  env -i PATH=/usr/bin:/bin HOME="$T" "$@" bash -c '
    DOWNPOUR_BUNDLE="'"$B"'" DOWNPOUR_BINARY=probe
    source "$DOWNPOUR_BUNDLE/libexec/downpour_env.sh" && echo "LD=$LD_LIBRARY_PATH"' 2>&1
}
mk() { mkdir -p "$(dirname "$1")" && : > "$1"; }
F="$T/fake"
mk "$F/cuda/lib64/libfakecudart.so.13"
mk "$F/site_ns/nvidia/cudnn/lib/libfakecudnn.so.9"      # namespace packages
mk "$F/site_ns/nvidia/cu13/lib/libfakecublas.so.13"
mk "$F/site_pkg/nvidia/cudnn/__init__.py"               # regular package
mk "$F/site_pkg/nvidia/cudnn/lib/libfakecudnn.so.9"
mk "$F/override/libfakecudnn.so.9"
needs="libfakecudart.so.13 libfakecudnn.so.9 libfakecublas.so.13"
out="$(resolve DOWNPOUR_NEEDS="$needs" DOWNPOUR_CUDA_HOME="$F/cuda" \
        PYTHONPATH="$F/site_ns")"
check "toolkit + namespace wheels: $out" \
  test "$out" == "LD=$B/lib:$F/cuda/lib64:$F/site_ns/nvidia/cudnn/lib:$F/site_ns/nvidia/cu13/lib"
out="$(resolve DOWNPOUR_NEEDS="libfakecudnn.so.9" DOWNPOUR_CUDA_HOME="$F/none" \
        PYTHONPATH="$F/site_pkg")"
check "regular nvidia.cudnn package: $out" \
  test "$out" == "LD=$B/lib:$F/site_pkg/nvidia/cudnn/lib"
out="$(resolve DOWNPOUR_NEEDS="libfakecudnn.so.9" DOWNPOUR_CUDA_HOME="$F/none" \
        PYTHONPATH="$F/site_pkg" DOWNPOUR_CUDA_LIB_DIRS="$F/override" \
        LD_LIBRARY_PATH="/x:$B/lib")"
check "DOWNPOUR_CUDA_LIB_DIRS first, caller's LD_LIBRARY_PATH kept last: $out" \
  test "$out" == "LD=$B/lib:$F/override:/x"
out="$(resolve DOWNPOUR_NEEDS="libfakecudnn.so.9 libfakemissing.so.1" \
        DOWNPOUR_CUDA_HOME="$F/cuda" PYTHONPATH="$F/site_ns"; echo "status=$?")"
check "a missing library: message and status 127" \
  bash -c '[[ "$1" == *"cannot find libfakemissing.so.1"* && "$1" == *"status=127"* ]]' _ "$out"
out="$(resolve DOWNPOUR_WANTS="libfakemissing.so.1")"
check "a missing optional library is skipped: $out" test "$out" == "LD=$B/lib"

# ---- 6. Compute bench: no GPU, and a tiny CPU run ---------------------------------
echo "== 6. compute_bench"
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  echo "NOTE: this machine has a GPU; the no-GPU message is not checked"
else
  "${RUN[@]}" "$B/bin/compute_bench" --device=cuda > "$T/bench.log" 2>&1
  rc=$?
  cat "$T/bench.log"
  check "compute_bench --device=cuda exits 3 without a GPU (exit $rc)" test "$rc" -eq 3
  check "compute_bench says why" contains "$T/bench.log" '^compute_bench: --device=cuda: '
fi
"${RUN[@]}" "$B/bin/compute_bench" --device=cpu --batch_sizes=8 --warmup_steps=1 \
  --steps=2 --pool_batches=1 > "$T/bench_cpu.log" 2>&1
rc=$?
tail -n 3 "$T/bench_cpu.log"
check "compute_bench --device=cpu runs from the bundle (exit $rc)" test "$rc" -eq 0
check "compute_bench prints its JSON line" \
  contains "$T/bench_cpu.log" '^\{"bench":"fashion_cnn_worker_step",.*"results":\[\{"batch_size":8,'


# ---- 7. No CUDA library at link time; zero GPU tests fail ---------------------
echo "== 7. CPU path without CUDA libraries; run_gpu_checks with no GPU tests"
ldd "$B/libexec/worker/ps_worker" > "$T/ldd_plain.log" 2>&1
check "ps_worker links no CUDA library (cudart static, cuBLAS/cuDNN dlopened)" \
  bash -c "! grep -qE 'libcudart|libcublas|libcudnn' '$T/ldd_plain.log'"
check "cuda_dlopen.txt names cuBLAS and cuDNN" \
  bash -c "grep -qx 'libcudnn.so.9' '$B/libexec/cuda_dlopen.txt' && grep -qx 'libcublas.so.13' '$B/libexec/cuda_dlopen.txt'"
env -i PATH=/usr/bin:/bin HOME="$T" "$B/run_gpu_checks.sh" --steps=gpu_tests \
  --results="$T/gpu_checks" > "$T/gpu_checks.log" 2>&1
rc=$?
grep -E '^(FAIL|PASS) ' "$T/gpu_checks/summary.txt"
check "run_gpu_checks fails with no GPU test programs (exit $rc)" test "$rc" -ne 0
check "its gpu_tests step is the failure, naming the cause" \
  bash -c "grep -qE '^FAIL +gpu_tests .*no GPU tests in this bundle' '$T/gpu_checks/summary.txt'"

# ---- 8. Recipes: the container image, the Slurm script --------------------------
echo "== 8. recipes"
D="$B/deploy/docker/Dockerfile"
check "the bundle carries deploy/docker/Dockerfile" test -f "$D"
check "the bundle carries the Slurm script and make_certs.sh" \
  test -f "$B/deploy/slurm/downpour.sbatch" -a -x "$B/deploy/make_certs.sh"
# The image's root under a prefix: each COPY (sources relative to the
# build context, the bundle), then the RUN with its absolute paths moved
# under the prefix.
I="$T/image"
mkdir -p "$I"
copies=0
while read -r line; do
  read -ra words <<< "$line"
  dest="${words[-1]}"
  for src in "${words[@]:1:${#words[@]}-2}"; do
    copies=$((copies + 1))
    check "Dockerfile: COPY $src: in the bundle" test -e "$B/$src"
    mkdir -p "$I$dest"
    if [[ -d "$B/$src" ]]; then cp -a "$B/$src/." "$I$dest"; else cp -a "$B/$src" "$I$dest"; fi
  done
done < <(grep -E '^COPY ' "$D")
check "Dockerfile: $copies sources copied" test "$copies" -ge 5
run_cmd="$(awk '/^RUN /{on=1; sub(/^RUN /, "")} on{line=$0; sub(/\\$/, "", line); printf "%s ", line; if ($0 !~ /\\$/) on=0}' "$D")"
run_cmd="$(sed -E "s#(^|[ \"])/(opt|usr|out)#\1$I/\2#g" <<< "$run_cmd")"
env -i PATH=/usr/bin:/bin HOME="$T" bash -c "$run_cmd" > "$T/image_run.log" 2>&1
rc=$?
check "Dockerfile: its RUN works on the bundle (exit $rc)" test "$rc" -eq 0
[[ $rc == 0 ]] || cat "$T/image_run.log"
check "the image has node on PATH and the data where the recipes look" \
  test -x "$I/usr/local/bin/node" -a -e "$I/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte"
free_ports() {  # N: N free TCP ports on loopback
  python3 -c 'import socket,sys
s=[socket.socket() for _ in range(int(sys.argv[1]))]
for x in s: x.bind(("127.0.0.1", 0))
print(" ".join(str(x.getsockname()[1]) for x in s))' "$1"
}
read -r p0 p1 <<< "$(free_ports 2)"
spec=(--ps_hosts="127.0.0.1:$p0" --worker_hosts="127.0.0.1:$p1")
job=(--data_dir="$I/usr/share/datasets/fashion-mnist" --epochs=1
     --max_train_examples=512 --max_test_examples=500 --device=cpu)
IRUN=(env -i PATH="$I/usr/local/bin:/usr/bin:/bin" HOME="$T")
"${IRUN[@]}" node "${spec[@]}" --task_type=ps --task_index=0 "${job[@]}" \
  --checkpoint_dir="$I/out/ckpt" > "$T/image_ps.log" 2>&1 &
ps_pid=$!
"${IRUN[@]}" node "${spec[@]}" --task_type=worker --task_index=0 "${job[@]}" \
  --save_params="$I/out/model.safetensors" --summary_json="$I/out/summary.json" \
  > "$T/image_worker.log" 2>&1
wrc=$?
timeout 30 tail --pid="$ps_pid" -f /dev/null
wait "$ps_pid"; prc=$?
tail -n 3 "$T/image_worker.log"
check "image layout: node as worker 0 (the chief) exits 0 (exit $wrc)" test "$wrc" -eq 0
check "image layout: node as server 0 exits 0 (exit $prc)" test "$prc" -eq 0
[[ $prc == 0 ]] || tail -n 5 "$T/image_ps.log"
check "image layout: the model and summary are in /out" \
  test -s "$I/out/model.safetensors" -a -s "$I/out/summary.json"
"${IRUN[@]}" node "${spec[@]}" --task_type=ps --task_index=0 "${job[@]}" \
  --checkpoint_dir="$I/out/ckpt" > "$T/image_ps_again.log" 2>&1
rc=$?
check "image layout: a server on the finished job's snapshots exits 2 (exit $rc)" \
  test "$rc" -eq 2
check "image layout: ... saying there is nothing to resume" \
  contains "$T/image_ps_again.log" 'holds the snapshots of a job that finished; nothing to resume'
rc=0
"${IRUN[@]}" node "${spec[@]}" --task_type=ps --task_index=0 "${job[@]}" \
  --epochs=2 --checkpoint_dir="$I/out/ckpt" > "$T/image_ps_other.log" 2>&1 || rc=$?
check "image layout: a server of another job on them exits 2 naming it (exit $rc)" \
  bash -c "[[ $rc == 2 ]] && grep -q 'another job (epochs 1 there, 2 here)' '$T/image_ps_other.log'"
check "image layout: the spec line once per task" \
  test "$(grep -c '^ps_server: cluster spec from' "$T/image_ps.log")" -eq 1 -a \
       "$(grep -c '^worker 0: cluster spec from' "$T/image_worker.log")" -eq 1

# The Slurm script from the bundle's root, with a stand-in srun: every task
# of the step on this machine, with the variables Slurm gives each.
mkdir -p "$T/fake_slurm"
cat > "$T/fake_slurm/srun" <<'SRUN'
#!/usr/bin/env bash
n=1
while [[ $# -gt 0 && "$1" == -* ]]; do
  case "$1" in --ntasks=*) n="${1#*=}" ;; esac
  shift
done
pids=()
for ((r = 0; r < n; ++r)); do
  SLURM_PROCID=$r SLURM_STEP_NUM_TASKS=$n SLURM_STEP_NODELIST=localhost \
    SLURM_STEP_TASKS_PER_NODE=$n SLURM_NODEID=0 SLURM_LOCALID=$r "$@" 2>&1 |
    sed "s/^/$r: /" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
SRUN
chmod 755 "$T/fake_slurm/srun"
(cd "$B" && env -i PATH="$T/fake_slurm:/usr/bin:/bin" HOME="$T" \
   SLURM_NTASKS=2 SLURM_JOB_ID=7 SLURM_JOB_NODELIST=localhost SLURM_SUBMIT_DIR="$B" \
   NUM_PS=1 EPOCHS=1 OUT_DIR="$T/slurm_out" DOWNPOUR_ALLOW_INSECURE=1 \
   DATA_DIR="$B/data/fashion-mnist" \
   bash deploy/slurm/downpour.sbatch --max_train_examples=512 \
     --max_test_examples=500 --device=cpu) > "$T/slurm.log" 2>&1
rc=$?
tail -n 4 "$T/slurm.log"
check "Slurm script from the bundle's root exits 0 (exit $rc)" test "$rc" -eq 0
check "Slurm script: the tasks ran the bundle's node" \
  bash -c "! grep -q 'no node binary' '$T/slurm.log' && grep -q 'srun exited with status 0' '$T/slurm.log'"
check "Slurm script: summary and snapshots in OUT_DIR" \
  test -s "$T/slurm_out/summary.json" -a -f "$T/slurm_out/ckpt/JOB"

if ((failures > 0)); then
  echo "bundle_test: $failures check(s) failed"
  exit 1
fi
echo "bundle_test: all checks passed"
