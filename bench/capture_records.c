/*
 * capstore-bench-capture-records: the C API's capture rate for a given set of
 * records, the peer of bench/python_capture.py (which runs it in the same
 * run with the records its forward passes captured).
 *
 * usage: capstore-bench-capture-records DIR --records N --bytes B [--dtype float32] [--shape 128,512]
 *          [--layers L] [--batch K] [--source-bytes S] [--run-id ID]
 *
 * Opens a runtime on the embedded defaults under DIR (DIR/spool, a dirstore in
 * DIR/bucket, SQLite in DIR/catalog.db: what capstore.Config.embedded sets,
 * through capstore_settings like the Python package), then captures N records
 * of B bytes with capstore_write, each with its own capture id and every text
 * field of the descriptor set (as capstore.torch does: record n is request
 * n % K of layer (n / K) % L). The payloads are read in turn from a source
 * buffer of S bytes (default: L * K * B, one forward pass of outputs), so the
 * caches see what the Python path's fresh outputs give them. Only the time
 * inside capstore_write counts for the rate; the flush after is timed apart
 * and must drain. The open is excluded.
 *
 * Output: one line of key=value pairs: records, bytes, call_s (seconds inside
 * capstore_write), call_us (per record), mb_s (10^6 bytes per second inside
 * the calls), flush_s, wall_s (first call to drained flush). Exit status 0
 * only when every call succeeded and the flush drained.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "capstore/capstore.h"
#include "capstore/settings.h"

enum { MSG_SIZE = 512, PATH_SIZE = 4096, ID_SIZE = 96 };

/* A uuid's text, as the Python Storage's session id. */
#define SESSION_ID "c0ffee00-0000-4000-8000-000000000001"

typedef struct options {
  const char *dir;
  const char *run_id;
  uint64_t record_count;
  uint64_t record_bytes;
  uint64_t source_bytes; /* 0: layer_count * batch_count * record_bytes */
  uint32_t layer_count;
  uint32_t batch_count;
  cs_dtype dtype;
  uint32_t rank;
  uint32_t shape[CS_PACK_RANK_MAX];
} options;

typedef struct result {
  uint64_t call_ns;
  uint64_t flush_ns;
  uint64_t wall_ns;
} result;

/* The wall clock in nanoseconds since 1970: the record's captured_at_ns, as Python's time.time_ns(). */
static uint64_t wall_clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int usage(const char *why) {
  fprintf(stderr,
          "capstore-bench-capture-records: %s\n"
          "usage: capstore-bench-capture-records DIR --records N --bytes B [--dtype float32] [--shape 128,512]\n"
          "         [--layers L] [--batch K] [--source-bytes S] [--run-id ID]\n",
          why);
  return 2;
}

/* "128,512" into opt->shape; 0 when it is well formed, at most CS_PACK_RANK_MAX dimensions. */
static int parse_shape(const char *text, options *opt) {
  opt->rank = 0;
  for (const char *p = text; *p != '\0';) {
    char *end;
    unsigned long long d = strtoull(p, &end, 10);
    if (end == p || d > INT32_MAX || opt->rank == CS_PACK_RANK_MAX) return -1;
    opt->shape[opt->rank++] = (uint32_t)d;
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') return -1;
  }
  return 0;
}

