#!/usr/bin/env bash
# The deep-training check for an accelerator machine, in one short run (about 7 minutes):
# images/s of the ceiling, the loop and stacked backends in float32, bf16 and bf16 + compile,
# for 16 agents and 3 runs x 16 agents, the non-gradient share and the projected hours of
# Figures 3 + 4. Writes bench_training.json and bench_training.md to $OUT (default
# results/device). On a CPU, `bash benchmarks/device_check.sh --device cpu --tiny` checks it.
set -euo pipefail
out="${OUT:-results/device}"
device="cuda"
if [[ "${1:-}" == "--device" ]]; then device="$2"; shift 2; fi
if [[ "$device" == cuda* ]]; then
  python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA GPU here')"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
fi
PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" python benchmarks/bench_training.py \
  --device "$device" --budget 360 --out "$out" "$@"
