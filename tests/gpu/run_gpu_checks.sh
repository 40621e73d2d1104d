#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU and the CUDA toolkit:
# builds capstore with CUDA, then runs
#   1. test_capture_gpu: f32, bf16, f16 and i64 records captured from device
#      memory round-trip byte-exact through the pack reader, in capture order;
#   2. test_service_gpu: the same through the service runtime to the catalog
#      (dirstore + SQLite) and read back byte-exact through catalog and store;
#   3. test_capture: the host sink tests, now with the pinned staging ring;
#   4. capstore-bench-d2h: device-path copy bandwidth against a plain pinned
#      cudaMemcpy of the same bytes;
#   5. tests/gpu/test_python_cuda.py: CUDA tensors captured from Python (every
#      dtype, non-contiguous, stream order) read back byte-exact.
# A check that reports "skipped" (exit 77) fails this script: here a device
# is expected. Needs cmake, a C compiler, cmocka, jansson, OpenSSL and zlib
# development files (as the project's CI), and ninja or make.
#
# Where the GPU machine lacks those, tests/gpu/bundle.sh builds the same
# checks here and packs them with their libraries and a run.sh.
#
# usage: tests/gpu/run_gpu_checks.sh [BUILD_DIR]   (default: build-gpu)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build-gpu}

if command -v nvidia-smi >/dev/null; then nvidia-smi -L; else echo "nvidia-smi not found"; fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$root" -B "$build" "${generator[@]}" -DCAPSTORE_MUTANTS=OFF \
  -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build" --target test_capture_gpu test_service_gpu capstore-bench-d2h test_capture test_spool capstore_shared -j "$(nproc)"

run() {
  local rc=0
  "$@" || rc=$?
  if [[ $rc == 77 ]]; then echo "FAILED: $1 was skipped, but this machine should have a GPU"; exit 1; fi
  if [[ $rc != 0 ]]; then echo "FAILED: $1 (exit $rc)"; exit 1; fi
}

echo "== device round trip"
run "$build/tests/test_capture_gpu"
echo "== device tensors through the service to the catalog and back"
run "$build/tests/test_service_gpu"
echo "== host sink tests with a device present"
run "$build/tests/test_capture"
echo "== D2H bandwidth"
run "$build/tests/capstore-bench-d2h"
echo "== CUDA tensors from Python (needs a CUDA build of torch on this machine's python3)"
if python3 -c 'import torch, numpy, pytest' 2>/dev/null; then
  PYTHONPATH="$root/python" CAPSTORE_LIBRARY="$build/lib/libcapstore.so" run python3 "$root/tests/gpu/test_python_cuda.py"
else
  echo "FAILED: python3 here lacks torch, numpy or pytest: the Python device path was not checked"; exit 1
fi
echo "GPU checks passed"
