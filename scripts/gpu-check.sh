#!/usr/bin/env bash
# One prepared check for a lent GPU machine (`make gpu-check`): a host with its own CUDA torch but no
# conda channel and no tools venv, only a python with torch. Runs this checkout's bootstrap there:
#
#   doctor --save-facts; verify's torch checks against that torch (verify --no-bench, outside any
#   bootstrap env); bench --budget 60 on the built-in workload and on the image-folder dataset of
#   docs/benchmark.md ("Tune your own Dataset in 3 steps", generated here); monitor --count 5 and
#   monitor --once; a 1-GPU torchrun all-reduce (verify --distributed: NCCL on a GPU, gloo without one);
#   on a machine with two GPUs or more, a short bench --device cuda:1 (the device a run measures);
#   bench --effective-batch 256 --budget 60, the training tuner on the built-in workload (ResNet-50 on
#   synthetic images where torchvision is installed; bf16 on GPUs with it in hardware, Hopper, Blackwell).
#
# Every output (stdout, stderr, json, csv, png) goes into one folder, $OUT if set, else
# ./gpu-check-<date>, with summary.txt: one line per step, its exit status, wall time and verdict.
# Each step has its own timeout and the whole stays within GPU_CHECK_TOTAL_S (330 s): a lent machine's
# time, its start included, leaves room to run it twice. A step that cannot run here (no GPU, a missing
# module) is reported as such and the rest go on.
#
# Environment (defaults for a GPU machine; the slow test shrinks them to run on a laptop):
#   PYTHON                      the interpreter with torch (default: python3)
#   OUT                         the output folder
#   GPU_CHECK_TOTAL_S           the whole script's limit (330)
#   GPU_CHECK_BENCH_BUDGET      bench --budget of each bench run (60)
#   GPU_CHECK_CUDA1_BUDGET      bench --budget of the cuda:1 run, with two GPUs or more (30)
#   GPU_CHECK_BENCH_ARGS        more bench arguments for both runs (e.g. "--samples 64")
#   GPU_CHECK_MONITOR_COUNT     monitor --count (5)
#   GPU_CHECK_IMAGES            images per class in the generated dataset (128)
#   GPU_CHECK_BATCH_SIZE        the dataset run's --batch-size (64)
#   GPU_CHECK_TRAINING_BUDGET   bench --budget of the training tuner's run (60)
#   GPU_CHECK_EFFECTIVE_BATCH   its --effective-batch (256)
#
# Exit status: 0 when every step that ran passed, 1 when one failed or timed out; summary.txt either way.

set -u

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
OUT=${OUT:-./gpu-check-$(date -u +%Y%m%d-%H%M%S)}
TOTAL_S=${GPU_CHECK_TOTAL_S:-330}
BUDGET=${GPU_CHECK_BENCH_BUDGET:-60}
CUDA1_BUDGET=${GPU_CHECK_CUDA1_BUDGET:-30}
BENCH_EXTRA=${GPU_CHECK_BENCH_ARGS:-}
MONITOR_COUNT=${GPU_CHECK_MONITOR_COUNT:-5}
IMAGES=${GPU_CHECK_IMAGES:-128}
BATCH=${GPU_CHECK_BATCH_SIZE:-64}
TRAINING_BUDGET=${GPU_CHECK_TRAINING_BUDGET:-60}
EFFECTIVE=${GPU_CHECK_EFFECTIVE_BATCH:-256}

mkdir -p "$OUT" || { echo "gpu-check: cannot create $OUT" >&2; exit 2; }
OUT=$(cd "$OUT" && pwd)
SUMMARY="$OUT/summary.txt"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# This checkout's bootstrap, whatever the interpreter has installed; nothing is installed anywhere.
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
STARTED=$(date +%s)
FAILED=0

now_ms() { "$PY" -c 'import time; print(int(time.time() * 1000))' 2>/dev/null || echo $(( $(date +%s) * 1000 )); }

printf '%-16s %5s %9s  %-8s %s\n' "step" "exit" "seconds" "verdict" "note" > "$SUMMARY"

record() {  # NAME RC SECONDS VERDICT NOTE
    printf '%-16s %5s %9s  %-8s %s\n' "$1" "$2" "$3" "$4" "$5" >> "$SUMMARY"
    echo "gpu-check: $1: $4 (exit $2, $3 s)${5:+: $5}" >&2
    case "$4" in failed|timeout) FAILED=1 ;; esac
}

