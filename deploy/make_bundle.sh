#!/usr/bin/env bash
# Packs already-built Downpour binaries into a self-contained folder (and an
# xz tarball) that runs on a Linux host without gRPC, protobuf, abseil,
# OpenBLAS or zlib: the programs (stripped), the ldd closure of their shared
# libraries less what every host (glibc) or the GPU host (NVIDIA driver,
# CUDA runtime) provides, wrapper scripts that set LD_LIBRARY_PATH, the
# Fashion-MNIST files (uncompressed IDX, which xz packs smaller than their
# .gz; optionally a subset) and run_gpu_checks.sh. deploy/bundle.sh builds
# the binaries with Bazel and calls this; deploy/bundle_test.sh and
# bundle_gpu_checks_test.sh call it on their tests' data deps.
#
#   deploy/make_bundle.sh --out=dist/downpour-bundle \
#       --binary=server/ps_server=bazel-bin/server/ps_server \
#       --binary=worker/ps_worker=bazel-bin/worker/ps_worker \
#       --binary=deploy/launch=bazel-bin/deploy/launch
#
# Layout of the bundle (REL is a binary's workspace path, e.g. server/ps_server):
#   bin/<name>           wrapper: sources libexec/downpour_env.sh, execs
#                        libexec/REL. bin/launch, bin/node and bin/ps_worker
#                        default --data_dir to data/fashion-mnist when it is
#                        packed.
#   bin/check_libs       ldd of every program under the bundle's environment
#   libexec/REL          the real binaries, in the bazel-bin layout, so that
#                        libexec/deploy/launch finds ../server/ps_server and
#                        ../worker/ps_worker itself (deploy/launcher.h:
#                        FindSiblingBinary); its children inherit
#                        LD_LIBRARY_PATH.
#   libexec/programs.txt, libexec/gpu_tests.txt
#                        "REL<TAB>CUDA sonames it needs from the host"
#   lib/                 the packed shared libraries (see libclass.sh)
#   data/fashion-mnist/  the IDX files (unless --no_data), uncompressed
#   run_gpu_checks.sh    the checks to run on the GPU host
#   MANIFEST             what was packed, from where, and what the host needs
#
# Options:
#   --out=DIR             bundle folder (required); replaced if it is an
#                         earlier bundle, refused if it is any other non-empty
#                         folder
#   --binary=REL=PATH     a program; repeatable
#   --test_binary=REL=PATH  a GPU test program that run_gpu_checks.sh runs;
#                         repeatable
#   --file=DEST=SRC       an extra file copied to DEST inside the bundle
#   --data_dir=DIR        where the Fashion-MNIST files are
#                         (default /usr/share/datasets/fashion-mnist)
#   --no_data             do not pack them (~30 MiB)
#   --data_examples=TRAIN[,TEST]  only the first TRAIN training and TEST
#                         test examples (default: all; 0 = all)
#   --no_strip            keep the binaries' symbols (strip --strip-all on
#                         the programs, --strip-unneeded on lib/ otherwise)
#   --with_cuda_libs      also pack cudart, cuBLAS and cuBLASLt from the build
#                         machine. Size: cudart 0.7 MB, cuBLAS 54 MB, cuBLASLt
#                         542 MB (CUDA 13.0), so ~600 MB more unpacked, about
#                         10x the bundle. Only worth it for a host whose
#                         toolkit and Python wheels both lack them; cuDNN is
#                         never packed (~1 GB with its engines).
#   --tarball=PATH        default <out>.tar.xz;  --no_tarball: none
#   --xz_level=L          xz preset for the tarball (default 9e, the
#                         smallest; 0 to 9, optionally with e)
#   --max_tarball_mib=N   fail (exit 1) when the tarball is larger
#   --version=TEXT        recorded in MANIFEST (bundle.sh passes the commit)
#   --quiet               do not print the ldd listings (they are still
#                         written to <out>/ldd.txt)
# Exit status: 0 ok; 2 bad arguments; 1 anything else (a library that cannot
# be resolved here, a packed program that still resolves a library from
# outside the bundle, or a tarball over --max_tarball_mib).
set -euo pipefail

