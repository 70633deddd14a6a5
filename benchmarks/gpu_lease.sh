#!/usr/bin/env bash
# One GPU lease of the runbook on a machine that reaches no network (the device tool's H100/H200), as committed in
# results/gpu-lease: paper-t5 order-1 cells on T5-large's architecture with random weights (no package ships T5
# weights), permuted-MNIST paper-lps cells at 1/10 of Table I's epochs, and bf16 full fine-tuning cells with
# paper-expander's settings on Llama-3-8B's shapes with 2 of its 32 layers (random weights). Needs .gpu/ from
# benchmarks/gpu_lease_prep.sh; writes logs and result folders (no footprints) to $OUT (default runs/gpu-lease).
#   PARTS="t5 lps" (first lease, first call), "t5long packnet" (its second call), "bf16-seqft bf16-expander-ewc
#   bf16-ewc" (second lease; give them CAP=300), "awom" (AWOM's float64 route on the GPU against LAPACK on the host,
#   benchmarks/bench_awom_dense.py); "step" (benchmarks/gpu_step_cost.py: the paper-lps seqft step against bare
#   loops), "quick-gpu" (the quick default's digits streams as a GPU box runs them, cells finished within QCAP),
#   "quick-cpu" (the same cells on the box's CPU cores, -j 16), "table2" (paper-lps on permuted MNIST at the paper's
#   epochs, METHODS of it, after "step" whose seqft cell it reuses), "step-old" ("step" with the step as it was
#   before train.fused, train.sync_every and train.device_data), "step-capture" ("step" with train.capture: the step
#   recorded as a CUDA graph), "gputests" (tests/test_gpu_speed.py's and tests/test_capture.py's CUDA tests),
#   "cifar" (benchmarks/bench_seq_cifar.py: a stand-in Seq-CIFAR-10 epoch of ER and DER++, ResNet-18, against a bare
#   loop); each part is capped at CAP seconds.
set -u
OUT=${OUT:-runs/gpu-lease}; PARTS=${PARTS:-t5 lps}; CAP=${CAP:-240}; RUNS=/tmp/gpu-lease
mkdir -p "$OUT" "$RUNS"; export PYTHONUNBUFFERED=1 TQDM_MININTERVAL=20
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; lscpu | grep 'Model name'; } | tee -a "$OUT/env.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .gpu/whl/*.whl && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" | tee -a "$OUT/env.txt"
[ -d /tmp/t5-large-random ] || [[ "$PARTS" != *t5* ]] || python3 benchmarks/random_model.py .gpu/tok /tmp/t5-large-random --device cuda || exit 1
[ -d /tmp/llama-random ] || [[ "$PARTS" != *bf16* ]] ||
  python3 benchmarks/random_model.py .gpu/tok /tmp/llama-random --arch llama --device cuda || exit 1
# paper-expander's training settings (plugins/capability_chain/plugin.py) on the prompts stream's two tasks
BF16="clbench run --stream prompts --data-dir .gpu/prompts --seeds 0 --model-path /tmp/llama-random
  --set model.dtype=bfloat16 --set model.train_base=true --set model.gradient_checkpointing=true
  --set model.max_length=1024 --set train.batch_size=8 --set train.optimizer=rmsprop --set train.lr=1e-6
  --set train.threads=8 --set metrics.device=cuda --device-memory off --out $RUNS/bf16"  # expander-ewc: its default density, 10 % (§6)
T5="python3 benchmarks/gpu_paper_t5.py --model-path /tmp/t5-large-random"
DIGITS=permuted-digits,permuted-digits-til,split-digits
# the training step as it was before fused optimizers, batched loss reads and device-resident splits (step-old)
OLD_PATH="--set train.fused=false --set train.sync_every=1 --set train.device_data=0"
LPS="clbench run --profile paper-lps --stream permuted-mnist --seeds 0 --data-dir .gpu/mnist --out $RUNS/mnist"
for part in $PARTS; do
  s=$SECONDS
  case $part in
    t5) timeout "$CAP" $T5 --data-dir .gpu/CL --methods olora --limit 256 --set stream.derive_missing=true --out $RUNS/t5-real ;;
    t5long) timeout "$CAP" $T5 --data-dir .gpu/CLlong --methods olora,nlora --limit 64 --out $RUNS/t5-long ;;
    lps) timeout "$CAP" $LPS --methods lps --set lps.warmup_epochs=3 --set lps.admm_epochs=9 --set lps.retrain_epochs=3 ;;
    packnet) timeout "$CAP" $LPS --methods packnet --set packnet.train_epochs=3 --set packnet.retrain_epochs=3 ;;
    step) timeout "$CAP" python3 benchmarks/gpu_step_cost.py --data-dir .gpu/mnist --runs $RUNS/mnist-full \
            --out $RUNS/step_cost.json ;;  # in results.tgz: $OUT brings back 8 files at most
    step-old) timeout "$CAP" python3 benchmarks/gpu_step_cost.py --data-dir .gpu/mnist --runs $RUNS/mnist-old \
                --out $RUNS/step_cost_old.json --clbench-args "$OLD_PATH" ;;
    step-capture) timeout "$CAP" python3 benchmarks/gpu_step_cost.py --data-dir .gpu/mnist --runs $RUNS/mnist-capture \
                    --out $RUNS/step_cost_capture.json --clbench-args "--set train.capture=true" ;;
    gputests) timeout "$CAP" python3 -m pytest -q -p no:cacheprovider tests/test_gpu_speed.py tests/test_capture.py ;;
    quick-gpu) timeout "${QCAP:-$CAP}" clbench run --methods all --stream $DIGITS --out $RUNS/quick-gpu --no-progress
               echo "quick-gpu: $(grep -l '"complete"' -r $RUNS/quick-gpu --include=result.json | wc -l) cells complete" ;;
    quick-cpu) timeout "$CAP" clbench run --methods all --stream $DIGITS --set train.device=cpu -j 16 \
               --out $RUNS/quick-cpu --no-progress ;;
    table2) timeout "$CAP" $LPS --methods "${METHODS:-ewc,lwf}" --out $RUNS/mnist-full --no-progress ;;
    awom) timeout "$CAP" python3 benchmarks/bench_awom_dense.py --device cuda ;;  # metrics.device=cuda's speed
    cifar) timeout "$CAP" python3 benchmarks/bench_seq_cifar.py --device cuda --per-class 5000 --width 64 --reps 3 ;;
    bf16-*) timeout "$CAP" $BF16 --methods "${part#bf16-}"; find $RUNS/bf16 -name '*.safetensors' -delete ;;
  esac > "$OUT/$part.log" 2>&1
  echo "$part: exit $? after $((SECONDS - s)) s" | tee -a "$OUT/env.txt"
  # after every part, not once at the end: a call cut off by the device's limit still returns the parts it finished
  (cd $RUNS && tar czf "$OUT/results.tgz" --exclude='*.safetensors' --exclude='*.pt' --exclude=.clbench.lock .)
done
for part in $PARTS; do tail -c 1500 "$OUT/$part.log"; done
