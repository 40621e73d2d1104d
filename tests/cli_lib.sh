# Sourced by the CLI test scripts (tests/*_cli.sh): a fresh work directory,
# fail() to count a failed check, finish() to report and set the exit status.
#   cli_begin WORKDIR; ...; fail "what"; ...; finish NAME
cli_begin() {
  work=$1
  rm -rf "$work"
  mkdir -p "$work"
  failures=0
}
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
finish() {
  if ((failures > 0)); then
    echo "$1: $failures checks failed"
    exit 1
  fi
  echo "$1: every check passed"
}
