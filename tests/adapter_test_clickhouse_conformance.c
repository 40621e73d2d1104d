/*
 * The catalog conformance suite (tests/conformance_catalog.h) against the
 * ClickHouse adapter on the live server of the ctest fixture. argv[1] names
 * the fixture's endpoint file. Every case gets fresh tables (a new prefix).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "capstore/clickhouse.h"
#include "conformance_catalog.h"

typedef struct ch_ctx {
  char url[256];
  char user[64];
  char password[128];
  unsigned seq;
  char prefix[64];
} ch_ctx;

static cs_catalog *open_prefix(ch_ctx *ctx, const char *prefix) {
  cs_clickhouse_config cfg = {.url = ctx->url, .user = ctx->user, .password = ctx->password,
                              .table_prefix = prefix, .holder = "conformance",
                              .connect_timeout_ns = 2 * CS_SEC_NS, .request_timeout_ns = 10 * CS_SEC_NS,
                              .allow_insecure = true};
  cs_catalog *cat = calloc(1, sizeof *cat);
  if (cat == NULL || cs_clickhouse_open(&cfg, cat) != CS_E_OK) {
    free(cat);
    return NULL;
  }
  return cat;
}

static cs_catalog *open_fresh(void *arg) {
  ch_ctx *ctx = arg;
  snprintf(ctx->prefix, sizeof ctx->prefix, "conf%ld_%ld_%u", (long)time(NULL), (long)getpid(), ++ctx->seq);
  return open_prefix(ctx, ctx->prefix);
}

static void close_catalog(cs_catalog *cat, void *arg) {
  (void)arg;
  if (cat == NULL) return;
  cat->ops->close(cat->self);
  free(cat);
}

/* A second connection on the same tables. */
static cs_catalog *reopen(cs_catalog *first, void *arg) {
  (void)first;
  ch_ctx *ctx = arg;
  return open_prefix(ctx, ctx->prefix);
}

int main(int argc, char **argv) {
  static ch_ctx ctx;
  FILE *f = argc < 2 ? NULL : fopen(argv[1], "r");
  unsigned port = 0;
  if (f == NULL || fscanf(f, "%u %63s %127s", &port, ctx.user, ctx.password) != 3) {
    fprintf(stderr, "usage: %s ENDPOINT_FILE (written by tools/servers/clickhouse.sh start)\n", argv[0]);
    if (f != NULL) fclose(f);
    return 1;
  }
  fclose(f);
  snprintf(ctx.url, sizeof ctx.url, "http://127.0.0.1:%u/", port);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  /*
   * ClickHouse 18.16's only clock is now(), in whole seconds: the suite sizes
   * the TTLs and waits of its expiry cases from that (clock_resolution_ns).
   * Every case runs; a new one runs here by default.
   */
  conformance_catalog_backend backend = {.open_fn = open_fresh, .close_fn = close_catalog,
                                         .reopen_fn = reopen, .close_second_fn = close_catalog,
                                         .clock_resolution_ns = CS_SEC_NS, .ctx = &ctx};
  int failed = conformance_catalog_run_backend("clickhouse", &backend);
  curl_global_cleanup();
  return failed;
}
