# File: deploy/bundle_files/downpour_env.sh (libexec/downpour_env.sh in a bundle)
#
# Sourced (bash) by the bundle's wrappers in bin/. Puts on LD_LIBRARY_PATH,
# in this order:
#   1. <bundle>/lib: the packed libraries (gRPC, protobuf, abseil, OpenBLAS,
#      zlib, libstdc++, ...; see libclass.sh),
#   2. the host folders that hold the CUDA runtime libraries the binary needs
#      and the bundle does not carry (cuDNN always; cudart/cuBLAS unless the
#      bundle was made with --with_cuda_libs),
#   3. whatever LD_LIBRARY_PATH already held.
# LD_LIBRARY_PATH takes precedence over the binaries' RUNPATH
# (/usr/local/cuda/lib64), so the packed libraries always win over the host's.
#
# Where a CUDA library is looked for, first hit wins, per library:
#   <bundle>/lib                       (--with_cuda_libs)
#   $DOWNPOUR_CUDA_LIB_DIRS            (colon-separated, the user's override)
#   $DOWNPOUR_CUDA_HOME/{lib64,targets/x86_64-linux/lib,lib}
#                                      (default: $CUDA_HOME, else $CUDA_PATH,
#                                      else /usr/local/cuda)
#   the wheels of $DOWNPOUR_PYTHON (default python3), asked without importing
#   torch: nvidia.cudnn's lib/ (a namespace package has no __file__: its
#   __path__ is used), every nvidia/*/lib (nvidia/cu13/lib holds cuBLAS and
#   cudart for CUDA 13 wheels, nvidia/cublas/lib for older ones), torch/lib
#   the ld.so cache (ldconfig -p): found without any LD_LIBRARY_PATH entry.
#
# Inputs, set by the wrapper before sourcing:
#   DOWNPOUR_BUNDLE   the bundle's root folder (absolute)
#   DOWNPOUR_BINARY   what is being started, for messages
#   DOWNPOUR_NEEDS    space-separated sonames that must be found (else the
#                     wrapper exits 127 with a message saying what to install)
#   DOWNPOUR_WANTS    sonames added when found, silently skipped otherwise
#                     (NVRTC, which cuDNN loads at run time for some engines)
# libstdc++ and libgcc_s: the host's are used when they define every symbol
# version the bundle needs (libexec/requirements.txt), else the packed ones in
# <bundle>/lib/cxx (which need glibc >= 2.36); DOWNPOUR_BUNDLED_CXX=1 or 0
# forces the choice. A host glibc older than needed is reported, status 127.
# DOWNPOUR_ENV_VERBOSE=1 prints where each library was found (bin/check_libs
# does this).
#
# After sourcing: return status 0, or 127 with the message printed; the
# array DP_ENV_REPORT holds one "soname<TAB>where<TAB>how" line per library,
# DP_CXX is "host" or "bundle" (which libstdc++).

DP_ENV_REPORT=()
_dp_ld_dirs=()
_dp_python_done=""
_dp_python_dirs=()

_dp_add_dir() {
  local d="$1" x
  for x in "${_dp_ld_dirs[@]}"; do [[ "$x" == "$d" ]] && return 0; done
  _dp_ld_dirs+=("$d")
}

# Folders from the Python wheels, computed at most once per process and only
# when a library was not found elsewhere (python costs ~50 ms; torch is never
# imported, only located).
_dp_python_candidates() {
  [[ -n "$_dp_python_done" ]] && return 0
  _dp_python_done=1
  local py="${DOWNPOUR_PYTHON:-}"
  if [[ -z "$py" ]]; then
    py="$(command -v python3 || command -v python || true)"
  fi
  [[ -z "$py" ]] && return 0
  local line
  while IFS= read -r line; do
    [[ -n "$line" ]] && _dp_python_dirs+=("$line")
  done < <("$py" - 2>/dev/null <<'PYEOF'
import glob, importlib.util, os
seen = []
def add(d, why):
    if d and os.path.isdir(d) and d not in [s for s, _ in seen]:
        seen.append((d, why))
try:
    import nvidia.cudnn as m
    f = getattr(m, "__file__", None)
    base = os.path.dirname(f) if f else list(m.__path__)[0]
    add(os.path.join(base, "lib"), "python nvidia.cudnn")
except Exception:
    pass
try:
    spec = importlib.util.find_spec("nvidia")
    for p in (spec.submodule_search_locations if spec else None) or []:
        for d in sorted(glob.glob(os.path.join(p, "*", "lib"))):
            add(d, "python nvidia/" + os.path.basename(os.path.dirname(d)))
except Exception:
    pass
try:
    spec = importlib.util.find_spec("torch")
    for p in (spec.submodule_search_locations if spec else None) or []:
        add(os.path.join(p, "lib"), "python torch")
except Exception:
    pass
for d, why in seen:
    print(d + "\t" + why)
PYEOF
)
}

