/*
 * capstore-bench-s3: the S3 adapter's transfer rate with K requests in
 * flight (cs_store_start / cs_store_reap), for bench/run_s3.sh to set
 * against K = 1 and against curl's own parallel transfers to the same server.
 *
 * usage: capstore-bench-s3 ENDPOINT_FILE --objects N --bytes B --in-flight K
 *   ENDPOINT_FILE: "endpoint access_key secret bucket" (tools/servers/s3.sh)
 * PUTs N objects of B bytes under a fresh prefix with K in flight, then GETs
 * them back (checked byte-exact) with K in flight, then deletes them. Prints
 * one line per phase: "phase=put objects=N bytes=B in_flight=K seconds=S MBps=R".
 * Both sides send x-amz-content-sha256: UNSIGNED-PAYLOAD, as curl's peer run does.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capstore/s3.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int usage(const char *argv0) {
  fprintf(stderr, "usage: %s ENDPOINT_FILE --objects N --bytes B --in-flight K\n", argv0);
  return 2;
}

/* Runs every request with at most k in flight; returns the seconds taken, or -1 when one failed. */
static double run_all(cs_store *s, cs_store_request *reqs, uint32_t n, uint32_t k) {
  double t0 = now_s();
  uint32_t started = 0, reaped = 0, in_flight = 0;
  while (reaped < n) {
    while (started < n && in_flight < k) {
      int rc = cs_store_start(s, &reqs[started]);
      if (rc != CS_E_OK) {
        fprintf(stderr, "start %s: %s\n", reqs[started].key, cs_strerror(rc));
        return -1;
      }
      started++;
      in_flight++;
    }
    cs_store_request *done = NULL;
    int got = cs_store_reap(s, 60000, &done);
    if (got != 1) {
      fprintf(stderr, "reap: nothing in 60 s\n");
      return -1;
    }
    if (done->rc != CS_E_OK || done->res.outcome != CS_OUT_OK) {
      fprintf(stderr, "%s: %s %s\n", done->key, cs_outcome_name(done->res.outcome), done->res.detail);
      return -1;
    }
    reaped++;
    in_flight--;
  }
  return now_s() - t0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(argv[0]);
  unsigned long objects = 0, bytes = 0, k = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    unsigned long v = strtoul(argv[i + 1], NULL, 10);
    if (strcmp(argv[i], "--objects") == 0) objects = v;
    else if (strcmp(argv[i], "--bytes") == 0) bytes = v;
    else if (strcmp(argv[i], "--in-flight") == 0) k = v;
    else return usage(argv[0]);
  }
  if (objects == 0 || objects > 100000 || bytes == 0 || bytes > (256ul << 20) || k == 0 || k > 64) return usage(argv[0]);
  char endpoint[256], access_key[128], secret[128], bucket[64];
  FILE *f = fopen(argv[1], "r");
  if (!f || fscanf(f, "%255s %127s %127s %63s", endpoint, access_key, secret, bucket) != 4) {
    fprintf(stderr, "%s: not an endpoint file\n", argv[1]);
    if (f) fclose(f);
    return 2;
  }
  fclose(f);
  cs_s3_config cfg = {.endpoint = endpoint, .bucket = bucket, .access_key_id = access_key,
                      .secret_access_key = secret, .allow_insecure = true, .unsigned_payload = true,
                      .max_connections = (uint32_t)k};
  cs_store s;
  char msg[256];
  if (cs_s3_open(&cfg, &s, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "cs_s3_open: %s\n", msg);
    return 1;
  }
  uint8_t *body = malloc(bytes);
  uint8_t *back = malloc(objects * bytes);
  cs_store_request *reqs = calloc(objects, sizeof *reqs);
  char(*keys)[64] = calloc(objects, 64);
  if (!body || !back || !reqs || !keys) {
    fprintf(stderr, "out of memory\n");
    return 1;
  }
  for (unsigned long i = 0; i < bytes; i++) body[i] = (uint8_t)(i * 131 + 7);
  int status = 0;
  const char *phases[2] = {"put", "get"};
  for (int phase = 0; phase < 2 && status == 0; phase++) {
    for (unsigned long i = 0; i < objects; i++) {
      snprintf(keys[i], 64, "bench%ld/%06lu", (long)getpid(), i);
      if (phase == 0) {
        reqs[i] = (cs_store_request){.op = CS_STORE_PUT, .id = i, .key = keys[i], .bytes = body, .len = bytes};
      } else {
        reqs[i] = (cs_store_request){.op = CS_STORE_GET, .id = i, .key = keys[i], .buf = back + i * bytes,
                                     .cap = bytes};
      }
    }
    double seconds = run_all(&s, reqs, (uint32_t)objects, (uint32_t)k);
    if (seconds < 0) {
      status = 1;
      break;
    }
    for (unsigned long i = 0; phase == 1 && i < objects; i++) {
      if (reqs[i].got != bytes || memcmp(back + i * bytes, body, bytes) != 0) {
        fprintf(stderr, "%s: the bytes read back differ\n", keys[i]);
        status = 1;
      }
    }
    printf("phase=%s objects=%lu bytes=%lu in_flight=%lu seconds=%.4f MBps=%.2f\n", phases[phase], objects, bytes, k,
           seconds, (double)objects * (double)bytes / seconds / 1e6);
  }
  for (unsigned long i = 0; i < objects; i++) reqs[i] = (cs_store_request){.op = CS_STORE_DEL, .key = keys[i]};
  if (run_all(&s, reqs, (uint32_t)objects, (uint32_t)k) < 0) status = 1;
  s.ops->close(s.self);
  free(body);
  free(back);
  free(reqs);
  free(keys);
  return status;
}
