#!/usr/bin/env bash
# Starts or stops a private ClickHouse server for the live tests.
#
#   tools/servers/clickhouse.sh start DIR   prints "http_port user password" and returns once
#                                           SELECT 1 answers over HTTP
#   tools/servers/clickhouse.sh stop DIR    stops the server started in DIR (by its pid) and
#                                           removes DIR
#   tools/servers/clickhouse.sh down DIR    stops it, keeping DIR (its data, config and ports)
#   tools/servers/clickhouse.sh up DIR      starts it again from DIR after `down`
#
# The server listens on 127.0.0.1 only, on free ports, with its data, temp files,
# logs, config and users under DIR. No service manager is involved.
#
# For a replica of a cluster (tools/servers/ch_cluster.sh): CAPSTORE_CH_PASSWORD
# sets the password, CAPSTORE_CH_TCP_PORT the native port, CAPSTORE_CH_EXTRA a file
# of more <yandex> elements (ZooKeeper, macros, remote_servers, interserver port).
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|down|up DIR" >&2; exit 2; }

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

kill_server() {
  local pidfile="$dir/server.pid"
  if [ -f "$pidfile" ]; then
    local pid
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
}

stop() {
  kill_server
  rm -rf "$dir"
}

start() {
  local server
  server=$(command -v clickhouse-server || true)
  [ -n "$server" ] || { echo "clickhouse.sh: clickhouse-server not installed (apt-get install clickhouse-server)" >&2; exit 1; }
  mkdir -p "$dir/data" "$dir/tmp" "$dir/log" "$dir/user_files" "$dir/format_schemas"
  local http_port tcp_port password
  http_port=$(free_port)
  tcp_port=${CAPSTORE_CH_TCP_PORT:-$(free_port)}
  password=${CAPSTORE_CH_PASSWORD:-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')}
  local extra=""
  [ -n "${CAPSTORE_CH_EXTRA:-}" ] && extra=$(cat "$CAPSTORE_CH_EXTRA")
  cat > "$dir/users.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>2000000000</max_memory_usage></default></profiles>
  <users>
    <capstore>
      <password>$password</password>
      <networks><ip>127.0.0.1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </capstore>
  </users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time></interval></default></quotas>
</yandex>
XML
  cat > "$dir/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>information</level><log>$dir/log/server.log</log><errorlog>$dir/log/error.log</errorlog>
    <size>10M</size><count>2</count></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>$http_port</http_port>
  <tcp_port>$tcp_port</tcp_port>
  <max_connections>256</max_connections>
  <keep_alive_timeout>3</keep_alive_timeout>
  <max_concurrent_queries>${CAPSTORE_CH_MAX_QUERIES:-50}</max_concurrent_queries>
  <uncompressed_cache_size>67108864</uncompressed_cache_size>
  <mark_cache_size>67108864</mark_cache_size>
  <path>$dir/data/</path>
  <tmp_path>$dir/tmp/</tmp_path>
  <user_files_path>$dir/user_files/</user_files_path>
  <format_schema_path>$dir/format_schemas/</format_schema_path>
  <users_config>$dir/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
  <mlock_executable>false</mlock_executable>
$extra
</yandex>
XML
  printf '%s %s %s\n' "$http_port" capstore "$password" > "$dir/endpoint.pending"
  launch
}

# Starts the server configured in DIR and waits for SELECT 1; then DIR/endpoint holds "http_port user password".
launch() {
  local server http_port user password
  server=$(command -v clickhouse-server)
  read -r http_port user password < "$dir/endpoint.pending"
  (cd "$dir" && exec "$server" --config-file="$dir/config.xml" >"$dir/log/stdout.log" 2>&1 </dev/null) &
  echo $! > "$dir/server.pid"
  local pid
  pid=$(cat "$dir/server.pid")
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "clickhouse.sh: server exited; log:" >&2
      tail -20 "$dir/log/error.log" "$dir/log/stdout.log" >&2 2>/dev/null || true
      rm -f "$dir/server.pid"
      exit 1
    fi
    if [ "$(curl -s -m 2 -H "X-ClickHouse-User: capstore" -H "X-ClickHouse-Key: $password" \
             --data-binary 'SELECT 1' "http://127.0.0.1:$http_port/" 2>/dev/null)" = "1" ]; then
      cp "$dir/endpoint.pending" "$dir/endpoint"
      cat "$dir/endpoint"
      return 0
    fi
    sleep 0.1
  done
  echo "clickhouse.sh: no answer to SELECT 1 within 30 s" >&2
  kill_server
  exit 1
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  down) kill_server; rm -f "$dir/endpoint" ;;
  up) launch ;;
  *) echo "usage: $0 start|stop|down|up DIR" >&2; exit 2 ;;
esac