# Prints "<dir>\t<how>" for the first folder holding $1, or "-\tld.so cache"
# when only the loader's cache has it; fails when nothing does.
_dp_find_lib() {
  local so="$1" d cuda_home entry
  if [[ -e "$DOWNPOUR_BUNDLE/lib/$so" ]]; then
    printf '%s\t%s\n' "$DOWNPOUR_BUNDLE/lib" "bundle"
    return 0
  fi
  local user_dirs=()
  IFS=: read -r -a user_dirs <<< "${DOWNPOUR_CUDA_LIB_DIRS:-}"
  for d in "${user_dirs[@]}"; do
    if [[ -n "$d" && -e "$d/$so" ]]; then
      printf '%s\t%s\n' "$d" "DOWNPOUR_CUDA_LIB_DIRS"
      return 0
    fi
  done
  cuda_home="${DOWNPOUR_CUDA_HOME:-${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}}"
  for d in "$cuda_home/lib64" "$cuda_home/targets/x86_64-linux/lib" \
           "$cuda_home/lib"; do
    if [[ -e "$d/$so" ]]; then
      printf '%s\t%s\n' "$d" "CUDA toolkit"
      return 0
    fi
  done
  _dp_python_candidates
  for entry in "${_dp_python_dirs[@]}"; do
    d="${entry%%$'\t'*}"
    if [[ -e "$d/$so" ]]; then
      printf '%s\t%s\n' "$d" "${entry#*$'\t'}"
      return 0
    fi
  done
  # The cache may be stale: only a file that exists counts.
  d="$(_dp_cached_lib "$so")"
  if [[ -n "$d" && -e "$d" ]]; then
    printf '%s\t%s\n' "-" "ld.so cache ($d)"
    return 0
  fi
  return 1
}

# The path the ld.so cache gives for soname $1 (x86-64), or nothing.
_dp_cached_lib() {
  local ldconfig
  ldconfig="$(command -v ldconfig || true)"
  [[ -z "$ldconfig" && -x /sbin/ldconfig ]] && ldconfig=/sbin/ldconfig
  [[ -z "$ldconfig" && -x /usr/sbin/ldconfig ]] && ldconfig=/usr/sbin/ldconfig
  [[ -n "$ldconfig" ]] || return 0
  "$ldconfig" -p 2>/dev/null |
    awk -v so="$1" '$1 == so && /x86-64/ { print $NF; exit }'
}

# The host's copy of soname $1 (x86-64), from the ld.so cache or the usual
# folders; empty when there is none.
_dp_host_lib() {
  local so="$1" d
  d="$(_dp_cached_lib "$so")"
  [[ -n "$d" && -e "$d" ]] && { echo "$d"; return 0; }
  for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64; do
    [[ -e "$d/$so" ]] && { echo "$d/$so"; return 0; }
  done
  return 0
}

_dp_requirement() {  # KEY: its value in libexec/requirements.txt
  sed -n "s/^$1=//p" "$DOWNPOUR_BUNDLE/libexec/requirements.txt" 2>/dev/null
}

# Sets DP_CXX to "host" when the host's libstdc++ and libgcc_s define every
# symbol version the bundle needs (then they are used: they are usually newer
# and need nothing newer from glibc), else "bundle" (lib/cxx, which needs
# glibc >= glibc_with_bundled_cxx). DOWNPOUR_BUNDLED_CXX=1/0 forces it.
# DP_CXX_WHY says why.
_dp_choose_cxx() {
  DP_CXX=host DP_CXX_WHY=""
  case "${DOWNPOUR_BUNDLED_CXX:-auto}" in
    1|yes|bundle) DP_CXX=bundle DP_CXX_WHY="DOWNPOUR_BUNDLED_CXX=1"; return 0 ;;
    0|no|host) DP_CXX=host DP_CXX_WHY="DOWNPOUR_BUNDLED_CXX=0"; return 0 ;;
  esac
  if [[ ! -e "$DOWNPOUR_BUNDLE/lib/cxx/libstdc++.so.6" ]]; then
    DP_CXX_WHY="no libstdc++ in the bundle"
    return 0
  fi
  local stdcxx gcc_s v
  stdcxx="$(_dp_host_lib libstdc++.so.6)"
  gcc_s="$(_dp_host_lib libgcc_s.so.1)"
  if [[ -z "$stdcxx" || -z "$gcc_s" ]]; then
    DP_CXX=bundle DP_CXX_WHY="the host has no libstdc++.so.6/libgcc_s.so.1"
    return 0
  fi
  for v in $(_dp_requirement libstdcxx_versions); do
    if ! grep -qaF -- "$v" "$stdcxx" 2>/dev/null; then
      DP_CXX=bundle DP_CXX_WHY="$stdcxx lacks $v"
      return 0
    fi
  done
  for v in $(_dp_requirement libgcc_versions); do
    if ! grep -qaF -- "$v" "$gcc_s" 2>/dev/null; then
      DP_CXX=bundle DP_CXX_WHY="$gcc_s lacks $v"
      return 0
    fi
  done
  DP_CXX_WHY="$stdcxx has $(_dp_requirement libstdcxx_versions)"
}

