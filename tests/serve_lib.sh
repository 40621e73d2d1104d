# Sourced by the scripts that run `capstore serve` beside capture processes
# (tests/serve_e2e.sh, tests/arrays_live.sh), after cli_lib.sh's cli_begin.
#   serve_backend CH_FILE S3_FILE   sets backend (embedded, or servers when CH_FILE
#                                   is given), $store and $catalog (the JSON members)
#                                   and the servers' credentials in the environment
#   serve_start CAPSTORE CONFIG     starts the daemon (pid in $daemon) and waits
#                                   for it to hold the lease
#   serve_stop                      SIGTERM, and the daemon must exit 0
daemon=
trap '[[ -n $daemon ]] && kill -KILL "$daemon" 2>/dev/null; wait 2>/dev/null' EXIT

serve_backend() {
  backend=embedded
  if [[ -n ${1-} ]]; then
    backend=servers
    read -r ch_port ch_user ch_password <"$1"
    read -r s3_endpoint s3_key s3_secret s3_bucket <"$2"
    export CAPSTORE_CLICKHOUSE_PASSWORD=$ch_password AWS_ACCESS_KEY_ID=$s3_key AWS_SECRET_ACCESS_KEY=$s3_secret
    export AWS_REGION=us-east-1
    store="\"s3\": {\"endpoint\": \"$s3_endpoint\", \"bucket\": \"$s3_bucket\", \"allow_insecure\": true}"
    catalog="\"clickhouse\": {\"url\": \"http://127.0.0.1:$ch_port/\", \"user\": \"$ch_user\", \"allow_insecure\": true}"
  else
    store="\"dir\": \"$work/bucket\""
    catalog="\"sqlite\": \"$work/catalog.db\""
  fi
}

serve_start() {
  "$1" serve "$2" --log "$work/serve.log" 2>"$work/serve.err" &
  daemon=$!
  for ((i = 0; i < 600; i++)); do
    grep -q "event=lease state=held" "$work/serve.log" 2>/dev/null && break
    kill -0 "$daemon" 2>/dev/null || break
    sleep 0.05
  done
  grep -q "event=lease state=held" "$work/serve.log" ||
    fail "the daemon did not take the lease: $(tail -5 "$work/serve.log" "$work/serve.err")"
}

serve_stop() {
  kill -TERM "$daemon"
  for ((i = 0; i < 600; i++)); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.05; done
  wait "$daemon"
  local code=$?
  daemon=
  [[ $code == 0 ]] || fail "SIGTERM: exit $code: $(tail -3 "$work/serve.log") $(cat "$work/serve.err")"
}
