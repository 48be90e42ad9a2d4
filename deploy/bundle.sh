#!/usr/bin/env bash
# Builds ps_server, ps_worker, launch and the compute benchmark
# (//tests/bench:compute_bench) with Bazel (-c opt) and packs them, with the shared libraries a bare GPU host lacks,
# the Fashion-MNIST files and run_gpu_checks.sh, into one folder and a
# tarball (deploy/make_bundle.sh does the packing; its comment describes the
# layout). GPU test programs (cc_tests named *cuda* or *gpu*, or tagged cuda
# or gpu) are packed too, for run_gpu_checks.sh; the build fails when the
# query fails or misses //worker/nn:cuda_backend_test or :cuda_train_test.
#
#   bash deploy/bundle.sh                   # dist/downpour-bundle{,.tar.gz}
#   bash deploy/bundle.sh --out=/tmp/b --no_data
#   scp dist/downpour-bundle.tar.gz gpuhost: && ssh gpuhost \
#     'tar xzf downpour-bundle.tar.gz && downpour-bundle/run_gpu_checks.sh'
#
# Options:
#   --out=DIR            bundle folder (default dist/downpour-bundle); the
#                        tarball is DIR.tar.gz
#   --no_data            leave out Fashion-MNIST (~30 MiB)
#   --with_cuda_libs     also pack cudart, cuBLAS, cuBLASLt (+~600 MB; see
#                        make_bundle.sh)
#   --no_tarball         folder only
#   --output_base=DIR    bazel --output_base (default: Bazel's own)
#   --jobs=N             bazel --jobs
#   --quiet              no ldd listings on screen
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

out=dist/downpour-bundle output_base="" jobs="" make_args=()
for arg in "$@"; do
  case "$arg" in
    --out=*) out="${arg#*=}" ;;
    --output_base=*) output_base="${arg#*=}" ;;
    --jobs=*) jobs="${arg#*=}" ;;
    --no_data|--with_cuda_libs|--no_tarball|--quiet) make_args+=("$arg") ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "bundle.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

bazel_cmd=(bazel)
[[ -n "$output_base" ]] && bazel_cmd+=(--output_base="$output_base")
build_flags=(-c opt)
[[ -n "$jobs" ]] && build_flags+=(--jobs="$jobs")

programs=(//server:ps_server //worker:ps_worker //deploy:launch //tests/bench:compute_bench)
# GPU tests. A failed query is an error (not "no tests"), and the bundle
# must carry at least the two CUDA test programs: run_gpu_checks.sh treats a
# bundle without GPU tests as a failure, so find that out here.
required_gpu_tests=(//worker/nn:cuda_backend_test //worker/nn:cuda_train_test)
query_err="$(mktemp)"
if ! query_out="$("${bazel_cmd[@]}" query --output=label \
    'kind("cc_test", attr(name, "cuda|gpu", //...) + attr(tags, "\b(cuda|gpu)\b", //...))' \
    2> "$query_err")"; then
  cat "$query_err" >&2
  echo "bundle.sh: bazel query for the GPU tests failed (see above)" >&2
  rm -f "$query_err"
  exit 1
fi
rm -f "$query_err"
mapfile -t gpu_tests < <(sed '/^$/d' <<< "$query_out")
for t in "${required_gpu_tests[@]}"; do
  if ! printf '%s\n' "${gpu_tests[@]+"${gpu_tests[@]}"}" | grep -qxF -- "$t"; then
    echo "bundle.sh: the GPU test $t was not found by bazel query; refusing" \
         "to pack a bundle without it" >&2
    exit 1
  fi
done

echo "bundle.sh: building ${programs[*]} ${gpu_tests[*]+"${gpu_tests[*]}"}"
"${bazel_cmd[@]}" build "${build_flags[@]}" "${programs[@]}" \
  "${gpu_tests[@]+"${gpu_tests[@]}"}"
bin_dir="$("${bazel_cmd[@]}" info "${build_flags[@]}" bazel-bin 2>/dev/null)"

label_path() {  # //a/b:c -> a/b/c
  local l="${1#//}"
  echo "${l%%:*}/${l#*:}"
}
args=(--out="$out")
for t in "${programs[@]}"; do
  p="$(label_path "$t")"
  args+=(--binary="$p=$bin_dir/$p")
done
for t in "${gpu_tests[@]+"${gpu_tests[@]}"}"; do
  p="$(label_path "$t")"
  args+=(--test_binary="$p=$bin_dir/$p")
done
for t in "${required_gpu_tests[@]}"; do
  p="$(label_path "$t")"
  [[ -x "$bin_dir/$p" ]] ||
    { echo "bundle.sh: $t did not build to $bin_dir/$p" >&2; exit 1; }
done
args+=(--file=bench/compute_bench.sh=tests/bench/compute_bench.sh
       --file=bench/pytorch_fashion_cnn.py=tests/bench/pytorch_fashion_cnn.py)
version="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  version="$version+local-changes"
fi
args+=(--version="$version")

exec deploy/make_bundle.sh "${args[@]}" "${make_args[@]+"${make_args[@]}"}"