# run_step NAME LIMIT_S COMMAND...: stdout and stderr to NAME.stdout / NAME.stderr, at most LIMIT_S (less
# when the whole script's limit is nearer), then one summary line. Sets STEP_RC.
run_step() {
    local name=$1 limit=$2; shift 2
    local left=$(( TOTAL_S - ($(date +%s) - STARTED) ))
    if (( left < 5 )); then
        STEP_RC=""; record "$name" "-" "0.0" "skipped" "the script's ${TOTAL_S} s are spent"; return
    fi
    (( limit > left )) && limit=$left
    local t0; t0=$(now_ms)
    timeout -k 10 "$limit" "$@" > "$OUT/$name.stdout" 2> "$OUT/$name.stderr"
    STEP_RC=$?
    local seconds; seconds=$(awk -v a="$t0" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }')
    STEP_SECONDS=$seconds
    if (( STEP_RC == 124 || STEP_RC == 137 )); then
        record "$name" "$STEP_RC" "$seconds" "timeout" "over its ${limit} s; see $name.stderr"
        STEP_RC=""
    fi
}

# verdict NAME NOTE: the summary line of a step run_step ran to its end, from its exit status.
verdict() {
    [[ -z "$STEP_RC" ]] && return
    if (( STEP_RC == 0 )); then record "$1" 0 "$STEP_SECONDS" "ok" "$2"
    else record "$1" "$STEP_RC" "$STEP_SECONDS" "failed" "${2:+$2; }last stderr line: $(tail -n 1 "$OUT/$1.stderr" | cut -c1-160)"
    fi
}

# judged NAME READING_RC NOTE: the summary line of a step whose verdict is a reading of its report
# (READING_RC 0: passed) rather than its exit status; the exit column keeps the command's own.
judged() {
    [[ -z "$STEP_RC" ]] && return
    if (( $2 == 0 )); then record "$1" "$STEP_RC" "$STEP_SECONDS" "ok" "$3"
    else record "$1" "$STEP_RC" "$STEP_SECONDS" "failed" "$3"
    fi
}

# --- what this interpreter has: bootstrap needs PyYAML at import for doctor/verify/bench (specs, locks,
# configs) and nvidia-ml-py for NVML (doctor, monitor, bench's sampler); the dataset needs numpy and Pillow.
run_step preflight 30 "$PY" - <<'EOF'
import importlib, platform, sys
print(f"python {platform.python_version()} at {sys.executable}")
for module, why in (("torch", "every step"), ("yaml", "PyYAML: doctor, verify, bench read YAML"),
                    ("pynvml", "nvidia-ml-py: NVML for doctor, monitor, bench's sampler"),
                    ("numpy", "the generated dataset"), ("PIL", "Pillow: the dataset and bench.png"),
                    ("torchvision", "bench's ResNet-50 on a GPU (else a small CNN)")):
    try:
        found = importlib.import_module(module)
        print(f"{module:12} {getattr(found, '__version__', 'present'):24} needed by {why}")
    except Exception as exc:  # any import failure is what this line is for
        print(f"{module:12} MISSING ({type(exc).__name__}: {str(exc)[:80]}); needed by {why}")
try:
    import torch
    print(f"torch cuda {torch.version.cuda} available={torch.cuda.is_available()} "
          f"devices={torch.cuda.device_count()} nccl={torch.cuda.nccl.version() if torch.cuda.is_available() else None}")
except Exception as exc:
    print(f"torch: {type(exc).__name__}: {exc}")
EOF
MISSING=$(grep -o '^[A-Za-z_]* *MISSING' "$OUT/preflight.stdout" 2>/dev/null | awk '{print $1}' | paste -sd ' ' -)
verdict preflight "${MISSING:+missing: $MISSING}"
has() { ! grep -q "^$1 *MISSING" "$OUT/preflight.stdout" 2>/dev/null; }
CUDA=$(grep -q 'available=True' "$OUT/preflight.stdout" 2>/dev/null && echo yes || echo no)
GPUS=$(grep -o 'available=True devices=[0-9]*' "$OUT/preflight.stdout" 2>/dev/null | grep -o '[0-9]*$' || echo 0)

if ! has torch; then
    for step in doctor verify monitor monitor-once allreduce bench-cuda1 bench-builtin bench-dataset bench-training; do
        record "$step" "-" "0.0" "skipped" "$PY cannot import torch"
    done
    echo "gpu-check: summary in $SUMMARY" >&2
    exit 1
fi

# The short steps first, the three bench runs last: a slow bench must not crowd out the all-reduce.

# --- doctor: the host, driver and torch facts, saved for `doctor --facts` elsewhere.
run_step doctor 30 "$PY" -m bootstrap doctor --root "$REPO" --save-facts "$OUT/facts.json"
verdict doctor "facts.json$(has yaml || echo '; PyYAML missing')"

# --- verify's torch checks against this interpreter's torch. It is no env bootstrap made, so env.prefix
# fails by design (bootstrap never takes over a directory it did not make); the verdict is the rest.
run_step verify 60 "$PY" -m bootstrap verify --no-bench --json --root "$REPO" \
    --prefix "$("$PY" -c 'import sys; print(sys.prefix)')"
