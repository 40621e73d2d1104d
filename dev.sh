#!/usr/bin/env bash
# capstore developer entry point. Installs what the build needs (Debian 12,
# apt-get), configures and builds, then runs what you ask for.
#
#   ./dev.sh demo [ARGS]  build and run `capstore demo` (capture, flush, read every
#                         record back; no server); ARGS go to the demo (--help)
#   ./dev.sh sim [N]      build and run the simulator over N swarm seeds (default 500)
#   ./dev.sh test         build and run every test (ctest)
#   ./dev.sh python       build libcapstore.so, pip install ./python into .venv (Debian's
#                         torch and numpy seen through it) and run examples/python_transformer.py
#   ./dev.sh deps         only install the Debian packages
set -euo pipefail
cd "$(dirname "$0")"

# What configure and the build need (the demo needs nothing more: no server).
BUILD_PACKAGES=(build-essential cmake ninja-build pkg-config libcmocka-dev
                libjansson-dev libssl-dev zlib1g-dev libisal-dev python3
                libcurl4-openssl-dev libsqlite3-dev libexpat1-dev libmicrohttpd-dev libblosc-dev)
# The Python package (python/) and its tests: Debian's interpreter, torch, numpy and pytest; OpenBLAS
# so that torch does not run on the reference BLAS (many times slower: the benchmark would mean nothing).
PYTHON_PACKAGES=(python3-numpy python3-torch python3-pytest python3-venv python3-pip python3-setuptools
                 libopenblas0-pthread python3-blosc)
# What the tests add: clang (fuzz targets, the clang build), the live servers (ZooKeeper for the replicated
# catalog's cluster: tools/servers/ch_cluster.sh).
PACKAGES=("${BUILD_PACKAGES[@]}" clang libclang-rt-14-dev clickhouse-server clickhouse-client zookeeper
          "${PYTHON_PACKAGES[@]}")

# deps [build|python]: every package the tests need, or only what the build (and the Python package) needs.
deps() {
  local missing=() wanted=("${PACKAGES[@]}")
  [ "${1:-}" = build ] && wanted=("${BUILD_PACKAGES[@]}")
  [ "${1:-}" = python ] && wanted=("${BUILD_PACKAGES[@]}" "${PYTHON_PACKAGES[@]}")
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # Node.js and npm (for the S3 test server): the machine's own when present (a
  # NodeSource nodejs bundles npm and conflicts with Debian's npm package).
  if [ "${1:-}" = "" ] && { ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; }; then
    missing+=(nodejs npm)
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "dev.sh: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

configure() {
  deps "${1:-}"
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
}

build() {
  configure
  ninja -C build
}

case "${1:-}" in
  deps) deps ;;
  demo)
    configure build
    # Only the command (not the tests and mutants); the log is shown when the build fails.
    echo "dev.sh: building build/capstore (log: build/dev-demo-build.log)" >&2
    # The command, and libcapstore.so for the Python package (pip install ./python bundles it).
    ninja -C build capstore_cli capstore_shared >build/dev-demo-build.log 2>&1 || { tail -40 build/dev-demo-build.log; exit 1; }
    shift
    ./build/capstore demo "$@"
    ;;
  python)
    configure python
    echo "dev.sh: building build/lib/libcapstore.so (log: build/dev-python-build.log)" >&2
    ninja -C build capstore_shared >build/dev-python-build.log 2>&1 || { tail -40 build/dev-python-build.log; exit 1; }
    # Debian's interpreter (python3-torch is a Debian package), not another python3 first on PATH.
    [ -x .venv/bin/pip ] || /usr/bin/python3 -m venv --system-site-packages .venv
    .venv/bin/pip install --no-index -q --force-reinstall ./python
    shift
    .venv/bin/python examples/python_transformer.py "$@"
    ;;
  sim)
    build
    ./build/capstore-sim --seeds "${2:-500}" --quiet
    ;;
  test)
    build
    ctest --test-dir build --output-on-failure -j"$(nproc)"
    ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
