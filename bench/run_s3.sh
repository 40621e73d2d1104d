#!/usr/bin/env bash
# The S3 adapter's parallel transfers against a private s3rver (tools/servers/s3.sh),
# all in one invocation:
#   - capstore-bench-s3 with 1 request in flight, and with K (default 8)
#   - the peer: curl --parallel --parallel-max K (curl's own multi interface, its
#     own SigV4 signer) PUTting and GETting the same objects to the same server
# Both send x-amz-content-sha256: UNSIGNED-PAYLOAD. Each is run RUNS times
# (default 3); medians are reported in MB/s (10^6 bytes/s), with the ratios
# capstore K / capstore 1 and capstore K / curl K. The server is one node
# process on this machine, so the ratios, not the rates, are what carry over.
#
# usage: bench/run_s3.sh [BUILD_DIR]     (default: the repo's build)
# env:   RUNS (3), K (8)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
runs=${RUNS:-3}
k=${K:-8}
bench="$build/bench/capstore-bench-s3"
if [[ ! -x $bench ]]; then
  ninja -C "$build" capstore-bench-s3 >/dev/null
fi
command -v curl >/dev/null || { echo "run_s3.sh: curl not installed" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/capstore-bench-s3.XXXXXX")
trap '"$here/../tools/servers/s3.sh" stop "$work/s3" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$here/../tools/servers/s3.sh" start "$work/s3" >/dev/null
read -r endpoint access_key secret bucket <"$work/s3/endpoint"

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
field() { tr ' ' '\n' | awk -F= -v k="$1" '$1 == k { print $2 }'; }
now() { date +%s.%N; }

# curl's parallel run: PUTs then GETs of n objects of the body file; prints "put_MBps get_MBps".
curl_run() {
  local n=$1 size=$2 tag=$3 put_cfg="$work/put.cfg" get_cfg="$work/get.cfg" t0 t1 t2 ok
  : >"$put_cfg"
  : >"$get_cfg"
  for ((j = 0; j < n; j++)); do
    printf 'upload-file = "%s"\nurl = "%s/%s/peer-%s/%06d"\n' "$work/body-$size" "$endpoint" "$bucket" "$tag" "$j" >>"$put_cfg"
    printf 'url = "%s/%s/peer-%s/%06d"\noutput = "/dev/null"\n' "$endpoint" "$bucket" "$tag" "$j" >>"$get_cfg"
  done
  local common=(-sS --no-progress-meter --parallel --parallel-max "$k" --aws-sigv4 "aws:amz:us-east-1:s3" --user "$access_key:$secret"
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -w '%{http_code}\n')
  t0=$(now)
  ok=$(curl "${common[@]}" --config "$put_cfg" | grep -c '^200$' || true)
  t1=$(now)
  [[ $ok == "$n" ]] || { echo "run_s3.sh: curl PUT: $ok of $n answered 200" >&2; exit 1; }
  ok=$(curl "${common[@]}" --config "$get_cfg" | grep -c '^200$' || true)
  t2=$(now)
  [[ $ok == "$n" ]] || { echo "run_s3.sh: curl GET: $ok of $n answered 200" >&2; exit 1; }
  awk -v n="$n" -v s="$size" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "%.2f %.2f\n", n * s / (b - a) / 1e6, n * s / (c - b) / 1e6 }'
}

printf 's3rver at %s, %s runs, K = %s; MB/s medians\n' "$endpoint" "$runs" "$k"
printf '%-9s %-4s %12s %12s %12s %10s %10s\n' object op capstore_1 "capstore_$k" "curl_$k" "K/1" "vs_curl"
for size in 65536 1048576; do
  n=$((size == 65536 ? 256 : 64))
  head -c "$size" /dev/urandom >"$work/body-$size"
  c1_put=() c1_get=() ck_put=() ck_get=() cu_put=() cu_get=()
  for ((i = 0; i < runs; i++)); do
    out=$("$bench" "$work/s3/endpoint" --objects "$n" --bytes "$size" --in-flight 1)
    c1_put+=("$(grep '^phase=put' <<<"$out" | field MBps)")
    c1_get+=("$(grep '^phase=get' <<<"$out" | field MBps)")
    out=$("$bench" "$work/s3/endpoint" --objects "$n" --bytes "$size" --in-flight "$k")
    ck_put+=("$(grep '^phase=put' <<<"$out" | field MBps)")
    ck_get+=("$(grep '^phase=get' <<<"$out" | field MBps)")
    out=$(curl_run "$n" "$size" "$size-$i") || exit 1
    read -r p g <<<"$out"
    cu_put+=("$p")
    cu_get+=("$g")
  done
  for op in put get; do
    declare -n a1="c1_$op" ak="ck_$op" au="cu_$op"
    m1=$(printf '%s\n' "${a1[@]}" | median)
    mk=$(printf '%s\n' "${ak[@]}" | median)
    mu=$(printf '%s\n' "${au[@]}" | median)
    printf '%-9s %-4s %12s %12s %12s %10.2f %10.2f\n' "$size" "$op" "$m1" "$mk" "$mu" \
      "$(awk -v a="$mk" -v b="$m1" 'BEGIN { print a / b }')" "$(awk -v a="$mk" -v b="$mu" 'BEGIN { print a / b }')"
    unset -n a1 ak au
  done
done