if [[ -n "$STEP_RC" ]]; then
    cp "$OUT/verify.stdout" "$OUT/verify.json" 2>/dev/null
    NOTE=$("$PY" - "$OUT/verify.json" <<'EOF'
import collections, json, sys
try:
    checks = json.load(open(sys.argv[1]))["checks"]
except Exception as exc:
    print(f"no JSON report ({type(exc).__name__})"); sys.exit(1)
counts = collections.Counter(c["status"] for c in checks if not c["id"].startswith("env."))
failed = [c["id"] for c in checks if c["status"] == "fail" and not c["id"].startswith("env.")]
print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + " (env.* left out: not a bootstrap env)"
      + (f"; failed: {' '.join(failed)}" if failed else ""))
sys.exit(1 if failed else 0)
EOF
    )
    judged verify $? "$NOTE"
fi

# --- monitor: NVML samples, as a table and a CSV.
run_step monitor $(( MONITOR_COUNT * 2 + 15 )) "$PY" -m bootstrap monitor --count "$MONITOR_COUNT" \
    --csv "$OUT/monitor.csv"
if [[ $CUDA == no && -n "$STEP_RC" && "$STEP_RC" != 0 ]]; then
    record monitor "$STEP_RC" "$STEP_SECONDS" "skipped" "no CUDA GPU here: $(tail -n 1 "$OUT/monitor.stderr" | cut -c1-120)"
else
    verdict monitor "monitor.csv"
fi

# --- monitor --once: one table, as nvidia-smi prints it (exit 0 without a driver too).
run_step monitor-once 20 "$PY" -m bootstrap monitor --once
if [[ $CUDA == no && -n "$STEP_RC" ]]; then
    record monitor-once "$STEP_RC" "$STEP_SECONDS" "skipped" "no CUDA GPU here: $(tail -n 1 "$OUT/monitor-once.stdout" | cut -c1-120)"
else
    verdict monitor-once "monitor-once.stdout"
fi

# --- a 1-GPU torchrun all-reduce: verify --distributed times it (NCCL on a GPU, gloo without one).
if "$PY" -c 'import torch.distributed.run' 2>/dev/null; then
    run_step allreduce 90 "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 \
        -m bootstrap verify --distributed --no-bench --json --root "$REPO" \
        --prefix "$("$PY" -c 'import sys; print(sys.prefix)')"
    if [[ -n "$STEP_RC" ]]; then
        NOTE=$("$PY" - "$OUT/allreduce.stdout" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
try:
    checks = json.loads(text[text.index("{"):])["checks"]
    found = next(c for c in checks if c["id"] == "dist.all_reduce")
except Exception as exc:
    print(f"no dist.all_reduce check in the report ({type(exc).__name__})"); sys.exit(1)
print(f"dist.all_reduce {found['status']}: {found['observed']}")
sys.exit(0 if found["status"] in ("ok", "warn") else 1)
EOF
        )
        judged allreduce $? "$NOTE$( [[ $CUDA == no ]] && echo ' (gloo: no CUDA GPU here)')"
    fi
else
    record allreduce "-" "0.0" "skipped" "torch.distributed.run is not importable"
fi

# --- bench --device cuda:1: the run measures the device it was given, not the current one (cuda:0).
if (( GPUS >= 2 )); then
    # shellcheck disable=SC2086
    run_step bench-cuda1 $(( CUDA1_BUDGET + 45 )) "$PY" -m bootstrap bench --device cuda:1 --budget "$CUDA1_BUDGET" \
        --json --no-png --out "$OUT/bench-cuda1" $BENCH_EXTRA
    if [[ -n "$STEP_RC" ]]; then
        NOTE=$("$PY" - "$OUT/bench-cuda1/bench.json" <<'EOF'
import json, sys
try:
    extra = json.load(open(sys.argv[1]))["extra"]
except Exception as exc:
    print(f"no JSON report ({type(exc).__name__})"); sys.exit(1)
device, metrics, sampler = extra["device"], extra["metrics"], extra["sampler"]
gpu = (sampler.get("gpu_utilization_pct") or {}).get("source") or sampler.get("reason") or "no GPU series"
figure = lambda value: "-" if value is None else f"{value:.1f}"
print(f"ran on cuda:{device.get('index')} ({device.get('name')}); matmul {figure(metrics.get('matmul_tflops'))} "
      f"TFLOP/s, H2D pinned {figure(metrics.get('h2d_pinned_gb_per_s'))} GB/s; GPU series: {gpu}")
sys.exit(0 if device.get("index") == 1 else 1)
EOF
        )
        judged bench-cuda1 $? "$NOTE"
    fi
