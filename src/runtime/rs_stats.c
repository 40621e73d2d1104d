/*
 * The runtime's stats as JSON and as Prometheus text exposition. One table
 * of metrics serves both, so the two never disagree. No secret is part of
 * the stats (the last errors name operations and keys, never credentials).
 */
#include "rs_internal.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct metric {
  const char *name;
  const char *help;
  bool counter; /* else a gauge */
  uint64_t value;
} metric;

/* Appends to buf like snprintf, keeping the length the whole text needs. */
typedef struct out {
  char *buf;
  size_t size, len;
} out;

static void put(out *o, const char *format, ...) __attribute__((format(printf, 2, 3)));
static void put(out *o, const char *format, ...) {
  va_list args;
  va_start(args, format);
  size_t room = o->len < o->size ? o->size - o->len : 0;
  int n = vsnprintf(room > 0 ? o->buf + o->len : NULL, room, format, args);
  va_end(args);
  if (n > 0) o->len += (size_t)n;
}

/* A JSON string: quotes, backslashes and control bytes escaped. */
static void put_json_text(out *o, const char *text) {
  put(o, "\"");
  for (const unsigned char *p = (const unsigned char *)text; *p != '\0'; p++) {
    if (*p == '"' || *p == '\\') put(o, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f) put(o, "\\u%04x", *p);
    else put(o, "%c", *p);
  }
  put(o, "\"");
}

static uint32_t metrics_of(const capstore_stats *s, metric *m) {
  const cs_snapshot *v = &s->service;
  const cs_capture_stats *c = &s->capture;
  uint32_t n = 0;
#define M(name, help, counter, value) m[n++] = (metric){name, help, counter, (uint64_t)(value)}
  M("records_captured", "records the sink admitted", true, s->captured_records);
  M("records_written", "records in sealed packs", true, c->records_written);
  M("records_dropped", "records admitted but in no sealed pack", true, c->records_dropped);
  M("capture_refused_full", "capture calls refused by the spool quota", true, c->sink.refused_full);
  M("capture_refused_disk_full", "capture calls refused because the spool's file system was full", true,
    c->disk_full_refused);
  M("disk_full_waits", "times the writer waited for file system room for a pack it was writing (no record lost)", true,
    c->disk_full_waits);
  M("packs_sealed", "packs sealed by this sink", true, c->packs_sealed);
  M("bytes_sealed", "bytes of the packs sealed", true, c->bytes_sealed);
  M("spool_bytes", "spool quota in use", false, c->sink.spool_bytes);
  M("spool_packs", "packs in the spool", false, c->sink.spool_packs);
  M("spool_recovery_quarantined", "packs the spool check at open found corrupt and quarantined", false,
    c->recovery.quarantined);
  M("spool_recovery_kept", "ready packs the spool check at open kept unsettled (unreadable, out of memory, or corrupt "
    "with the quarantine refused): never shipped, checked again at the next open", false, c->recovery.kept);
  M("spool_recovery_kept_bytes", "bytes of those packs, counted against the quota", false, c->recovery.kept_bytes);
  M("packs_spooled", "packs the service knows of", true, v->spooled);
  M("packs_uploaded", "verified uploads", true, v->uploaded);
  M("packs_indexed", "packs confirmed in the catalog", true, v->indexed);
  M("packs_handed_off", "packs removed from the spool", true, v->handed_off);
  M("packs_pending_index", "packs owed to the catalog", false, v->pending_index);
  M("packs_pending_spool", "packs not yet handed off", false, v->pending_spool);
  M("packs_set_aside", "packs set aside", true, v->set_aside);
  M("packs_outside_table", "packs sealed in the spool waiting outside the service's table (a flush counts them missing)",
    false, v->backlog);
  M("batch_splits", "index batches halved", true, v->batch_splits);
  M("upload_mismatches", "HEADs that showed other bytes under a pack's key (a torn upload): the pack was sent again",
    true, v->upload_mismatches);
  M("reconcile_passes", "reconcile passes", true, v->reconcile_passes);
  M("reconcile_adopted", "packs adopted by reconcile", true, v->reconcile_adopted);
  M("reconcile_skipped", "keys skipped by reconcile", true, v->reconcile_skipped);
  M("reconcile_head_errors", "failed HEADs during reconcile", true, v->reconcile_head_errors);
  M("reconcile_list_errors", "refused LISTs during reconcile", true, v->reconcile_list_errors);
  M("cycles", "service cycles", true, v->cycles);
  M("cycles_failed", "failed service cycles", true, v->cycles_failed);
  M("fenced_out", "indexed packs the catalog did not confirm", true, v->fenced_out);
  M("requests_inflight", "requests in flight", false, v->inflight);
  M("lease_state", "0 none, 1 claiming, 2 held, 3 busy, 4 quarantined, 5 released", false, v->lease_state);
  M("lease_term", "the lease term held or last seen", false, v->lease_term);
  M("lease_renewals", "lease renewals", true, v->lease_renewals);
  M("watermark", "highest published version seen", false, v->watermark);
  M("oldest_unshipped_age_ns", "age of the oldest pack not yet handed off", false, v->oldest_unshipped_age_ns);
  M("store_requests", "object store primitives sent", true, s->store_requests);
  M("catalog_requests", "catalog primitives sent", true, s->catalog_requests);
  M("bytes_uploaded", "pack bytes uploaded", true, s->bytes_uploaded);
  M("descriptors_indexed", "descriptor rows sent by INDEX answered OK", true, s->descriptors_indexed);
  M("footer_errors", "packs whose footer could not be read for INDEX", true, s->footer_errors);
  M("footer_cache_hits", "INDEX footers parsed already while their packs uploaded", true, s->footer_cache_hits);
  M("engine_failures", "failed engine steps", true, s->engine_failures);
  M("arrivals_admitted", "serving: packs capture processes handed in, verified and taken", true, c->admitted_packs);
  M("arrivals_admitted_bytes", "serving: their bytes", true, c->admitted_bytes);
  M("arrivals_quarantined", "serving: handed-in packs found corrupt and quarantined", true, c->admit_quarantined);
  M("arrivals_errors", "serving: handed-in packs that could not be read yet (tried again)", true, c->admit_errors);
  M("arrivals_set_aside", "serving: handed-in packs that verified but cannot ship (no records): quarantined", true,
    s->arrivals_set_aside);
  M("adopted_spools", "serving: private spools of capture processes that died, taken over", true, s->adopted_spools);
  M("handoff_linked", "capture role: packs handed to capstore serve", true, s->handoff_linked);
  M("handoff_shipped", "capture role: handed packs capstore serve shipped", true, s->handoff_shipped);
  M("handoff_rejected", "capture role: handed packs capstore serve set aside", true, s->handoff_rejected);
  M("handoff_waiting", "capture role: sealed packs not yet shipped by capstore serve", false, s->handoff_waiting);
#undef M
  return n;
}