# Prints "OLD NEED" and fails when this host's glibc is older than the bundle
# (with the chosen libstdc++) needs.
_dp_glibc_too_old() {
  local need have lowest
  need="$(_dp_requirement glibc)"
  [[ "$DP_CXX" == bundle ]] && need="$(_dp_requirement glibc_with_bundled_cxx)"
  have="$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')"
  [[ -n "$need" && -n "$have" ]] || return 1
  lowest="$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1)"
  [[ "$lowest" == "$need" ]] && return 1
  echo "$have $need"
  return 0
}

_dp_env_main() {
  local so found dir how missing=()
  for so in ${DOWNPOUR_NEEDS:-}; do
    if found="$(_dp_find_lib "$so")"; then
      dir="${found%%$'\t'*}"; how="${found#*$'\t'}"
      [[ "$dir" != "-" && "$dir" != "$DOWNPOUR_BUNDLE/lib" ]] && _dp_add_dir "$dir"
      DP_ENV_REPORT+=("$so"$'\t'"$dir"$'\t'"$how")
    else
      missing+=("$so")
      DP_ENV_REPORT+=("$so"$'\t'"NOT FOUND"$'\t'"-")
    fi
  done
  for so in ${DOWNPOUR_WANTS:-}; do
    if found="$(_dp_find_lib "$so")"; then
      dir="${found%%$'\t'*}"; how="${found#*$'\t'}"
      [[ "$dir" != "-" && "$dir" != "$DOWNPOUR_BUNDLE/lib" ]] && _dp_add_dir "$dir"
      DP_ENV_REPORT+=("$so"$'\t'"$dir"$'\t'"$how (optional)")
    else
      DP_ENV_REPORT+=("$so"$'\t'"not found"$'\t'"optional, skipped")
    fi
  done

  _dp_choose_cxx
  DP_ENV_REPORT+=("libstdc++.so.6 libgcc_s.so.1"$'\t'"$DP_CXX"$'\t'"$DP_CXX_WHY")
  local path="$DOWNPOUR_BUNDLE/lib" d
  [[ "$DP_CXX" == bundle ]] && path="$path:$DOWNPOUR_BUNDLE/lib/cxx"
  for d in "${_dp_ld_dirs[@]}"; do path="$path:$d"; done
  # Keep the caller's entries after ours, without repeating ours.
  local rest="" e old=()
  IFS=: read -r -a old <<< "${LD_LIBRARY_PATH:-}"
  for e in "${old[@]}"; do
    [[ -z "$e" ]] && continue
    case ":$path$rest:" in *":$e:"*) continue ;; esac
    rest="$rest:$e"
  done
  export LD_LIBRARY_PATH="$path$rest"

  if [[ "${DOWNPOUR_ENV_VERBOSE:-0}" == 1 ]]; then
    local r
    for r in "${DP_ENV_REPORT[@]}"; do
      printf 'downpour_env: %s\n' "$r" | tr '\t' ' ' >&2
    done
    printf 'downpour_env: LD_LIBRARY_PATH=%s\n' "$LD_LIBRARY_PATH" >&2
  fi

  local old_glibc
  if old_glibc="$(_dp_glibc_too_old)"; then
    {
      echo "${DOWNPOUR_BINARY:-downpour}: this host's glibc ${old_glibc% *} is older than this bundle needs (${old_glibc#* }$([[ "$DP_CXX" == bundle ]] && echo ", with its own libstdc++: $DP_CXX_WHY"))."
      echo "  the binaries were built on Debian 12; a host with glibc >= $(_dp_requirement glibc) and a libstdc++ from gcc >= 11 runs them."
    } >&2
    return 127
  fi

  if ((${#missing[@]} > 0)); then
    {
      echo "${DOWNPOUR_BINARY:-downpour}: cannot find ${missing[*]} on this host."
      echo "  looked in: ${DOWNPOUR_CUDA_LIB_DIRS:+\$DOWNPOUR_CUDA_LIB_DIRS, }the CUDA toolkit" \
           "(${DOWNPOUR_CUDA_HOME:-${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}}), the nvidia-*/torch" \
           "wheels of ${DOWNPOUR_PYTHON:-python3}, the ld.so cache."
      echo "  fix: install the library (cuDNN 9 comes with PyTorch as the pip package" \
           "nvidia-cudnn-cu13), or set DOWNPOUR_CUDA_LIB_DIRS=/folder/with/it," \
           "DOWNPOUR_PYTHON=/path/to/the/python/with/torch, or DOWNPOUR_CUDA_HOME."
    } >&2
    return 127
  fi
  return 0
}

_dp_env_main
