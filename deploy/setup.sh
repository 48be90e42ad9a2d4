#!/usr/bin/env bash
# Installs every Debian package Downpour needs to build, test and train, on a
# fresh Debian 12 machine with no internet beyond the Debian mirror.
# Idempotent: packages already present are left alone, and apt is not touched
# at all when nothing is missing.
set -euo pipefail

PACKAGES=(
  # Build: Bazel 4.2.3 and its offline stand-in rule repositories.
  bazel-bootstrap bazel-bootstrap-source g++
  # RPC and serialization.
  libgrpc++-dev protobuf-compiler-grpc protobuf-compiler libprotobuf-dev
  # abseil (flags, status, synchronization), GoogleTest/GoogleMock.
  libabsl-dev libgtest-dev libgmock-dev
  # CPU maths (GEMM) and gzip (zlib's stream, libdeflate's whole-buffer
  # inflate).
  libopenblas-dev zlib1g-dev libdeflate-dev
  # JSON (header-only): summaries, report lines, safetensors headers.
  nlohmann-json3-dev
  # The ASan+UBSan build (--config=asan), which also runs clang's lock
  # analysis (-Wthread-safety), and --config=thread_safety.
  clang-14
  # libFuzzer targets (--config=fuzz).
  libfuzzer-14-dev
  # Certificates (make_certs.sh), the Prometheus
  # client library and a real Prometheus server for the metrics test.
  openssl prometheus-cpp-dev libcivetweb-dev prometheus
  # oneDNN, the default CPU backend.
  libdnnl-dev
  # JPEG and PNG decoding (--dataset=image_folder).
  libjpeg62-turbo-dev libpng-dev
  # The default training data: Fashion-MNIST under /usr/share/datasets/.
  dataset-fashion-mnist
  # Emulated hosts (ip netns, tc tbf) for tests/netns/.
  # (slurm-wlm and munge for tests/slurm/ are installed by
  # deploy/slurm/local_slurm.sh, which keeps their services from starting.)
  iproute2
  # Debian's own Python at /usr/bin/python3: the tests' small helper scripts
  # (Prometheus API queries, TF_CONFIG of the Kubernetes manifests).
  python3
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
