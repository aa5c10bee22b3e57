#!/usr/bin/env bash
# The prepared GPU check, for the first day a machine with an NVIDIA GPU is at hand (under 10
# minutes on one GPU). It builds wccl with CUDA in BUILD_DIR (default build-gpu), then runs:
#   kernels  tests/test_gpu_kernels: every GPU kernel against its CPU oracle, bit for bit, none skipped
#   python   tests/python/test_cuda.py: every collective, wire, algorithm and dtype on CUDA tensors
#            against the same on CPU tensors, bit for bit; stream ordering; state sync
#   bench    bench_codec: the GPU kernels' rows next to the CPU tiers' INT8/INT4/INT2/FP8/TOPK rows and memcpy
#   trainer  examples/diloco with --device cuda: two nodes of one local rank sharing the GPU, TLS,
#            INT8 wire, blocking and streaming DiLoCo; both nodes must end with the same model
#   hier     wccl_hier_allreduce on the GPU: tests/test_hier's NCCL local groups (one rank
#            per node: NCCL takes one GPU per rank; none may skip), then examples/hier with
#            --device cuda, INT8 across nodes, as two nodes of one local rank (an NCCL local group)
#            and two nodes of two (the node's threads, on one GPU); every rank must end with the
#            same model. NCCL comes from the build (the .venv's nvidia-nccl-cu13 wheel if there)
# and prints one summary line per step. On a machine without a GPU it says so and exits 0; it exits
# 1 when a step failed. Logs go to GPU_CHECK_OUT (default BUILD_DIR/gpu-check).
#
#   PYTHON   the interpreter with torch (a CUDA build), numpy and pytest: default .venv/bin/python
#            when its torch sees a GPU, else python3
#   WCCL_GPU_CHECK_PREBUILT=1   use BUILD_DIR as it is (configured elsewhere with -Dcuda=enabled,
#            e.g. on a machine without the GPU), build nothing
set -uo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
build="${BUILD_DIR:-build-gpu}"
out="${GPU_CHECK_OUT:-$build/gpu-check}"

if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU on this machine (nvidia-smi finds none): nothing to check"
  exit 0
fi
gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
echo "gpu-check: $gpu"

if [ "${WCCL_GPU_CHECK_PREBUILT:-0}" != 1 ]; then
  nccl_args=""
  if [ -x .venv/bin/python ] && nccl_root="$(.venv/bin/python -c 'import os, nvidia.nccl as n; print(os.path.abspath(list(n.__path__)[0]))' 2> /dev/null)"; then
    nccl_args="-Dnccl_dir=$nccl_root"
  fi
  BUILD_DIR="$build" MESON_ARGS="-Dcuda=enabled -Dfuzz=disabled $nccl_args" scripts/build.sh || {
    echo "gpu-check: FAIL build (BUILD_DIR=$build, -Dcuda=enabled)"; exit 1; }
fi
mkdir -p "$out"
export build out
export PYTHONPATH="$root/$build/bindings/python${PYTHONPATH:+:$PYTHONPATH}" WCCL_LIBRARY="$root/$build/lib/libwccl.so"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  if [ -x .venv/bin/python ] && .venv/bin/python -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2> /dev/null; then
    PYTHON=.venv/bin/python
  fi
fi
export PYTHON

summary=()
failed=0
# step NAME SECONDS COMMAND...: runs COMMAND with its output in $out/NAME.log, within SECONDS.
step() {
  local name="$1" limit="$2" start rc
  shift 2
  start=$(date +%s)
  # shellcheck disable=SC2016  # bash -c, so that a step may be one of the functions exported below
  timeout --kill-after=10 "$limit" bash -c '"$@"' step "$@" > "$out/$name.log" 2>&1
  rc=$?
  local took=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    summary+=("PASS  $name (${took}s)")
  else
    local why="rc $rc"
    [ $rc -eq 124 ] && why="timed out after ${limit}s"
    summary+=("FAIL  $name (${took}s, $why): log $out/$name.log")
    failed=1
    tail -n 30 "$out/$name.log" | sed "s/^/  $name| /"
  fi
}

# The GPU kernels: a run that skips (CUDA sees no device) is a failure here.
kernels() {
  "$build/tests/test_gpu_kernels" --gtest_color=no || return 1
}
export -f kernels
step kernels 60 kernels
grep -q "SKIPPED" "$out/kernels.log" && { summary[-1]="FAIL  kernels: skipped (CUDA sees no device)"; failed=1; }

