#!/usr/bin/env bash
# The deep-training check for an accelerator machine, in one run of under 6 minutes: the
# single-model ceiling; the loop, vmap and grouped backends in float32, bf16 and bf16 +
# compile, for 16 agents and for 3 runs x 16 agents; the non-gradient share of a step and
# the fused EDM step against its memory bound (every mixer); two epochs of `reproduce fig3`
# end to end on random images in CIFAR-10's format (one run, three runs batched) and the
# projected hours of Figures 3 + 4 from them. Writes bench_training.json and
# bench_training.md to $OUT (default results/device).
# On a CPU, `bash benchmarks/device_check.sh --device cpu --tiny` runs the same steps small.
set -euo pipefail
out="${OUT:-results/device}"
device="cuda"
if [[ "${1:-}" == "--device" ]]; then device="$2"; shift 2; fi
if [[ "$device" == cuda* ]]; then
  python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU here')"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
fi
PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" python benchmarks/bench_training.py \
  --device "$device" --budget 300 --out "$out" "$@"
