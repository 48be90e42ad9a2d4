# File: deploy/bundle_files/libclass.sh
#
# Which shared libraries a Downpour bundle packs and which it leaves to the
# host. Sourced (bash) by deploy/make_bundle.sh when it packs the ldd closure,
# and by the bundle's bin/check_libs on the target host; copied into the
# bundle as libexec/libclass.sh. One function, no side effects:
#
#   dp_lib_class SONAME   prints one word:
#     glibc   the C library family and the dynamic loader: every Linux host
#             has them, and a copy must never shadow the host's (libc and
#             ld-linux must match each other).
#     driver  the NVIDIA driver's user-space libraries (libcuda, libnvidia-*):
#             they must match the host's kernel module, so they come from the
#             host.
#     cuda    CUDA runtime libraries (cudart, cuBLAS/cuBLASLt, cuDNN, NVRTC,
#             ...): resolved on the host at run time by downpour_env.sh; cuDNN
#             with its engines is ~1 GB and cuBLASLt alone ~540 MB, far too big
#             for a bundle of tens of MiB. `make_bundle.sh --with_cuda_libs`
#             packs cudart, cuBLAS and cuBLASLt anyway.
#     cxx     libstdc++ and libgcc_s: packed into lib/cxx/ and used only when
#             the host's copies lack a symbol version the bundle needs
#             (downpour_env.sh decides at run time). Debian 12's libstdc++
#             (gcc 12) itself needs glibc >= 2.36 (arc4random), which would
#             lock out Ubuntu 22.04 (2.35) and RHEL 9 (2.34), whose own
#             libstdc++ is new enough for our binaries.
#     bundle  everything else (gRPC, protobuf, abseil, OpenBLAS, zlib, OpenSSL,
#             libgfortran, ...): packed into lib/. The GPU host has no
#             gRPC/protobuf/abseil at all.
#
# Also: dp_lib_packable_cuda SONAME  succeeds for the CUDA libraries that
# --with_cuda_libs packs (cudart, cuBLAS, cuBLASLt).

dp_lib_class() {
  case "$1" in
    ld-linux*.so* | ld64.so* | linux-vdso.so* | linux-gate.so* | \
    libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | libdl.so.* | \
    librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | \
    libnsl.so.1 | libnss_*.so* | libBrokenLocale.so.* | libthread_db.so.* | \
    libc_malloc_debug.so.*)
      echo glibc ;;
    libcuda.so* | libnvidia-*.so* | libcudadebugger.so* | libnvcuvid.so* | \
    libnvoptix.so*)
      echo driver ;;
    libcudart.so* | libcublas.so* | libcublasLt.so* | libcudnn*.so* | \
    libnvrtc*.so* | libnvJitLink.so* | libcufft*.so* | libcurand.so* | \
    libcusparse.so* | libcusolver*.so* | libnccl.so* | libnvToolsExt.so* | \
    libcupti.so* | libnvblas.so*)
      echo cuda ;;
    libstdc++.so.* | libgcc_s.so.*)
      echo cxx ;;
    *)
      echo bundle ;;
  esac
}

dp_lib_packable_cuda() {
  case "$1" in
    libcudart.so* | libcublas.so* | libcublasLt.so*) return 0 ;;
    *) return 1 ;;
  esac
}