static int parse_options(int argc, char **argv, options *opt) {
  *opt = (options){.run_id = "bench-capture-records", .layer_count = 1, .batch_count = 1,
                   .dtype = CS_DTYPE_UINT8, .rank = 0};
  if (argc < 2 || argv[1][0] == '-') return usage("DIR is required");
  opt->dir = argv[1];
  for (int i = 2; i < argc; i += 2) {
    const char *key = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    if (value == NULL) return usage("an option lacks its value");
    if (strcmp(key, "--records") == 0) opt->record_count = strtoull(value, NULL, 10);
    else if (strcmp(key, "--bytes") == 0) opt->record_bytes = strtoull(value, NULL, 10);
    else if (strcmp(key, "--source-bytes") == 0) opt->source_bytes = strtoull(value, NULL, 10);
    else if (strcmp(key, "--layers") == 0) opt->layer_count = (uint32_t)strtoul(value, NULL, 10);
    else if (strcmp(key, "--batch") == 0) opt->batch_count = (uint32_t)strtoul(value, NULL, 10);
    else if (strcmp(key, "--run-id") == 0) opt->run_id = value;
    else if (strcmp(key, "--dtype") == 0) {
      if (cs_dtype_parse(value, strlen(value), &opt->dtype) != CS_E_OK) return usage("unknown --dtype");
    } else if (strcmp(key, "--shape") == 0) {
      if (parse_shape(value, opt) != 0) return usage("--shape is N,N,... (at most 32 dimensions)");
    } else {
      return usage("unknown option");
    }
  }
  if (opt->record_count == 0 || opt->record_bytes == 0) return usage("--records and --bytes must be > 0");
  if (opt->layer_count == 0 || opt->batch_count == 0) return usage("--layers and --batch must be > 0");
  uint64_t items = 1;
  for (uint32_t d = 0; d < opt->rank; d++) items *= opt->shape[d];
  if (opt->rank == 0 && opt->dtype == CS_DTYPE_UINT8) opt->rank = 1, opt->shape[0] = (uint32_t)opt->record_bytes;
  else if (items * cs_dtype_item_size(opt->dtype) != opt->record_bytes) return usage("--shape x --dtype != --bytes");
  if (opt->source_bytes == 0) opt->source_bytes = (uint64_t)opt->layer_count * opt->batch_count * opt->record_bytes;
  if (opt->source_bytes < opt->record_bytes) return usage("--source-bytes must hold one record");
  return 0;
}

/* Opens the runtime on the embedded defaults under opt->dir, as capstore.Config.embedded(dir) does. */
static int open_runtime(const options *opt, capstore_settings **settings, capstore **cs) {
  char msg[MSG_SIZE], path[PATH_SIZE];
  static const char *const keys[3] = {"spool_dir", "store.dir", "catalog.sqlite"};
  static const char *const leaves[3] = {"spool", "bucket", "catalog.db"};
  if (capstore_settings_new(settings) != CS_E_OK) return fprintf(stderr, "settings: no memory\n"), 1;
  for (int k = 0; k < 3; k++) {
    snprintf(path, sizeof path, "%s/%s", opt->dir, leaves[k]);
    if (capstore_settings_set(*settings, keys[k], path, msg, sizeof msg) != CS_E_OK) {
      return fprintf(stderr, "settings: %s\n", msg), 1;
    }
  }
  if (capstore_open(capstore_settings_config(*settings), cs, msg, sizeof msg) != CS_E_OK) {
    return fprintf(stderr, "open: %s\n", msg), 1;
  }
  return 0;
}

/* Record n's descriptor; its texts point into the ids buffers, which outlive the write. */
static cs_pack_meta record_meta(const options *opt, uint64_t n, char capture_id[ID_SIZE], char request_id[ID_SIZE],
                                char hook_name[ID_SIZE]) {
  uint32_t position = (uint32_t)(n % opt->batch_count);
  uint32_t layer = (uint32_t)(n / opt->batch_count % opt->layer_count);
  uint64_t pass = n / ((uint64_t)opt->batch_count * opt->layer_count);
  snprintf(capture_id, ID_SIZE, "%s-%" PRIu64, SESSION_ID, n); /* as Python's "<session>-<n>" */
  snprintf(request_id, ID_SIZE, "%s-p%" PRIu64 "-r%" PRIu32, opt->run_id, pass, position);
  snprintf(hook_name, ID_SIZE, "layers.%" PRIu32, layer);
  cs_pack_meta m = {.capture_id = cs_pack_text_of(capture_id), .tenant_id = cs_pack_text_of("default"),
                    .experiment_id = cs_pack_text_of("default"), .run_id = cs_pack_text_of(opt->run_id),
                    .session_id = cs_pack_text_of(SESSION_ID),
                    .request_id = cs_pack_text_of(request_id), .sequence_id = cs_pack_text_of(request_id),
                    .model_id = cs_pack_text_of("tiny-transformer"), .model_revision = cs_pack_text_of("seed0"),
                    .adapter_revision = cs_pack_text_of(NULL), .capture_policy_version = cs_pack_text_of("1"),
                    .hook_name = cs_pack_text_of(hook_name), .layer_number = (int32_t)layer,
                    .step_number = pass, .batch_position = position, .dtype = opt->dtype, .rank = opt->rank,
                    .captured_at_ns = wall_clock_ns()};
  memcpy(m.shape, opt->shape, sizeof m.shape);
  return m;
}

