#!/usr/bin/env bash
# The checks that need a GPU, in one run (under 8 minutes on one GPU): every test marked `gpu`
# (a 1-rank NCCL job on cuda:0 end to end; an out-of-memory on CUDA with its allocations'
# history). Run from the repository root, with the project's venv made (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
timeout 480 .venv/bin/python -m pytest -q -m gpu -rA tests/test_gpu_job.py tests/test_oom.py
