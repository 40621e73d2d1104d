#!/usr/bin/env bash
# The installed library as a user's project meets it (issue 14): installs this
# build into a fresh prefix, builds every examples/*.c against that prefix from
# outside the source tree, through pkg-config (libcapstore.so, then libcapstore.a
# with --static) and through find_package(capstore) (examples/cmake-consumer),
# and runs each program in an empty directory: each must exit 0.
#
#   install_consumer.sh CMAKE BUILD_DIR SOURCE_DIR WORK_DIR    (CC: the compiler)
set -euo pipefail
cmake=$1 build=$2 src=$3 work=$4
cc=${CC:-cc}
fail() { echo "install_consumer: $*" >&2; exit 1; }

rm -rf "$work"
mkdir -p "$work/bin" "$work/run"
prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" || { cat "$work/install.log"; fail "install failed"; }
pc=$(find "$prefix" -name capstore.pc)
[ -n "$pc" ] || fail "no capstore.pc under $prefix"
export PKG_CONFIG_PATH="$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
libdir=$(pkg-config --variable=libdir capstore)
version=$(pkg-config --modversion capstore)

# The command and the library say the same version; the library has a SONAME.
[ "$("$prefix/bin/capstore" --version)" = "capstore $version" ] || fail "capstore --version is not 'capstore $version'"
readelf -d "$libdir/libcapstore.so" | grep -q "SONAME.*\[libcapstore\.so\.${version%.*}\]" \
  || fail "libcapstore.so's SONAME is not libcapstore.so.${version%.*}"

# libcapstore.so exports the public API only (cs_*, capstore_*): a program
# calling an internal function links against libcapstore.a and not against libcapstore.so.
exported=$(nm -D --defined-only "$libdir/libcapstore.so" | awk '{print $NF}')
[ -n "$exported" ] || fail "libcapstore.so exports nothing"
others=$(printf '%s\n' "$exported" | grep -vE '^(cs_|capstore_)' || true)
[ -z "$others" ] || fail "libcapstore.so exports symbols outside the API: $others"
internal=$(nm -g --defined-only "$libdir/libcapstore.a" | awk '$2 == "T" {print $3}' | grep -vE '^(cs_|capstore_)' | head -1)
[ -n "$internal" ] || fail "no internal function in libcapstore.a to check the hiding with"
printf 'void %s(void);\nint main(void) { %s(); return 0; }\n' "$internal" "$internal" >"$work/internal.c"
"$cc" "$work/internal.c" -o "$work/bin/internal-static" $(pkg-config --static --libs capstore | sed 's/-lcapstore\b/-l:libcapstore.a/') \
  || fail "the negative check's program did not link against libcapstore.a"
if "$cc" "$work/internal.c" -o "$work/bin/internal-shared" $(pkg-config --libs capstore) 2>/dev/null; then
  fail "libcapstore.so exports the internal function $internal"
fi
echo "ok: libcapstore.so $version exports $(printf '%s\n' "$exported" | wc -l) API symbols and hides $internal"

# run NAME: runs bin/NAME in an empty directory (examples write capstore-demo/ there);
# LINKED (shared or static) is how it must have linked libcapstore.
run() {
  local name=$1 linked=$2 dir=$work/run/$1 rc=0
  if readelf -d "$work/bin/$name" | grep -q 'NEEDED.*libcapstore\.so'; then
    [ "$linked" = shared ] || fail "$name links libcapstore.so, not libcapstore.a"
  else
    [ "$linked" = static ] || fail "$name does not link libcapstore.so"
  fi
  mkdir -p "$dir"
  (cd "$dir" && "$work/bin/$name" >"$dir.log" 2>&1) || rc=$?
  [ "$rc" -eq 0 ] || { cat "$dir.log"; fail "$name exited $rc"; }
  echo "ok: $name ($linked) ran: $(tail -1 "$dir.log")"
}

examples=("$src"/examples/*.c)
[ -e "${examples[0]}" ] || fail "no examples/*.c"
for example in "${examples[@]}"; do
  name=$(basename "$example" .c)
  # pkg-config: the shared library (found at run time through the rpath) ...
  "$cc" "$example" -o "$work/bin/$name-pc" $(pkg-config --cflags --libs capstore) -Wl,-rpath,"$libdir"
  run "$name-pc" shared
  # ... and the static one: with both installed, -lcapstore picks libcapstore.so, so name the archive.
  "$cc" "$example" -o "$work/bin/$name-pc-static" $(pkg-config --cflags capstore) \
    $(pkg-config --static --libs capstore | sed 's/-lcapstore\b/-l:libcapstore.a/')
  run "$name-pc-static" static
done

# CMake: find_package(capstore) in a project of its own (examples/cmake-consumer).
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
"$cmake" -S "$src/examples/cmake-consumer" -B "$work/cmake-consumer" "${generator[@]}" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_RUNTIME_OUTPUT_DIRECTORY="$work/bin" >"$work/cmake-consumer.log" 2>&1 \
  || { cat "$work/cmake-consumer.log"; fail "the CMake consumer did not configure"; }
"$cmake" --build "$work/cmake-consumer" >>"$work/cmake-consumer.log" 2>&1 \
  || { cat "$work/cmake-consumer.log"; fail "the CMake consumer did not build"; }
for example in "${examples[@]}"; do
  name=$(basename "$example" .c)
  run "$name" shared
  run "${name}_static" static
done
