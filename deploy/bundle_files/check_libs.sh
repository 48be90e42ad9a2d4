#!/usr/bin/env bash
# bin/check_libs (from deploy/bundle_files/check_libs.sh): how every program
# of this Downpour bundle resolves its shared libraries on this host, under
# the environment its wrapper sets (libexec/downpour_env.sh).
#
#   bin/check_libs            prints the resolution of the CUDA libraries,
#                             then `ldd` of each program, then a verdict
#   bin/check_libs --require_cuda   also fails when a library the CUDA
#                             backend dlopens (libexec/cuda_dlopen.txt:
#                             cuBLAS, cuDNN) is not on this host
#                             (run_gpu_checks.sh); without it they are
#                             optional, as the CPU path needs none
#
# Fails (exit 1) when
#   * a library is "not found",
#   * a library the bundle is meant to carry (class "bundle" in
#     libexec/libclass.sh: gRPC, protobuf, abseil, OpenBLAS, zlib, libstdc++,
#     ...) resolves from outside <bundle>/lib (a leak: the bundle would not
#     work on a host without it),
#   * this host's glibc is older than the bundle needs
#     (libexec/requirements.txt; downpour_env.sh checks it).
# Run by make_bundle.sh on the build machine and by run_gpu_checks.sh on the
# GPU host.
set -uo pipefail
require_cuda=0
[[ "${1:-}" == --require_cuda ]] && require_cuda=1
self="$(readlink -f -- "${BASH_SOURCE[0]}")"
DOWNPOUR_BUNDLE="$(cd -- "$(dirname -- "$self")/.." && pwd -P)"
B="$DOWNPOUR_BUNDLE"
# shellcheck source=libclass.sh
source "$B/libexec/libclass.sh"

failures=0
fail() { echo "check_libs: FAIL: $*"; failures=$((failures + 1)); }

echo "check_libs: this host: glibc $(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}');" \
     "the bundle needs glibc >= $(sed -n 's/^glibc=//p' "$B/libexec/requirements.txt")" \
     "(>= $(sed -n 's/^glibc_with_bundled_cxx=//p' "$B/libexec/requirements.txt") with its own libstdc++)"

# ---- CUDA libraries from the host ---------------------------------------------
DOWNPOUR_BINARY=check_libs
DOWNPOUR_NEEDS="$(cut -f2 "$B/libexec/programs.txt" "$B/libexec/gpu_tests.txt" |
                  tr ' ' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ')"
DOWNPOUR_WANTS="$(cat "$B/libexec/cuda_wants.txt")"
# shellcheck source=downpour_env.sh
if ! source "$B/libexec/downpour_env.sh"; then
  fail "the environment is incomplete (message above); ldd below shows what is missing"
fi
[[ -n "${DOWNPOUR_NEEDS// /}" ]] ||
  echo "check_libs: no program needs CUDA libraries from the host"
echo "check_libs: libraries from outside lib/ (soname, folder or choice, why):"
for r in "${DP_ENV_REPORT[@]}"; do
  printf '  %s\n' "$r" | tr '\t' ' '
done
echo "check_libs: LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
# The CUDA backend's dlopened libraries (optional unless --require_cuda).
while read -r so; do
  [[ -n "$so" ]] || continue
  if printf '%s\n' "${DP_ENV_REPORT[@]}" | grep -q "^$so"$'\t'"not found"; then
    if [[ "$require_cuda" == 1 ]]; then
      fail "$so (dlopened by the CUDA backend) is not on this host"
    else
      echo "check_libs: $so not found: only the CPU backend can run here"
    fi
  fi
done < <(cat "$B/libexec/cuda_dlopen.txt" 2>/dev/null)

# ---- ldd of every program -----------------------------------------------------
ldd_re='^[[:space:]]*([^[:space:]]+)[[:space:]]+=>[[:space:]]+(.*)$'
while IFS=$'\t' read -r rel _; do
  [[ -n "$rel" ]] || continue
  bin="$B/libexec/$rel"
  echo "== $rel"
  if ! out="$(ldd "$bin" 2>&1)"; then
    echo "$out"
    fail "ldd $rel failed"
    continue
  fi
  echo "$out"
  n_bundle=0 n_host=0 n_cuda=0
  while IFS= read -r line; do
    [[ "$line" =~ $ldd_re ]] || continue
    so="${BASH_REMATCH[1]}"
    rest="${BASH_REMATCH[2]}"
    if [[ "$rest" == "not found" ]]; then
      fail "$rel: $so not found"
      continue
    fi
    path="${rest%% (0x*}"
    case "$(dp_lib_class "$so")" in
      bundle)
        if [[ "$path" == "$B/lib/"* ]]; then
          n_bundle=$((n_bundle + 1))
        else
          fail "$rel: $so resolves outside the bundle: $path"
        fi ;;
      cxx)
        if [[ "${DP_CXX:-host}" == bundle && "$path" != "$B/lib/cxx/"* ]]; then
          fail "$rel: $so should come from $B/lib/cxx but resolves to $path"
        elif [[ "$path" == "$B/lib/"* ]]; then
          n_bundle=$((n_bundle + 1))
        else
          n_host=$((n_host + 1))
        fi ;;
      cuda)
        if [[ "$path" == "$B/lib/"* ]]; then
          n_bundle=$((n_bundle + 1))
        else
          n_cuda=$((n_cuda + 1))
        fi ;;
      *) n_host=$((n_host + 1)) ;;
    esac
  done <<< "$out"
  echo "check_libs: $rel: $n_bundle from the bundle, $n_cuda CUDA from the host, $n_host glibc/driver/libstdc++ from the host"
done < <(cat "$B/libexec/programs.txt" "$B/libexec/gpu_tests.txt")

if ((failures > 0)); then
  echo "check_libs: $failures problem(s)"
  exit 1
fi
echo "check_libs: OK"
