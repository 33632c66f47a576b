#!/usr/bin/env bash
# GPU machine: Nsight Compute over conv2d_mm's forward and cuDNN's (channels_last) on each layer given as
# "batch channels hw dtype" arguments, one report each in $OUT/ncu_conv_<...>.txt, and a summary of the
# figures issue #33 asks for: tensor-pipe utilisation, achieved occupancy, shared-memory bank conflicts.
# Usage: bash tools/conv_profile.sh "32 128 28 float16" "32 256 14 float16"
set -uo pipefail
export PYTHONUNBUFFERED=1 TORCH_CUDA_ARCH_LIST=9.0 PYTHONPATH=$PWD
out=${OUT:-/tmp/out}; mkdir -p "$out"
metrics=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,launch__registers_per_thread,smsp__inst_executed.sum
for layer in "$@"; do
  name=$(echo "$layer" | tr ' ' '_')
  ncu --profile-from-start off --metrics "$metrics" --section WarpStateStats \
      python3 tools/conv_profile.py $layer > "$out/ncu_conv_$name.txt" 2>&1
  echo "== $layer: rc $?"
  grep -E "^  [a-zA-Z_].*\(|gpu__time_duration|hmma|warps_active|bank_conflicts|sm__throughput|dram__throughput|registers|inst_executed|Stall" "$out/ncu_conv_$name.txt" | grep -v "^==" | head -40
done