#define METRICS_MAX 64u

size_t capstore_stats_json(capstore *cs, char *buf, size_t size) {
  capstore_stats s;
  capstore_stats_get(cs, &s);
  metric m[METRICS_MAX];
  uint32_t n = metrics_of(&s, m);
  out o = {buf, size, 0};
  put(&o, "{");
  for (uint32_t i = 0; i < n; i++) put(&o, "\"%s\":%" PRIu64 ",", m[i].name, m[i].value);
  put(&o, "\"lease\":");
  put_json_text(&o, cs_lease_state_name(s.service.lease_state));
  put(&o, ",\"last_error\":");
  put_json_text(&o, s.service.last_error);
  put(&o, ",\"engine_last_error\":");
  put_json_text(&o, s.engine_last_error);
  put(&o, ",\"spool_recovery_problem\":");
  put_json_text(&o, s.capture.recovery.problem);
  put(&o, "}");
  if (size > 0 && o.len >= size) buf[size - 1] = '\0';
  return o.len;
}

size_t capstore_stats_prometheus(capstore *cs, char *buf, size_t size) {
  capstore_stats s;
  capstore_stats_get(cs, &s);
  metric m[METRICS_MAX];
  uint32_t n = metrics_of(&s, m);
  out o = {buf, size, 0};
  for (uint32_t i = 0; i < n; i++) {
    const char *suffix = m[i].counter ? "_total" : "";
    put(&o, "# HELP capstore_%s%s %s\n# TYPE capstore_%s%s %s\ncapstore_%s%s %" PRIu64 "\n", m[i].name, suffix,
        m[i].help, m[i].name, suffix, m[i].counter ? "counter" : "gauge", m[i].name, suffix, m[i].value);
  }
  if (size > 0 && o.len >= size) buf[size - 1] = '\0';
  return o.len;
}
