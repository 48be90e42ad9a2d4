#!/usr/bin/env bash
# Trains on a fresh machine with one command: installs what is missing
# (deploy/setup.sh), builds, and launches a local Downpour cluster on
# Fashion-MNIST. Any flag of //deploy:launch may be added, e.g.
#   bash deploy/train.sh --servers=2 --workers=2 --epochs=3 --save_params=model.safetensors
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
bazel build //deploy:launch //server:ps_server //worker:ps_worker
exec bazel-bin/deploy/launch "$@"
