#!/usr/bin/env bash
# Starts or stops a private S3 emulator (@20minutes/s3rver, which verifies SigV4)
# for the live tests.
#
#   tools/servers/s3.sh install [PREFIX]   npm install into PREFIX (default build/npm)
#   tools/servers/s3.sh start DIR          prints "endpoint access_key secret bucket"
#   tools/servers/s3.sh stop DIR           stops the server started in DIR (by its pid), removes DIR
#
# Loopback only (127.0.0.1), a free port, the objects under DIR. The package is
# installed per checkout (never globally): CAPSTORE_NPM_PREFIX names the folder.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
prefix=${CAPSTORE_NPM_PREFIX:-$repo/build/npm}
package='@20minutes/s3rver@4.0.4'
cmd=${1:-}
dir=${2:-}

install() {
  local p=${1:-$prefix}
  mkdir -p "$p"
  npm install --no-audit --no-fund --prefix "$p" "$package" >/dev/null
}

stop() {
  if [ -f "$dir/server.pid" ]; then
    local pid
    pid=$(cat "$dir/server.pid")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -rf "$dir"
}

start() {
  command -v node >/dev/null || { echo "s3.sh: node not installed (apt-get install nodejs npm)" >&2; exit 1; }
  [ -d "$prefix/node_modules/@20minutes/s3rver" ] || install "$prefix"
  mkdir -p "$dir/data"
  local legacy=""
  node --openssl-legacy-provider -e 0 2>/dev/null && legacy="--openssl-legacy-provider"
  (exec node $legacy "$here/s3rver-run.js" "$prefix" "$dir/data" capstore-test "$dir/port" \
     >"$dir/server.log" 2>&1 </dev/null) &
  echo $! > "$dir/server.pid"
  local pid
  pid=$(cat "$dir/server.pid")
  for _ in $(seq 1 200); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "s3.sh: server exited; log:" >&2
      tail -20 "$dir/server.log" >&2 || true
      rm -f "$dir/server.pid"
      exit 1
    fi
    if [ -s "$dir/port" ]; then
      local port
      port=$(cat "$dir/port")
      if curl -s -o /dev/null -m 2 "http://127.0.0.1:$port/"; then
        printf 'http://127.0.0.1:%s S3RVER S3RVER capstore-test\n' "$port" > "$dir/endpoint"
        cat "$dir/endpoint"
        return 0
      fi
    fi
    sleep 0.1
  done
  echo "s3.sh: no answer within 20 s" >&2
  stop
  exit 1
}

case "$cmd" in
  install) install "${2:-}" ;;
  start) [ -n "$dir" ] || { echo "usage: $0 start DIR" >&2; exit 2; }; start ;;
  stop) [ -n "$dir" ] || { echo "usage: $0 stop DIR" >&2; exit 2; }; stop ;;
  *) echo "usage: $0 install [PREFIX] | start DIR | stop DIR" >&2; exit 2 ;;
esac
