#!/usr/bin/env bash
# Packs the GPU checks for a machine that has a GPU but not the build's
# dependencies (cmocka, jansson, ISA-L, OpenSSL 3 of this Debian): builds
# them here with CUDA, then copies into OUT the programs, every library they
# load that is not the C library's own, and run.sh, which runs the checks
# there with those libraries first on LD_LIBRARY_PATH:
#   1. test_capture_gpu, direct I/O and page cache (also under compute-sanitizer memcheck when present),
#   2. test_capture (the host sink tests, with a device present),
#   3. capstore-bench-d2h,
#   4. bench/run_ingest.sh with O_DIRECT (the default) and through the page cache.
# A check that exits 77 (skipped) fails run.sh: there a device is expected.
#
# usage: tests/gpu/bundle.sh OUT [BUILD_DIR]   (default build dir: build-gpu)
#        then, on the GPU machine, from the repository root: bash OUT/run.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: tests/gpu/bundle.sh OUT [BUILD_DIR]}
build=${2:-$root/build-gpu}
cmake -S "$root" -B "$build" -G Ninja -DCAPSTORE_MUTANTS=OFF >/dev/null
cmake --build "$build" --target test_capture_gpu test_service_gpu capstore-bench-d2h test_capture capstore-bench-ingest
if ! grep -q 'CAPSTORE_HAVE_CUDA' "$build/build.ninja"; then
  echo "bundle.sh: CMake did not find the CUDA toolkit: the GPU checks would only skip" >&2
  exit 1
fi
rm -rf "$out"
mkdir -p "$out/lib" "$out/bin/tests" "$out/bin/bench"
cp "$build"/tests/{test_capture_gpu,test_service_gpu,capstore-bench-d2h,test_capture} "$out/bin/tests/"
cp "$build/bench/capstore-bench-ingest" "$out/bin/bench/"
# Every library the programs load, but the C library's own (libc, libm, the loader...).
ldd "$out"/bin/*/* | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
cat >"$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the bundled GPU checks (see tests/gpu/bundle.sh); from the repository root.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
failed=0
check() {
  local rc=0
  "$@" || rc=$?
  if [[ $rc == 77 ]]; then echo "FAILED: $* was skipped, but this machine should have a GPU"; failed=1;
  elif [[ $rc != 0 ]]; then echo "FAILED: $* (exit $rc)"; failed=1; fi
}
nvidia-smi -L || true
echo "== device round trip"; check timeout 120 "$here/bin/tests/test_capture_gpu"
if command -v compute-sanitizer >/dev/null; then
  echo "== device round trip under compute-sanitizer"
  check timeout 300 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 1 \
    "$here/bin/tests/test_capture_gpu"
fi
echo "== through the service"; check timeout 120 "$here/bin/tests/test_service_gpu"
echo "== host sink tests"; check timeout 300 "$here/bin/tests/test_capture"
echo "== D2H bandwidth"; check timeout 300 "$here/bin/tests/capstore-bench-d2h"
echo "== ingest, O_DIRECT"; RUNS=${RUNS:-5} check timeout 300 bash bench/run_ingest.sh "$here/bin"
echo "== ingest, page cache"; PAGE_CACHE=1 RUNS=${RUNS:-5} check timeout 300 bash bench/run_ingest.sh "$here/bin"
if [[ $failed == 0 ]]; then echo "GPU checks passed"; else echo "GPU checks FAILED"; exit 1; fi
RUN
chmod +x "$out/run.sh"
du -sh "$out"
