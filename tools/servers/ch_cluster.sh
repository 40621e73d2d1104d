#!/usr/bin/env bash
# Starts or stops a private replicated ClickHouse cluster for the live tests:
# one ZooKeeper node (Debian's zookeeper) and N ClickHouse 18.16 replicas of one
# shard, all on 127.0.0.1 on free ports, everything under DIR. No service manager.
#
#   tools/servers/ch_cluster.sh start DIR [N]   N replicas (default 3); returns once
#                                               every replica answers and sees ZooKeeper
#   tools/servers/ch_cluster.sh stop DIR        stops everything started in DIR, removes DIR
#   tools/servers/ch_cluster.sh down DIR K      stops replica K (1..N), keeping its data
#   tools/servers/ch_cluster.sh up DIR K        starts replica K again
#   tools/servers/ch_cluster.sh zk-down DIR     stops ZooKeeper (the replicas go read-only)
#   tools/servers/ch_cluster.sh zk-up DIR       starts it again on the same port and data
#
# After start: DIR/rK/endpoint is replica K's "http_port user password" (the
# format of tools/servers/clickhouse.sh), DIR/cluster is "capstore N" (the
# cluster's name in remote_servers and its replica count), DIR/zk/port the
# ZooKeeper client port. The replicas share user and password; their macros are
# {shard}=01 and {replica}=rK, so ReplicatedMergeTree('/clickhouse/tables/{shard}/T',
# '{replica}') names one table's replicas, and ON CLUSTER capstore reaches all.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop|down|up|zk-down|zk-up DIR [N|K]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

zk_answers() { # ruok -> imok on the client port
  python3 - "$1" <<'PY' 2>/dev/null
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
s.sendall(b"ruok")
print(s.recv(16).decode())
PY
}

zk_up() {
  local port
  port=$(cat "$dir/zk/port")
  [ -f /usr/share/java/zookeeper.jar ] || { echo "ch_cluster.sh: zookeeper not installed (apt-get install zookeeper)" >&2; exit 1; }
  (cd "$dir/zk" && exec java -Xmx256m -cp /usr/share/java/zookeeper.jar -Dzookeeper.log.dir="$dir/zk" \
     org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zk/zoo.cfg" >"$dir/zk/out.log" 2>&1 </dev/null) &
  echo $! > "$dir/zk/pid"
  for _ in $(seq 1 300); do
    [ "$(zk_answers "$port")" = imok ] && return 0
    kill -0 "$(cat "$dir/zk/pid")" 2>/dev/null || { echo "ch_cluster.sh: ZooKeeper exited:" >&2; tail -20 "$dir/zk/out.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "ch_cluster.sh: ZooKeeper did not answer within 30 s" >&2
  exit 1
}

zk_down() {
  [ -f "$dir/zk/pid" ] || return 0
  local pid
  pid=$(cat "$dir/zk/pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/zk/pid"
}

# Every replica sees ZooKeeper (system.zookeeper answers) once it is up.
wait_zk_seen() {
  local n k http user password
  n=$(awk '{print $2}' "$dir/cluster")
  for k in $(seq 1 "$n"); do
    [ -f "$dir/r$k/endpoint" ] || continue
    read -r http user password < "$dir/r$k/endpoint"
    for _ in $(seq 1 300); do
      if curl -sf -m 2 -H "X-ClickHouse-User: $user" -H "X-ClickHouse-Key: $password" \
           --data-binary "SELECT count() FROM system.zookeeper WHERE path = '/'" "http://127.0.0.1:$http/" >/dev/null 2>&1; then
        continue 2
      fi
      sleep 0.1
    done
    echo "ch_cluster.sh: replica $k does not see ZooKeeper" >&2
    exit 1
  done
}

start() {
  local n=${1:-3}
  [[ "$n" =~ ^[1-9]$ ]] || { echo "ch_cluster.sh: N must be 1..9" >&2; exit 2; }
  if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
    echo "ch_cluster.sh: $dir exists and is not empty (stop the cluster there first)" >&2
    exit 2
  fi
  # A start that fails half way stops what it started.
  trap 'status=$?; [ $status -eq 0 ] || stop; exit $status' EXIT
  mkdir -p "$dir/zk/data"
  local zk_port password k
  zk_port=$(free_port)
  echo "$zk_port" > "$dir/zk/port"
  cat > "$dir/zk/zoo.cfg" <<CFG
tickTime=500
initLimit=10
syncLimit=5
dataDir=$dir/zk/data
clientPort=$zk_port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,stat
maxSessionTimeout=60000
CFG
  zk_up
  password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  local tcp=() inter=()
  for k in $(seq 1 "$n"); do tcp[$k]=$(free_port); inter[$k]=$(free_port); done
  local replicas=""
  for k in $(seq 1 "$n"); do
    replicas+="<replica><host>127.0.0.1</host><port>${tcp[$k]}</port><user>capstore</user><password>$password</password></replica>"
  done
  echo "capstore $n" > "$dir/cluster"
  for k in $(seq 1 "$n"); do
    mkdir -p "$dir/r$k"
    cat > "$dir/r$k.extra.xml" <<XML
  <zookeeper><node><host>127.0.0.1</host><port>$zk_port</port></node><session_timeout_ms>6000</session_timeout_ms></zookeeper>
  <macros><shard>01</shard><replica>r$k</replica></macros>
  <remote_servers><capstore><shard><internal_replication>true</internal_replication>$replicas</shard></capstore></remote_servers>
  <distributed_ddl><path>/clickhouse/task_queue/ddl</path></distributed_ddl>
  <interserver_http_host>127.0.0.1</interserver_http_host>
  <interserver_http_port>${inter[$k]}</interserver_http_port>
XML
    # Two cores run all replicas: fewer threads each than the defaults.
    CAPSTORE_CH_PASSWORD=$password CAPSTORE_CH_TCP_PORT=${tcp[$k]} CAPSTORE_CH_EXTRA="$dir/r$k.extra.xml" \
      CAPSTORE_CH_MAX_QUERIES=${CAPSTORE_CH_MAX_QUERIES:-30} "$here/clickhouse.sh" start "$dir/r$k" >/dev/null
  done
  wait_zk_seen
  trap - EXIT
  cat "$dir/cluster"
}

stop() {
  # Only a directory this script made: never rm -rf anything else.
  if [ -e "$dir" ] && [ ! -f "$dir/cluster" ] && [ ! -f "$dir/zk/zoo.cfg" ]; then
    echo "ch_cluster.sh: $dir is not a cluster's directory; not removed" >&2
    exit 2
  fi
  if [ -f "$dir/cluster" ]; then
    local n k
    n=$(awk '{print $2}' "$dir/cluster")
    for k in $(seq 1 "$n"); do [ -d "$dir/r$k" ] && "$here/clickhouse.sh" down "$dir/r$k" || true; done
  fi
  zk_down
  rm -rf "$dir"
}

replica_dir() {
  local k=${1:-}
  [[ "$k" =~ ^[1-9]$ ]] && [ -d "$dir/r$k" ] || { echo "ch_cluster.sh: no replica '$k' in $dir" >&2; exit 2; }
  echo "$dir/r$k"
}

case "$cmd" in
  start) start "${3:-3}" ;;
  stop) stop ;;
  down) "$here/clickhouse.sh" down "$(replica_dir "${3:-}")" ;;
  up) "$here/clickhouse.sh" up "$(replica_dir "${3:-}")" >/dev/null ;;
  zk-down) zk_down ;;
  zk-up) zk_up ;;
  *) echo "usage: $0 start|stop|down|up|zk-down|zk-up DIR [N|K]" >&2; exit 2 ;;
esac