HERE="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
FILES="$HERE/bundle_files"
# shellcheck source=bundle_files/libclass.sh
source "$FILES/libclass.sh"

die() { echo "make_bundle: $*" >&2; exit 1; }
usage() { echo "make_bundle: $*" >&2; echo "  see the comment at the top of $0" >&2; exit 2; }

out="" tarball="" no_tarball=0 data_dir=/usr/share/datasets/fashion-mnist
no_data=0 with_cuda=0 quiet=0 version="" strip=1 xz_level=9e max_tarball_mib=""
data_train=0 data_test=0
programs=() tests=() extra_files=()
for arg in "$@"; do
  case "$arg" in
    --out=*) out="${arg#*=}" ;;
    --binary=*=*) programs+=("${arg#--binary=}") ;;
    --test_binary=*=*) tests+=("${arg#--test_binary=}") ;;
    --file=*=*) extra_files+=("${arg#--file=}") ;;
    --data_dir=*) data_dir="${arg#*=}" ;;
    --no_data) no_data=1 ;;
    --data_examples=*)
      v="${arg#*=}"
      [[ "$v" =~ ^[0-9]+(,[0-9]+)?$ ]] || usage "bad --data_examples=$v"
      data_train="${v%%,*}"
      [[ "$v" == *,* ]] && data_test="${v#*,}" ;;
    --no_strip) strip=0 ;;
    --xz_level=*)
      xz_level="${arg#*=}"
      [[ "$xz_level" =~ ^[0-9]e?$ ]] || usage "bad --xz_level=$xz_level" ;;
    --max_tarball_mib=*)
      max_tarball_mib="${arg#*=}"
      [[ "$max_tarball_mib" =~ ^[0-9]+$ ]] || usage "bad --max_tarball_mib" ;;
    --with_cuda_libs) with_cuda=1 ;;
    --tarball=*) tarball="${arg#*=}" ;;
    --no_tarball) no_tarball=1 ;;
    --version=*) version="${arg#*=}" ;;
    --quiet) quiet=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) usage "unknown argument '$arg'" ;;
  esac
