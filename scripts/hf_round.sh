#!/usr/bin/env bash
# Hugging Face peer round (streamlab against transformers' DeepseekV4ForCausalLM, logits and
# speed, in one device call): experiments/peer/hf_round.py does it; `--help` there lists the
# stages, the knobs (flags or environment: BIN, OUT, CONFIG, BACKEND, DEVICE, T, STEPS, ...) and
# the exit codes. This wrapper keeps the old entry point (scripts/gpu_round.sh stage hf): it runs
# from the repo root, so relative BIN / OUT mean what they did, with PY (default python3), which
# also runs the HF stages.
cd "$(dirname "$0")/.." || exit 2
exec "${PY:-python3}" experiments/peer/hf_round.py "$@"