# Every collective on CUDA tensors against CPU tensors; none may skip.
python_cuda() {
  "$PYTHON" -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda); sys.exit(not torch.cuda.is_available())' || {
    echo "$PYTHON: torch sees no CUDA device"; return 1; }
  "$PYTHON" -m pytest -q -p no:cacheprovider -o console_output_style=classic -rs tests/python/test_cuda.py || return 1
  ! grep -q "skipped" "$out/python.log"
}
export -f python_cuda
step python 180 python_cuda

# The codec kernels on the GPU next to the CPU tiers (Google Benchmark; bytes/s is F32 bytes).
step bench 180 "$build/bench/micro/bench_codec" --benchmark_min_time=0.2 \
  --benchmark_filter='^(memcpy|(int8|int4|int2|fp8|topk)_(encode|decode_add)/(avx2|avx512))/16777216$|^gpu_'
rows="$(grep -E '^(gpu_|(int8|int4|int2|fp8|topk)_encode/)' "$out/bench.log" | awk '{print $1 " " $(NF)}' | tr '\n' ';' | sed 's/;$//')"
[ -n "$rows" ] && summary[-1]+=": $rows"
if ! grep -q '^gpu_int8_encode' "$out/bench.log"; then
  summary[-1]="FAIL  bench: no GPU rows (bench_codec registers them only where a GPU is found)"; failed=1
fi

# The trainer on the GPU: two nodes of one local rank, TLS, INT8, identical models at the end;
# blocking DiLoCo, then streaming (2 fragments, overlap 1, mix 0.5: the fragments' merge on the GPU).
trainer() {
  local model="--dim 96 --layers 3 --heads 4 --seq-len 64 --batch-size 8" run
  for run in blocking streaming; do
    local flags=""
    [ "$run" = streaming ] && flags="--fragments 2 --overlap 1 --mix 0.5"
    # shellcheck disable=SC2086  # the flags are words
    "$PYTHON" examples/diloco/local_run.py --nodes 2 --local-ranks 1 --out "$out/trainer-$run" --timeout 100 -- \
      --device cuda --outer-steps 3 --inner-steps 4 $model $flags || return 1
    grep -h '"event": "joined"' "$out/trainer-$run"/node*.jsonl
    [ "$(grep -h '"event": "joined"' "$out/trainer-$run"/node*.jsonl | grep -c '"device": "cuda')" = 2 ] || {
      echo "$run: a node did not train on the GPU"; return 1; }
  done
}
export -f trainer
step trainer 220 trainer

# The hierarchical all-reduce on device buffers: the NCCL local group's test, then the example as
# two node processes, of one rank (NCCL) and of two (threads).
hier_nodes() {  # LOCAL_SIZE: runs two nodes, checks that every rank ends with the same model
  local local_size="$1" pids=() n rc=0 logs="$out/hier-l$1"
  "$build/tools/wccl-coord" --listen 127.0.0.1:48941 --tls off --min-peers 2 > "$logs-coord.log" 2>&1 &
  local coord=$!
  for n in a b; do
    WCCL_COORDINATOR=127.0.0.1:48941 WCCL_TLS=off WCCL_LISTEN=127.0.0.1:0 "$build/examples/wccl-hier-diloco" \
      --node "gpu-$n" --local-size "$local_size" --outer-steps 5 --count 1000000 --wire int8 --device cuda \
      > "$logs-$n.log" 2>&1 &
    pids+=($!)
  done
  for n in "${pids[@]}"; do wait "$n" || rc=1; done
  kill "$coord"
  wait "$coord" 2> /dev/null
  cat "$logs"-?.log
  [ $rc = 0 ] && [ "$(grep -h 'done hash' "$logs"-?.log | wc -l)" = $((2 * local_size)) ] &&
    [ "$(grep -h 'done hash' "$logs"-?.log | awk '{print $NF}' | sort -u | wc -l)" = 1 ]
}
hier() {
  local got
  got="$("$build/tests/test_hier" --gtest_color=no --gtest_filter='*Nccl*')" || { echo "$got"; return 1; }
  echo "$got"
  echo "$got" | grep -q '^\[  PASSED  \] 1 test' || {
    echo "the NCCL local group's test did not run (skipped, or a build without NCCL)"; return 1; }
  hier_nodes 1 && grep -q "local group: NCCL" "$out"/hier-l1-a.log && hier_nodes 2
}
export -f hier_nodes
export -f hier
step hier 240 hier

echo
echo "gpu-check on $gpu:"
printf '  %s\n' "${summary[@]}"
exit $failed