done
[[ -n "$out" ]] || usage "--out=DIR is required"
((${#programs[@]} > 0)) || usage "no --binary=REL=PATH given"
for cmd in ldd objdump strip tar xz gzip sha256sum python3; do
  command -v "$cmd" >/dev/null || die "needs '$cmd' on PATH"
done

# ---- Fresh output folder --------------------------------------------------
mkdir -p "$(dirname -- "$out")"
out="$(cd -- "$(dirname -- "$out")" && pwd)/$(basename -- "$out")"
if [[ -e "$out" ]]; then
  if [[ -f "$out/.downpour-bundle" ]] || [[ -d "$out" && -z "$(ls -A "$out")" ]]; then
    chmod -R u+w "$out"
    rm -rf -- "$out"
  else
    die "$out exists and is not a Downpour bundle; refusing to replace it"
  fi
fi
[[ "$no_tarball" == 1 ]] || tarball="${tarball:-$out.tar.xz}"
mkdir -p "$out/bin" "$out/libexec" "$out/lib/cxx"
touch "$out/.downpour-bundle"
manifest="$out/MANIFEST"
{
  echo "Downpour bundle"
  echo "version: ${version:-unknown}"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"))"
  echo "with_cuda_libs: $with_cuda"
  # cuDNN loaded on the host must be at least this version (same major).
  cudnn_h="${CUDA_HOME:-/usr/local/cuda}/include/cudnn_version.h"
  if [[ -f "$cudnn_h" ]]; then
    echo "cudnn_headers: $(awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{printf "%s%s", s, $3; s="."}' "$cudnn_h")"
  fi
} > "$manifest"

# ---- Binaries and the ldd closure ----------------------------------------
declare -A packed=()      # soname -> source path
declare -A host_cuda=()   # soname -> 1 (resolved on the host at run time)

# Copies the closure of binary $2 (named $1 in messages) into lib/ and sets
# _needs to the CUDA sonames it needs from the host (space-separated). Runs in
# this shell, not a subshell: it fills `packed` and `host_cuda`.
_needs=""
pack_closure() {
  local rel="$1" bin="$2" line soname rest path class needs=()
  local ldd_out ldd_re='^[[:space:]]*([^[:space:]]+)[[:space:]]+=>[[:space:]]+(.*)$'
  ldd_out="$(env -u LD_LIBRARY_PATH ldd "$bin" 2>&1)" ||
    die "ldd $bin failed: $ldd_out"
  while IFS= read -r line; do
    # "soname => /path (0x...)" or "soname => not found"; the loader and the
    # vDSO have no "=>" and are glibc/kernel anyway.
    [[ "$line" =~ $ldd_re ]] || continue
    soname="${BASH_REMATCH[1]}"
    rest="${BASH_REMATCH[2]}"
    if [[ "$rest" == "not found" ]]; then path=""; else path="${rest%% (0x*}"; fi
    class="$(dp_lib_class "$soname")"
    case "$class" in
      glibc|driver) continue ;;
      cuda)
        needs+=("$soname")
        host_cuda["$soname"]=1
        if [[ "$with_cuda" == 1 ]] && dp_lib_packable_cuda "$soname"; then
          [[ -n "$path" ]] ||
            die "$rel needs $soname, which is not found here (--with_cuda_libs)"
        else
          continue
        fi ;;
    esac
    [[ -n "$path" ]] ||
      die "$rel needs $soname, which ldd does not find on this machine"
    if [[ -z "${packed[$soname]:-}" ]]; then
      local dest="$out/lib/$soname"
      [[ "$class" == cxx ]] && dest="$out/lib/cxx/$soname"
      cp -L -- "$path" "$dest"
      chmod 644 "$dest"
      if [[ "$strip" == 1 ]]; then
        strip --strip-unneeded -- "$dest" || die "strip $dest failed"
      fi
      packed["$soname"]="$(readlink -f -- "$path")"
    fi
  done <<< "$ldd_out"
  _needs="${needs[*]+"${needs[*]}"}"
}

add_binary() {  # list-file REL=PATH
  local list="$1" spec="$2" rel bin
  rel="${spec%%=*}"
  bin="${spec#*=}"
  [[ -f "$bin" && -x "$bin" ]] || die "not an executable file: $bin (for $rel)"
  [[ "$rel" != /* && "$rel" != *..* ]] || usage "REL must be a relative path: $rel"
  mkdir -p "$out/libexec/$(dirname -- "$rel")"
  cp -L -- "$bin" "$out/libexec/$rel"
  chmod 755 "$out/libexec/$rel"
  if [[ "$strip" == 1 ]]; then
    strip --strip-all -- "$out/libexec/$rel" || die "strip $rel failed"
  fi
  pack_closure "$rel" "$bin"
  # cuBLAS/cuDNN are dlopened by the CUDA backend (worker/nn/cuda_libs.cc),
  # so ldd does not list them: find their sonames in the binary. The
  # wrappers then look for them on the host, as optional libraries.
  local so
  while read -r so; do
    [[ -n "$so" ]] || continue
    dlopens["$rel"]=1
    dlopen_wants["$so"]=1
    if [[ "$so" =~ ^libcublas\.so\.([0-9]+)$ ]]; then
      # cuBLAS loads cuBLASLt; NVRTC (cuDNN's runtime-compiled engines)
      # matches the CUDA major, which is cuBLAS's.
      dlopen_wants["libcublasLt.so.${BASH_REMATCH[1]}"]=1
      dlopen_wants["libnvrtc.so.${BASH_REMATCH[1]}"]=1
    fi
  done < <(grep -aoE 'lib(cublas|cudnn)\.so\.[0-9]+' "$bin" | sort -u)
  printf '%s\t%s\n' "$rel" "$_needs" >> "$out/libexec/$list"
}
declare -A dlopens=()       # rel -> 1 when the program may dlopen CUDA libs
declare -A dlopen_wants=()  # soname -> 1

: > "$out/libexec/programs.txt"
: > "$out/libexec/gpu_tests.txt"
for spec in "${programs[@]}"; do add_binary programs.txt "$spec"; done
for spec in "${tests[@]+"${tests[@]}"}"; do add_binary gpu_tests.txt "$spec"; done

# NVRTC is loaded by cuDNN at run time (runtime-compiled engines), so ldd does
# not show it; look for the one matching cudart's major version when present.
wants=""
for so in "${!host_cuda[@]}"; do
  if [[ "$so" =~ ^libcudart\.so\.([0-9]+)$ ]]; then
    wants="libnvrtc.so.${BASH_REMATCH[1]}"
  fi
done

# ---- Support files and wrappers -------------------------------------------
cp "$FILES/downpour_env.sh" "$FILES/libclass.sh" "$out/libexec/"
cp "$FILES/check_libs.sh" "$out/bin/check_libs"
cp "$FILES/run_gpu_checks.sh" "$out/run_gpu_checks.sh"
cp "$FILES/README.txt" "$out/README.txt"
chmod 755 "$out/bin/check_libs" "$out/run_gpu_checks.sh"
for so in "${!dlopen_wants[@]}"; do
  [[ " $wants " == *" $so "* ]] || wants="${wants:+$wants }$so"
done
printf '%s\n' "$wants" > "$out/libexec/cuda_wants.txt"
printf '%s\n' "${!dlopen_wants[@]}" | sed '/^$/d' | sort > "$out/libexec/cuda_dlopen.txt"

all_needs="$(cut -f2 "$out/libexec/programs.txt" | tr ' ' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ')"
all_needs="${all_needs% }"

write_wrapper() {  # REL NEEDS
  local rel="$1" needs="$2" name
  name="$(basename -- "$rel")"
  [[ -e "$out/bin/$name" ]] && die "two binaries named $name"
  # The children of launch and node (ps_server, ps_worker) inherit their
  # environment, so their wrappers resolve what all programs need.
  local wants_if="\$DOWNPOUR_NEEDS"
  [[ -n "${dlopens[$rel]:-}" ]] && wants_if=dlopen
  if [[ "$rel" == deploy/launch || "$rel" == deploy/node ]]; then
    needs="$all_needs"
    ((${#dlopens[@]} > 0)) && wants_if=dlopen
  fi
  local data_default=0
  if [[ "$no_data" == 0 && ( "$name" == launch || "$name" == ps_worker ||
                              "$name" == node ) ]]; then
    data_default=1
  fi
  cat > "$out/bin/$name" <<EOF
#!/usr/bin/env bash
# bin/$name: generated by deploy/make_bundle.sh. Runs libexec/$rel with the
# bundle's libraries first on LD_LIBRARY_PATH (see libexec/downpour_env.sh).
self="\$(readlink -f -- "\${BASH_SOURCE[0]}")"
DOWNPOUR_BUNDLE="\$(cd -- "\$(dirname -- "\$self")/.." && pwd -P)"
DOWNPOUR_BINARY=$name
DOWNPOUR_NEEDS="$needs"
DOWNPOUR_WANTS="\$( [[ -n "$wants_if" ]] && cat "\$DOWNPOUR_BUNDLE/libexec/cuda_wants.txt")"
source "\$DOWNPOUR_BUNDLE/libexec/downpour_env.sh" || exit 127
EOF
  if [[ "$data_default" == 1 ]]; then
    cat >> "$out/bin/$name" <<'EOF'
# Default --data_dir to the packed Fashion-MNIST unless one was given.
given=0
for a in "$@"; do
  case "$a" in --data_dir|--data_dir=*|-data_dir|-data_dir=*) given=1 ;; esac
done
if [[ "$given" == 0 && -d "$DOWNPOUR_BUNDLE/data/fashion-mnist" ]]; then
  set -- "--data_dir=$DOWNPOUR_BUNDLE/data/fashion-mnist" "$@"
fi
EOF
  fi
  echo "exec \"\$DOWNPOUR_BUNDLE/libexec/$rel\" \"\$@\"" >> "$out/bin/$name"
  chmod 755 "$out/bin/$name"
}
while IFS=$'\t' read -r rel needs; do
  write_wrapper "$rel" "$needs"
done < "$out/libexec/programs.txt"

for spec in "${extra_files[@]+"${extra_files[@]}"}"; do
  dest="${spec%%=*}"
  src="${spec#*=}"
  [[ -f "$src" ]] || die "no such file: $src (for $dest)"
  [[ "$dest" != /* && "$dest" != *..* ]] || usage "DEST must be a relative path: $dest"
  mkdir -p "$out/$(dirname -- "$dest")"
  cp -L -- "$src" "$out/$dest"
  if [[ -x "$src" || "$dest" == *.sh ]]; then chmod 755 "$out/$dest"; else chmod 644 "$out/$dest"; fi
done

# ---- Data ------------------------------------------------------------------
if [[ "$no_data" == 0 ]]; then
  mkdir -p "$out/data/fashion-mnist"
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte \
           t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    n="$data_train"
    [[ "$f" == t10k-* ]] && n="$data_test"
    if [[ -f "$data_dir/$f.gz" ]]; then
      src="$data_dir/$f.gz"
    elif [[ -f "$data_dir/$f" ]]; then
      src="$data_dir/$f"
    else
      die "no $f(.gz) in $data_dir (install dataset-fashion-mnist, pass --data_dir=DIR, or --no_data)"
    fi
    # The IDX header (magic, then one big-endian uint32 per dimension) with
    # the item count cut to n, then the first n items.
    python3 - "$src" "$out/data/fashion-mnist/$f" "$n" <<'PYEOF' ||
import gzip, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with (gzip.open if src.endswith(".gz") else open)(src, "rb") as f:
    data = f.read()
ndim = data[3]
dims = list(struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim]))
item = 1
for d in dims[1:]:
    item *= d
if n == 0 or n > dims[0]:
    n = dims[0]
dims[0] = n
body = 4 + 4 * ndim
with open(dst, "wb") as f:
    f.write(data[:4] + struct.pack(">%dI" % ndim, *dims))
    f.write(data[body:body + n * item])
print("%s: %d items" % (dst.rsplit("/", 1)[-1], n))
PYEOF
      die "cannot write $f from $src"
  done > "$out/data/fashion-mnist/README.txt"
  sed -i '1i Fashion-MNIST (uncompressed IDX), first items of each file:' \
    "$out/data/fashion-mnist/README.txt"
  chmod 644 "$out/data/fashion-mnist/"*
fi

# ---- Manifest ----------------------------------------------------------------
# Symbol versions the packed files need from outside (undefined symbols
# only): the glibc floor with and without lib/cxx, and what a host's
# libstdc++/libgcc_s must define to be used instead of lib/cxx.
und_versions() {  # PREFIX FILES...: highest PREFIX_x.y.z needed by FILES
  local prefix="$1"
  shift
  for f in "$@"; do objdump -T "$f" 2>/dev/null; done |
    awk '/\*UND\*/' | grep -oE "${prefix}_[0-9][0-9.]*" | sort -u -V | tail -n 1
}
mapfile -d '' core_files < <(find "$out/libexec" "$out/lib" -path "$out/lib/cxx" -prune -o \
  -type f ! -name '*.txt' ! -name '*.sh' -print0)
mapfile -d '' cxx_files < <(find "$out/lib/cxx" -type f -print0)
glibc_core="$(und_versions GLIBC "${core_files[@]}")"
glibc_cxx="$(und_versions GLIBC "${core_files[@]}" "${cxx_files[@]+"${cxx_files[@]}"}")"
{
  echo "glibc=${glibc_core#GLIBC_}"
  echo "glibc_with_bundled_cxx=${glibc_cxx#GLIBC_}"
  echo "libstdcxx_versions=$(und_versions GLIBCXX "${core_files[@]}") $(und_versions CXXABI "${core_files[@]}")"
  echo "libgcc_versions=$(und_versions GCC "${core_files[@]}")"
} > "$out/libexec/requirements.txt"
glibc_needed="${glibc_core#GLIBC_}"
{
  echo "host needs: x86-64 Linux with glibc >= ${glibc_needed:-?}, and either a libstdc++/libgcc_s"
  echo "  defining $(sed -n 's/^libstdcxx_versions=//p' "$out/libexec/requirements.txt") / $(sed -n 's/^libgcc_versions=//p' "$out/libexec/requirements.txt")"
  echo "  or glibc >= ${glibc_cxx#GLIBC_} for the packed ones in lib/cxx (chosen at run time)"
  if ((${#host_cuda[@]} > 0)); then
    echo "host needs (CUDA, resolved at run time unless packed): $(printf '%s\n' "${!host_cuda[@]}" | sort | tr '\n' ' ')"
    echo "  also the NVIDIA driver (libcuda.so.1) for the GPU; ${wants:-no} optional (cuDNN runtime-compiled engines)"
  fi
  echo
  echo "programs (libexec/REL, CUDA sonames from the host):"
  sed 's/^/  /' "$out/libexec/programs.txt"
  if [[ -s "$out/libexec/gpu_tests.txt" ]]; then
    echo "GPU tests:"
    sed 's/^/  /' "$out/libexec/gpu_tests.txt"
  fi
  echo
  echo "packed libraries (lib/SONAME <- source on the build machine):"
  for so in $(printf '%s\n' "${!packed[@]}" | sort); do
    printf '  %-52s <- %s\n' "$so" "${packed[$so]}"
  done
} >> "$manifest"

# ---- Check: every program resolves under the bundle's environment ---------
# Not-found libraries and leaks (a library that should be packed resolving
# from outside lib/) fail the bundle.
check_log="$out/ldd.txt"
if ! "$out/bin/check_libs" > "$check_log" 2>&1; then
  cat "$check_log" >&2
  die "library check failed (see above)"
fi
# Once more with the packed libstdc++/libgcc_s forced, the choice a host with
# an older libstdc++ gets.
if ! DOWNPOUR_BUNDLED_CXX=1 "$out/bin/check_libs" > "$out/ldd_bundled_cxx.txt" 2>&1; then
  cat "$out/ldd_bundled_cxx.txt" >&2
  die "library check with the packed libstdc++ (DOWNPOUR_BUNDLED_CXX=1) failed (see above)"
fi
if [[ "$quiet" == 1 ]]; then
  grep -E '^(check_libs|==|  )' "$check_log" || true
else
  cat "$check_log"
fi

(cd "$out" && find . -type f ! -name MANIFEST.sha256 -print0 | sort -z |
   xargs -0 sha256sum) > "$out/MANIFEST.sha256"

# ---- Tarball -------------------------------------------------------------------
if [[ -n "$tarball" ]]; then
  mkdir -p "$(dirname -- "$tarball")"
  tar -C "$(dirname -- "$out")" --sort=name --owner=0 --group=0 --numeric-owner \
      -cf - "$(basename -- "$out")" | xz -T0 "-$xz_level" -c > "$tarball.tmp" ||
    die "tar | xz failed"
  mv -f -- "$tarball.tmp" "$tarball"
fi

size_of() { du -sh -- "$1" | cut -f1; }
echo "make_bundle: $out: $(size_of "$out") (lib $(size_of "$out/lib"), libexec $(size_of "$out/libexec")$([[ -d "$out/data" ]] && echo ", data $(size_of "$out/data")"))"
if [[ -n "$tarball" ]]; then
  bytes="$(stat -c %s -- "$tarball")"
  echo "make_bundle: $tarball: $(size_of "$tarball") ($bytes bytes, xz -$xz_level)"
  if [[ -n "$max_tarball_mib" ]] && ((bytes > max_tarball_mib * 1024 * 1024)); then
    die "$tarball is $bytes bytes, over the limit of $max_tarball_mib MiB"
  fi
fi
