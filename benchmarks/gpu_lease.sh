#!/usr/bin/env bash
# One GPU lease of the runbook on a machine that reaches no network (the device tool's H100/H200): a paper-t5
# order-1 O-LoRA cell on T5-large's architecture with random weights (no package ships T5 weights) and a
# permuted-MNIST paper-lps LPS cell at 1/10 of Table I's epochs. Needs .gpu/ prepared by
# benchmarks/gpu_lease_prep.sh; writes logs and result.json files to $OUT (default runs/gpu-lease).
# Each part is capped (T5_S, LPS_S seconds) so that the whole fits one 10-minute call.
set -u
OUT=${OUT:-runs/gpu-lease}; T5_S=${T5_S:-200}; LPS_S=${LPS_S:-270}; LIMIT=${LIMIT:-256}
mkdir -p "$OUT"; export PYTHONUNBUFFERED=1 TQDM_MININTERVAL=20
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; lscpu | grep 'Model name'; } | tee "$OUT/env.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" | tee -a "$OUT/env.txt"
python3 benchmarks/random_t5.py .gpu/tok /tmp/t5-large-random --device cuda || exit 1
s=$SECONDS
timeout "$T5_S" python3 benchmarks/gpu_paper_t5.py --data-dir .gpu/CL --model-path /tmp/t5-large-random --methods olora \
  --limit "$LIMIT" --set stream.derive_missing=true --out /tmp/t5 > "$OUT/t5.log" 2>&1
echo "t5 part: exit $? after $((SECONDS - s)) s" | tee -a "$OUT/env.txt"
s=$SECONDS
timeout "$LPS_S" clbench run --profile paper-lps --stream permuted-mnist --methods lps --seeds 0 --data-dir .gpu/mnist \
  --set lps.warmup_epochs=3 --set lps.admm_epochs=9 --set lps.retrain_epochs=3 --out /tmp/lps > "$OUT/lps.log" 2>&1
echo "lps part: exit $? after $((SECONDS - s)) s" | tee -a "$OUT/env.txt"
for f in /tmp/t5/standard/olora/order-1/seed-0 /tmp/lps/permuted-mnist/lps/order-1/seed-0; do
  n=$(echo "$f" | cut -d/ -f3); cp "$f/result.json" "$OUT/$n-result.json" 2>/dev/null || ls -la "$f" >> "$OUT/env.txt" 2>&1
done
tail -c 3000 "$OUT/t5.log"; tail -c 2000 "$OUT/lps.log"; cat "$OUT/env.txt"
