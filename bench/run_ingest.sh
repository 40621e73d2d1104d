#!/usr/bin/env bash
# The capture sink's ingest benchmark against this machine's physical limits,
# all in one invocation on one file system:
#   - fsync write bandwidth: dd if=/dev/zero bs=1M count=256 conv=fsync
#   - SHA-256 speed: openssl speed -bytes 1048576 sha256
#   - the sink: capstore-bench-ingest for 4 KiB, 64 KiB and 1 MiB records
# Each is run RUNS times (default 3); medians are reported, and the sink's
# 1 MiB rate as a ratio of min(fsync bandwidth, SHA-256 speed): the goal is
# at least 0.9. Bounded: about 40 s on a 2-core machine.
#
# usage: bench/run_ingest.sh [BUILD_DIR]     (default: build)
# env:   RUNS (3), SECONDS_PER_RUN (1), CAPSTORE_BENCH_DIR (/var/tmp),
#        PAGE_CACHE (0: the sink's default, spool writes with O_DIRECT; 1: through the
#        page cache, cs_capture_config.direct_io off),
#        HASH_THREAD (unset: the config's defaults, on from 4 CPUs in the affinity mask; on; off:
#        hash_thread and demote_staging together)
set -euo pipefail

build=${1:-build}
runs=${RUNS:-3}
seconds=${SECONDS_PER_RUN:-1}
bench="$build/bench/capstore-bench-ingest"
mode=()
if [[ ${PAGE_CACHE:-0} == 1 ]]; then mode=(--page-cache); fi
if [[ -n ${HASH_THREAD:-} ]]; then mode+=(--hash-thread "$HASH_THREAD"); fi
if [[ ! -x $bench ]]; then
  ninja -C "$build" capstore-bench-ingest >/dev/null
fi
work=$(mktemp -d "${CAPSTORE_BENCH_DIR:-/var/tmp}/capstore-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }

# fsync write bandwidth in GB/s (10^9 bytes/s): 256 MiB written and fsynced.
dd_rates=()
for ((i = 0; i < runs; i++)); do
  out=$(LC_ALL=C dd if=/dev/zero of="$work/dd.bin" bs=1M count=256 conv=fsync 2>&1 | tail -n 1)
  rm -f "$work/dd.bin"
  # "268435456 bytes (268 MB, 256 MiB) copied, 0.6 s, 445 MB/s"
  dd_rates+=("$(awk '{ for (i = 1; i <= NF; i++) if ($i == "copied,") { printf "%.4f\n", $1 / $(i + 1) / 1e9 } }' <<<"$out")")
done
dd_gbps=$(printf '%s\n' "${dd_rates[@]}" | median)

# SHA-256 in GB/s over 1 MiB blocks ("sha256  1802703.39k": 1000s of bytes per second).
sha_rates=()
for ((i = 0; i < runs; i++)); do
  out=$(openssl speed -seconds 1 -bytes 1048576 sha256 2>/dev/null | awk '$1 == "sha256" { print $2 }')
  sha_rates+=("$(awk -v k="${out%k}" 'BEGIN { printf "%.4f\n", k * 1000 / 1e9 }')")
done
sha_gbps=$(printf '%s\n' "${sha_rates[@]}" | median)

limit=$(awk -v a="$dd_gbps" -v b="$sha_gbps" 'BEGIN { print (a < b ? a : b) }')
printf 'fsync write (dd conv=fsync, 256 MiB): %s GB/s   sha256 (openssl, 1 MiB blocks): %s GB/s   limit min(): %s GB/s\n' \
  "$dd_gbps" "$sha_gbps" "$limit"
printf '%-8s %12s %9s %6s %9s %9s %10s %10s %9s %9s %9s %9s\n' record records/s GB/s ratio sat_p50us sat_p99us pace_p50us pace_p99us copy_p50 copy_p99 hand_p50 hand_p99

for size in 4096 65536 1048576; do
  lines=()
  for ((i = 0; i < runs; i++)); do
    lines+=("$("$bench" --dir "$work/spool-$size-$i" --record-bytes "$size" --seconds "$seconds" "${mode[@]}")")
    rm -rf "$work/spool-$size-$i"
  done
  med() { printf '%s\n' "${lines[@]}" | while read -r l; do field "$1" <<<"$l"; done | median; }
  gbps=$(med gb_per_s)
  ratio=$(awk -v g="$gbps" -v l="$limit" 'BEGIN { printf "%.2f", g / l }')
  printf '%-8s %12s %9s %6s %9s %9s %10s %10s %9s %9s %9s %9s\n' "$size" "$(med records_per_s)" "$gbps" "$ratio" \
    "$(med sat_p50_us)" "$(med sat_p99_us)" "$(med paced_p50_us)" "$(med paced_p99_us)" \
    "$(med copy_p50_us)" "$(med copy_p99_us)" "$(med handoff_p50_us)" "$(med handoff_p99_us)"
  if [[ $size == 1048576 ]]; then ratio_1m=$ratio; fi
done

printf 'ratio for 1 MiB records: %s x min(fsync write, sha256)  (goal >= 0.9)\n' "$ratio_1m"
printf 'medians of %d runs; sat = saturated producer, pace = half the saturated rate while packs seal,\n' "$runs"
printf 'peers, timed between the paced calls (us): copy = a plain memcpy of the same record into one reused buffer;\n'
printf 'hand = the same memcpy into a buffer another thread reads after each copy (handing bytes to another core)\n'
printf 'spool writes: %s; SHA-256 on %s; %s usable CPUs (nproc)\n' \
  "$([[ ${PAGE_CACHE:-0} == 1 ]] && echo 'page cache (direct_io off)' || echo 'O_DIRECT (direct_io, the default)')" \
  "$([[ $(field hash_thread <<<"${lines[0]}") == 1 ]] && echo 'a hash thread, staging lines demoted (hash_thread, demote_staging)' || echo 'the worker')" \
  "$(nproc)"
