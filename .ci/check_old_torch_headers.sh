#!/usr/bin/env bash
# Compile every C++ source (not the .cu files) against another torch's headers, without building:
# the GPU machines run an older torch (2.11) than CI (2.13), and a C++ API that changed between them
# (graph nodes moved from std::shared_ptr to c10::intrusive_ptr) breaks only there.
# Usage: bash .ci/check_old_torch_headers.sh [version]   (downloads that torch's wheel once, ~530 MB)
set -euo pipefail
version=${1:-2.11.0}
source "$(dirname "$0")/torch_headers.sh"
inc=$(torch_headers "$version")
py=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
status=0
for f in csrc/*.cpp csrc/*/cpu.cpp; do
  if ! g++ -fsyntax-only -std=c++17 -mavx2 -mfma -mf16c -fopenmp -DCPU_CAPABILITY_AVX2 -DCPU_CAPABILITY=AVX2 \
       -DTORCH_EXTENSION_NAME=labops_ops -DTORCH_API_INCLUDE_EXTENSION_H -isystem "$inc" \
       -isystem "$inc/torch/csrc/api/include" -isystem "$py" "$f"; then
    echo "FAILED: $f against torch $version"; status=1
  fi
done
[ $status = 0 ] && echo "every C++ source compiles against torch $version's headers"
exit $status