/* Captures the records, timing each capstore_write; then a flush that must drain. 0 on success. */
static int capture_all(const options *opt, capstore *cs, const unsigned char *source, result *out) {
  char msg[MSG_SIZE], capture_id[ID_SIZE], request_id[ID_SIZE], hook_name[ID_SIZE];
  uint64_t slots = opt->source_bytes / opt->record_bytes;
  uint64_t start_ns = capstore_clock_ns();
  assert(slots > 0);
  for (uint64_t n = 0; n < opt->record_count; n++) {
    cs_pack_meta m = record_meta(opt, n, capture_id, request_id, hook_name);
    const unsigned char *bytes = source + (n % slots) * opt->record_bytes;
    uint64_t t0 = capstore_clock_ns();
    int rc = capstore_write(cs, &m, bytes, opt->record_bytes, msg, sizeof msg);
    out->call_ns += capstore_clock_ns() - t0;
    if (rc != CS_E_OK) return fprintf(stderr, "write %" PRIu64 ": %s: %s\n", n, cs_strerror(rc), msg), 1;
  }
  capstore_flush_report report;
  uint64_t flush_start_ns = capstore_clock_ns();
  int rc = capstore_flush(cs, flush_start_ns + 120 * CS_SEC_NS, &report, msg, sizeof msg);
  out->flush_ns = capstore_clock_ns() - flush_start_ns;
  out->wall_ns = capstore_clock_ns() - start_ns;
  if (rc != CS_E_OK || !report.drained) return fprintf(stderr, "flush: %s: %s\n", cs_strerror(rc), msg), 1;
  return 0;
}

int main(int argc, char **argv) {
  options opt;
  if (parse_options(argc, argv, &opt) != 0) return 2;
  unsigned char *source = malloc(opt.source_bytes);
  if (source == NULL) return fprintf(stderr, "no memory for %" PRIu64 " source bytes\n", opt.source_bytes), 1;
  for (uint64_t i = 0; i < opt.source_bytes; i++) source[i] = (unsigned char)(i * 2654435761u >> 24);
  capstore_settings *settings = NULL;
  capstore *cs = NULL;
  result r = {0};
  int failed = open_runtime(&opt, &settings, &cs);
  if (!failed) failed = capture_all(&opt, cs, source, &r);
  char msg[MSG_SIZE];
  if (cs != NULL && capstore_close(cs, 30 * CS_SEC_NS, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "close: %s\n", msg), failed = 1;
  }
  if (cs != NULL) capstore_free(cs);
  if (settings != NULL) capstore_settings_free(settings);
  free(source);
  if (failed) return 1;
  double call_s = (double)r.call_ns / 1e9, bytes = (double)opt.record_count * (double)opt.record_bytes;
  printf("records=%" PRIu64 " bytes=%" PRIu64 " record_bytes=%" PRIu64 " call_s=%.6f call_us=%.2f mb_s=%.1f "
         "flush_s=%.4f wall_s=%.4f\n",
         opt.record_count, opt.record_count * opt.record_bytes, opt.record_bytes, call_s,
         call_s * 1e6 / (double)opt.record_count, bytes / 1e6 / call_s, (double)r.flush_ns / 1e9,
         (double)r.wall_ns / 1e9);
  return 0;
}