else
    record bench-cuda1 "-" "0.0" "skipped" "needs two CUDA GPUs or more (${GPUS:-0} here)"
fi

# --- bench on the built-in workload.
# shellcheck disable=SC2086  # GPU_CHECK_BENCH_ARGS is a list of words
run_step bench-builtin $(( BUDGET + 45 )) "$PY" -m bootstrap bench --budget "$BUDGET" --json \
    --out "$OUT/bench-builtin" $BENCH_EXTRA
verdict bench-builtin "bench-builtin/bench.json, bench.png"

# --- bench on the worked example of docs/benchmark.md: an image folder decoded with Pillow.
if has numpy && has PIL; then
    mkdir -p "$WORK/data"
    cat > "$WORK/my_data.py" <<'EOF'
import os

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "train")


class ImageFolder(Dataset):
    def __init__(self, root=ROOT):  # root/CLASS/NAME.png
        classes = sorted(os.listdir(root))
        self.items = [(os.path.join(root, c, f), label) for label, c in enumerate(classes)
                      for f in sorted(os.listdir(os.path.join(root, c)))]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        path, label = self.items[index]
        pixels = np.array(Image.open(path).convert("RGB"), dtype=np.uint8)
        return torch.from_numpy(pixels).permute(2, 0, 1).contiguous(), label


def make():
    return ImageFolder()
EOF
    cp "$WORK/my_data.py" "$OUT/my_data.py"
    run_step dataset 60 "$PY" - "$WORK/data/train" "$IMAGES" <<'EOF'
import os, sys
import numpy as np
from PIL import Image
root, per_class = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
for name in ("cat", "dog"):
    os.makedirs(os.path.join(root, name), exist_ok=True)
    for index in range(per_class):
        Image.fromarray(rng.integers(0, 256, (96, 96, 3), dtype=np.uint8)).save(os.path.join(root, name, f"{index:04d}.png"))
print(f"{2 * per_class} PNGs of 96x96 in {root}")
EOF
    verdict dataset "$(( 2 * IMAGES )) PNGs (96x96, 2 classes), my_data.py beside"
    # shellcheck disable=SC2086
    run_step bench-dataset $(( BUDGET + 45 )) "$PY" -m bootstrap bench --budget "$BUDGET" --json \
        --path "$WORK" --dataset my_data:make --batch-size "$BATCH" --out "$OUT/bench-dataset"
    verdict bench-dataset "bench-dataset/bench.json, bench.png; --dataset my_data:make --batch-size $BATCH"
else
    record bench-dataset "-" "0.0" "skipped" "the example dataset needs numpy and Pillow (missing: $MISSING)"
fi

# --- bench --effective-batch: the training tuner (micro-batch x accumulation, precision, memory format,
# DataLoader) on the built-in workload: ResNet-50 on synthetic images on a GPU with torchvision, else the
# small CNN. The report is bench-training.stdout; training.json and training.png go to bench-training/.
# shellcheck disable=SC2086
run_step bench-training $(( TRAINING_BUDGET + 60 )) "$PY" -m bootstrap bench --effective-batch "$EFFECTIVE" \
    --budget "$TRAINING_BUDGET" --out "$OUT/bench-training" $BENCH_EXTRA
if [[ -n "$STEP_RC" ]]; then
    NOTE=$("$PY" - "$OUT/bench-training/training.json" <<'EOF'
import json, sys
try:
    advice = json.load(open(sys.argv[1]))
except Exception as exc:
    print(f"no training.json ({type(exc).__name__})"); sys.exit(0)
chosen = (advice["micro_batch"], advice["precision"], advice["channels_last"])
rate = next((r["samples_per_s"] for r in advice["grid"]
             if (r["micro"], r["precision"], r["channels_last"]) == chosen and r["samples_per_s"]), None)
gains = advice["gains"]
said = lambda value: "-" if value is None else f"{value:.2f}x"
print(f"{advice['device']}: {chosen[0]} x {advice['accumulation_steps']} {chosen[1]}"
      f"{' channels_last' if chosen[2] else ''}, {'-' if rate is None else f'{rate:,.0f}'} samples/s, "
      f"{said(gains.get('over_current'))} fp32 at the largest micro-batch, "
      f"loop {said(gains.get('over_fixed_advice'))} the fixed advice; "
      + ", ".join(f"{n} {s}" for s, n in advice["summary"].items() if n))
EOF
    )
    verdict bench-training "bench-training/training.json, training.png; $NOTE"
fi

printf 'total %s s of %s s; every file of this check is in %s\n' "$(( $(date +%s) - STARTED ))" "$TOTAL_S" "$OUT" \
    >> "$SUMMARY"
cat "$SUMMARY"
exit "$FAILED"
