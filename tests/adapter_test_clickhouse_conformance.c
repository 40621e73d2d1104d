/*
 * The catalog conformance suite (tests/conformance_catalog.h) against the
 * ClickHouse adapter on the live server of the ctest fixture. argv[1] names
 * the fixture's endpoint file. Every case gets fresh tables (a new prefix).
 *
 * With `--cluster DIR` (tools/servers/ch_cluster.sh's directory) the suite
 * runs on a replicated catalog: each case's catalog is opened on the next
 * replica and its second connection on the replica after that, so every
 * two-connection case (rival claims, fences, late rows) crosses replicas.
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

#define REPLICAS_MAX 9

typedef struct ch_ctx {
  char urls[REPLICAS_MAX][256];
  unsigned url_count, next_url;
  char user[64];
  char password[128];
  char cluster[64]; /* "" for one server */
  unsigned replicas;
  unsigned seq;
  char prefix[64];
} ch_ctx;

static cs_catalog *open_prefix(ch_ctx *ctx, const char *prefix) {
  const char *url = ctx->urls[ctx->next_url++ % ctx->url_count];
  cs_clickhouse_config cfg = {.url = url, .user = ctx->user, .password = ctx->password,
                              .table_prefix = prefix, .holder = "conformance",
                              .connect_timeout_ns = 2 * CS_SEC_NS, .request_timeout_ns = 10 * CS_SEC_NS,
                              .allow_insecure = true};
  if (ctx->cluster[0] != '\0') {
    cfg.cluster = ctx->cluster;
    cfg.insert_quorum = ctx->replicas; /* every replica (docs/catalog-protocol.md) */
  }
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

static bool read_endpoint(const char *path, ch_ctx *ctx, unsigned k) {
  FILE *f = fopen(path, "r");
  unsigned port = 0;
  bool ok = f != NULL && fscanf(f, "%u %63s %127s", &port, ctx->user, ctx->password) == 3;
  if (f != NULL) fclose(f);
  if (ok) snprintf(ctx->urls[k], sizeof ctx->urls[k], "http://127.0.0.1:%u/", port);
  return ok;
}

static bool read_cluster(const char *dir, ch_ctx *ctx) {
  char path[512];
  snprintf(path, sizeof path, "%s/cluster", dir);
  FILE *f = fopen(path, "r");
  bool ok = f != NULL && fscanf(f, "%63s %u", ctx->cluster, &ctx->replicas) == 2 && ctx->replicas >= 1 &&
            ctx->replicas <= REPLICAS_MAX;
  if (f != NULL) fclose(f);
  for (unsigned k = 0; ok && k < ctx->replicas; k++) {
    snprintf(path, sizeof path, "%s/r%u/endpoint", dir, k + 1);
    ok = read_endpoint(path, ctx, k);
  }
  ctx->url_count = ctx->replicas;
  return ok;
}

int main(int argc, char **argv) {
  static ch_ctx ctx;
  bool cluster = argc == 3 && strcmp(argv[1], "--cluster") == 0;
  bool ok = cluster ? read_cluster(argv[2], &ctx) : argc == 2 && read_endpoint(argv[1], &ctx, 0);
  if (!ok) {
    fprintf(stderr, "usage: %s ENDPOINT_FILE (tools/servers/clickhouse.sh start) | --cluster DIR "
                    "(tools/servers/ch_cluster.sh start)\n", argv[0]);
    return 1;
  }
  if (!cluster) ctx.url_count = 1;
  curl_global_init(CURL_GLOBAL_DEFAULT);
  /*
   * ClickHouse 18.16's only clock is now(), in whole seconds: the suite sizes
   * the TTLs and waits of its expiry cases from that (clock_resolution_ns).
   * Every case runs; a new one runs here by default.
   */
  conformance_catalog_backend backend = {.open_fn = open_fresh, .close_fn = close_catalog,
                                         .reopen_fn = reopen, .close_second_fn = close_catalog,
                                         .clock_resolution_ns = CS_SEC_NS, .ctx = &ctx};
  int failed = conformance_catalog_run_backend(cluster ? "clickhouse_cluster" : "clickhouse", &backend);
  curl_global_cleanup();
  return failed;
}
