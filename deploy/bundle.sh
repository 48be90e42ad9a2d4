#!/usr/bin/env bash
# Builds ps_server, ps_worker, launch, node and the compute benchmark
# (//tests/bench:compute_bench) with Bazel (-c opt) and packs them, stripped,
# with the shared libraries a bare GPU host lacks, a Fashion-MNIST subset,
# the PyTorch side of the benchmark (with tools/spec_to_torch.py and
# models/) and run_gpu_checks.sh, into one folder and an xz tarball
# (deploy/make_bundle.sh does the packing; its comment describes the
# layout). GPU test programs (cc_tests named *cuda* or *gpu*, or tagged cuda
# or gpu: the CUDA unit tests and the backend conformance suites) are packed
# too, for run_gpu_checks.sh; the build fails when the query fails or misses
# a required one, and when the tarball is over 40 MiB (the GPU host's
# working-tree limit is 64 MiB; docs/operations.md "GPU hosts").
#
#   bash deploy/bundle.sh                   # dist/downpour-bundle{,.tar.xz}
#   bash deploy/bundle.sh --out=/tmp/b --no_data
#   scp dist/downpour-bundle.tar.xz gpuhost: && ssh gpuhost \
#     'tar xJf downpour-bundle.tar.xz && downpour-bundle/run_gpu_checks.sh --results=out'
#
# Options:
#   --out=DIR            bundle folder (default dist/downpour-bundle); the
#                        tarball is DIR.tar.gz
#   --no_data            leave out Fashion-MNIST
#   --data_examples=TRAIN[,TEST]  the subset packed (default 30000,10000:
#                        half the training set, the whole test set)
#   --xz_level=L         (default 9e)
#   --max_tarball_mib=N  (default 40)
#   --with_cuda_libs     also pack cudart, cuBLAS, cuBLASLt (+~600 MB; see
#                        make_bundle.sh)
#   --no_tarball         folder only
#   --output_base=DIR    bazel --output_base (default: Bazel's own)
#   --jobs=N             bazel --jobs
#   --quiet              no ldd listings on screen
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."

out=dist/downpour-bundle output_base="" jobs="" make_args=()
data_examples=30000,10000 max_mib=40
for arg in "$@"; do
  case "$arg" in
    --out=*) out="${arg#*=}" ;;
    --output_base=*) output_base="${arg#*=}" ;;
    --jobs=*) jobs="${arg#*=}" ;;
    --no_data|--with_cuda_libs|--no_tarball|--quiet|--xz_level=*) make_args+=("$arg") ;;
    --data_examples=*) data_examples="${arg#*=}" ;;
    --max_tarball_mib=*) max_mib="${arg#*=}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "bundle.sh: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

bazel_cmd=(bazel)
[[ -n "$output_base" ]] && bazel_cmd+=(--output_base="$output_base")
build_flags=(-c opt)
[[ -n "$jobs" ]] && build_flags+=(--jobs="$jobs")

programs=(//server:ps_server //worker:ps_worker //deploy:launch //deploy:node
          //tests/bench:compute_bench)
# GPU tests. A failed query is an error (not "no tests"), and the bundle
# must carry at least the two CUDA test programs: run_gpu_checks.sh treats a
# bundle without GPU tests as a failure, so find that out here.
required_gpu_tests=(//worker/nn:cuda_backend_test //worker/nn:cuda_train_test
                    //worker/nn:backend_conformance_test
                    //worker/nn:backend_conformance_norm_test)
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
# The PyTorch twin finds tools/ and models/ relative to itself
# (../../tools, ../../models), so they keep their repository paths.
# The recipes that run the bundle: the container image, the Slurm script
# and the certificates both make.
args+=(--file=deploy/docker/Dockerfile=deploy/docker/Dockerfile
       --file=deploy/slurm/downpour.sbatch=deploy/slurm/downpour.sbatch
       --file=deploy/make_certs.sh=deploy/make_certs.sh)
args+=(--file=tests/bench/compute_bench.sh=tests/bench/compute_bench.sh
       --file=tests/bench/pytorch_fashion_cnn.py=tests/bench/pytorch_fashion_cnn.py
       --file=tests/bench/gpu_kernel_profile.sh=tests/bench/gpu_kernel_profile.sh
       --file=tools/spec_to_torch.py=tools/spec_to_torch.py)
for m in models/*.prototxt; do args+=(--file="$m=$m"); done
args+=(--data_examples="$data_examples" --max_tarball_mib="$max_mib")
version="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
  version="$version+local-changes"
fi
args+=(--version="$version")

exec deploy/make_bundle.sh "${args[@]}" "${make_args[@]+"${make_args[@]}"}"
