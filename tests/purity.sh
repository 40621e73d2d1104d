#!/bin/sh
# The cores reference no clock, random, file, socket, thread, allocation or
# curl symbol. Inspects the core library's undefined symbols with nm.
set -u
lib=$1
srcdir=${2:-}
# Negative twin: the same check must refuse an archive that calls malloc and clock_gettime.
if [ "${3:-}" != "--no-selftest" ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  printf '#include <stdlib.h>\n#include <time.h>\nvoid *bad(void);\nvoid *bad(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return malloc((size_t)t.tv_nsec); }\n' > "$tmp/bad.c"
  cc -D_POSIX_C_SOURCE=200809L -c "$tmp/bad.c" -o "$tmp/bad.o" && ar rcs "$tmp/libbad.a" "$tmp/bad.o"
  if sh "$0" "$tmp/libbad.a" "" --no-selftest >/dev/null 2>&1; then
    echo "purity check accepted an archive calling malloc and clock_gettime"; exit 1
  fi
fi
undef=$(nm -u "$lib" | grep -v ':$' | awk 'NF {print $NF}' | sed 's/@.*//' | sort -u)
banned='^(time|clock|clock_gettime|gettimeofday|rand|random|srand|srandom|drand48|getrandom|arc4random|rand_r|fopen|fclose|fread|fwrite|fprintf|printf|puts|open|openat|close|read|write|pread|pwrite|fsync|fdatasync|unlink|rename|link|mkdir|stat|fstat|socket|connect|bind|listen|accept|send|recv|select|poll|epoll_wait|sleep|usleep|nanosleep|malloc|calloc|realloc|free|aligned_alloc|posix_memalign|mmap|munmap|pthread_.*|thrd_.*|mtx_.*|cnd_.*|curl_.*|cuda.*|abort|exit|getenv|signal|raise)$'
hits=$(printf '%s\n' "$undef" | grep -E "$banned")
if [ -n "$hits" ]; then
  echo "core objects reference banned symbols:"; printf '  %s\n' $hits; exit 1
fi
allowed='^(memcpy|memset|memmove|memcmp|memchr|strlen|strnlen|strcmp|strncmp|strcspn|snprintf|__assert_fail|__stack_chk_fail|__.*san.*|__ubsan_.*|__asan_.*|__sancov.*|__sanitizer.*|_GLOBAL_OFFSET_TABLE_)$'
others=$(printf '%s\n' "$undef" | grep -vE "$allowed" | grep -v '^cs_' | grep -v '^$')
if [ -n "$others" ]; then
  echo "core objects reference symbols outside the allowed set (review and allow, or remove):"; printf '  %s\n' $others; exit 1
fi
# No mutable static state: every core object's state lives in memory its caller gives.
# (.data.rel.ro holds const tables of pointers: read-only after relocation, allowed.)
# Only object symbols count: section symbols (sanitizer builds have them) do not.
state=$(objdump -t "$lib" | grep -E '[[:space:]]O[[:space:]]+\.(data|bss)[[:space:]]' | awk '{print $NF}')
if [ -n "$state" ]; then echo "core objects hold mutable static state:"; printf '  %s\n' $state; exit 1; fi
# No inline assembly (rdtsc and friends are clocks too).
if [ -n "$srcdir" ] && grep -rnE '\b(asm|__asm__|__rdtsc|__builtin_ia32_rdtsc|__builtin_readcyclecounter)\b' "$srcdir"; then
  echo "inline assembly or cycle counters in the cores"; exit 1
fi
echo "purity: $(printf '%s\n' "$undef" | grep -c .) undefined symbols, all allowed: $(printf '%s ' $undef)"
