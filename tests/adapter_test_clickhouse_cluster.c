/*
 * The replicated catalog's races (issue 18), on a live cluster of three
 * ClickHouse 18.16 replicas and ZooKeeper (tools/servers/ch_cluster.sh):
 *
 *   adapter_test_clickhouse_cluster CLUSTER_DIR CH_CLUSTER_SH
 *
 * Each case drives the adapter (capstore/clickhouse.h) on chosen replicas and
 * steers the cluster with the script (a replica down, ZooKeeper down) and with
 * SYSTEM STOP/START FETCHES (a replica that lags). What each asserts is the
 * outcome docs/catalog-protocol.md ("Replicated catalog") promises: claimants
 * on different replicas never both hold a term; a released holder's write
 * through a lagging replica never lands; a quorum write that timed out and
 * lands late is seen by the next holder before it reads the watermark, so no
 * version is published twice; writes go on with one replica of three down
 * (quorum 2) and are refused, not lost, without ZooKeeper.
 */
#include <pthread.h>
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

#include "capstore/capstore.h"
#include "capstore/clickhouse.h"

#define REPLICAS 3

static struct {
  char dir[512];
  char script[512];
  unsigned ports[REPLICAS];
  char user[64];
  char password[128];
  char cluster[64];
  unsigned seq;
} g;

static void sleep_ms(unsigned ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* ---- the cluster ------------------------------------------------------------------------------- */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *user) {
  char *out = user;
  size_t have = strlen(out), n = size * nmemb;
  size_t room = 4095 - have;
  memcpy(out + have, ptr, n < room ? n : room);
  out[have + (n < room ? n : room)] = '\0';
  return n;
}

/* One statement on replica k (0-based) outside the adapter; the answer's text in out (4096 bytes). */
static long sql(unsigned k, const char *query, char *out) {
  char url[128], user[128], key[192];
  snprintf(url, sizeof url, "http://127.0.0.1:%u/", g.ports[k]);
  snprintf(user, sizeof user, "X-ClickHouse-User: %s", g.user);
  snprintf(key, sizeof key, "X-ClickHouse-Key: %s", g.password);
  out[0] = '\0';
  CURL *c = curl_easy_init();
  struct curl_slist *h = curl_slist_append(curl_slist_append(NULL, user), key);
  curl_easy_setopt(c, CURLOPT_URL, url);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, query);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
  long status = 0;
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return status;
}

static void sql_ok(unsigned k, const char *query) {
  char out[4096];
  long status = sql(k, query, out);
  if (status != 200) fprintf(stderr, "replica %u: %s -> %ld %s\n", k + 1, query, status, out);
  assert_int_equal(status, 200);
}

static void script(const char *verb, unsigned replica) {
  char cmd[1200];
  if (replica == 0) snprintf(cmd, sizeof cmd, "'%s' %s '%s'", g.script, verb, g.dir);
  else snprintf(cmd, sizeof cmd, "'%s' %s '%s' %u", g.script, verb, g.dir, replica);
  assert_int_equal(system(cmd), 0);
}

static void fetches(unsigned k, bool on) { sql_ok(k, on ? "SYSTEM START FETCHES" : "SYSTEM STOP FETCHES"); }

/* Replica k stops or starts fetching one table of the prefix's ("publishes", ...). */
static void table_fetches(unsigned k, const char *prefix, const char *table, bool on) {
  char q[256];
  snprintf(q, sizeof q, "SYSTEM %s FETCHES %s_%s_v%u", on ? "START" : "STOP", prefix, table, CS_CATALOG_SCHEMA_VERSION);
  sql_ok(k, q);
}

/* Replica k has every part of the prefix's tables that any replica has (before it is made to lag). */
static void sync_replica(unsigned k, const char *prefix) {
  static const char *const tables[] = {"claims", "descriptors", "inventory", "publishes", "rejected"};
  for (unsigned i = 0; i < 5; i++) {
    char q[256];
    snprintf(q, sizeof q, "SYSTEM SYNC REPLICA %s_%s_v%u", prefix, tables[i], CS_CATALOG_SCHEMA_VERSION);
    sql_ok(k, q);
  }
}

/* ---- the adapter ------------------------------------------------------------------------------- */

typedef struct opened {
  cs_catalog cat;
  bool open;
} opened;

/* An adapter on replica k, tables <prefix>_*; quorum 0 means all replicas. */
static void open_on(opened *o, unsigned k, const char *prefix, uint32_t quorum, const char *cluster) {
  char url[128];
  snprintf(url, sizeof url, "http://127.0.0.1:%u/", g.ports[k]);
  cs_clickhouse_config cfg = {.url = url, .user = g.user, .password = g.password, .table_prefix = prefix,
                              .holder = "cluster-test", .connect_timeout_ns = 2 * CS_SEC_NS,
                              .request_timeout_ns = 10 * CS_SEC_NS, .allow_insecure = true,
                              .cluster = cluster, .insert_quorum = cluster == NULL ? 0 : quorum,
                              .insert_quorum_timeout_ns = cluster == NULL ? 0 : CS_SEC_NS};
  if (cluster != NULL && quorum == 0) cfg.insert_quorum = REPLICAS; /* every replica (docs: why not a majority) */
  assert_int_equal(cs_clickhouse_open(&cfg, &o->cat), CS_E_OK);
  o->open = true;
}

static void close_on(opened *o) {
  if (o->open) o->cat.ops->close(o->cat.self);
  o->open = false;
}

static void fresh_prefix(char *out, size_t cap) {
  snprintf(out, cap, "cl%ld_%ld_%u", (long)time(NULL), (long)getpid(), ++g.seq);
}

static cs_catalog_result ensure(opened *o) {
  cs_catalog_result res;
  assert_int_equal(o->cat.ops->schema_ensure(o->cat.self, &res), CS_E_OK);
  return res;
}

static cs_catalog_result head(opened *o, const cs_uuid *lease, cs_cat_head *out) {
  cs_catalog_result res;
  assert_int_equal(o->cat.ops->head(o->cat.self, lease, out, &res), CS_E_OK);
  return res;
}

static cs_catalog_result claim(opened *o, const cs_uuid *lease, uint64_t base, uint64_t ttl_ns) {
  cs_catalog_result res;
  assert_int_equal(o->cat.ops->claim(o->cat.self, lease, base, ttl_ns, &res), CS_E_OK);
  return res;
}

static cs_catalog_result read_claims(opened *o, const cs_uuid *lease, uint64_t term, cs_claims *out) {
  cs_catalog_result res;
  assert_int_equal(o->cat.ops->read_claims(o->cat.self, lease, term, out, &res), CS_E_OK);
  return res;
}

static cs_catalog_result publish(opened *o, const cs_uuid *lease, uint64_t version, uint64_t term) {
  cs_catalog_result res;
  assert_int_equal(o->cat.ops->publish(o->cat.self, lease, 0, version, term, 1, &res), CS_E_OK);
  return res;
}

static cs_uuid lease_of(uint8_t tag) {
  cs_uuid id;
  memset(&id, 0, sizeof id);
  id.bytes[0] = tag;
  id.bytes[6] = 0x70; /* version 7 */
  id.bytes[8] = 0x80; /* variant */
  id.bytes[15] = (uint8_t)g.seq;
  return id;
}

/* The head is free for `lease` and its claim at head + 1 is the sole one: the term it holds. */
static uint64_t acquire(opened *o, const cs_uuid *lease, uint64_t ttl_ns, cs_claims *claims) {
  cs_cat_head h;
  assert_int_equal(head(o, lease, &h).outcome, CS_OUT_OK);
  assert_true(h.head_free);
  assert_int_equal(claim(o, lease, h.head_term, ttl_ns).outcome, CS_OUT_OK);
  cs_catalog_result res = read_claims(o, lease, h.head_term + 1, claims);
  if (res.outcome != CS_OUT_OK) fprintf(stderr, "read_claims: %s\n", res.detail);
  assert_int_equal(res.outcome, CS_OUT_OK);
  assert_true(claims->sole_mine);
  return h.head_term + 1;
}

/* Tries head, claim and read_claims every 200 ms for up to `seconds`: the term held, or 0. */
static uint64_t acquire_within(opened *o, const cs_uuid *lease, unsigned seconds, cs_claims *claims) {
  for (unsigned i = 0; i < seconds * 5; i++) {
    sleep_ms(200);
    cs_cat_head h;
    if (head(o, lease, &h).outcome != CS_OUT_OK || !h.head_free) continue;
    if (claim(o, lease, h.head_term, 30 * CS_SEC_NS).outcome != CS_OUT_OK) continue;
    if (read_claims(o, lease, h.head_term + 1, claims).outcome == CS_OUT_OK && claims->sole_mine)
      return h.head_term + 1;
  }
  return 0;
}

/* Versions published more than once (barrier rows, version 0, aside), read on replica k. */
static unsigned duplicate_versions(unsigned k, const char *prefix) {
  char q[512], out[4096];
  snprintf(q, sizeof q,
           "SELECT count() FROM (SELECT version, count() AS n FROM %s_publishes_v%u WHERE version > 0 "
           "GROUP BY version HAVING n > 1) SETTINGS select_sequential_consistency = 0",
           prefix, CS_CATALOG_SCHEMA_VERSION);
  assert_int_equal(sql(k, q, out), 200);
  return (unsigned)strtoul(out, NULL, 10);
}

/* ---- cases -------------------------------------------------------------------------------------- */

/* A quorum that is not a majority, a cluster the servers do not know, tables of the other kind: refused. */
static void test_settings_refused(void **state) {
  (void)state;
  char prefix[64], single[64];
  fresh_prefix(prefix, sizeof prefix);
  opened o = {0};
  open_on(&o, 0, prefix, 2, g.cluster); /* 2 of 3: a majority is not enough on 18.16 */
  cs_catalog_result res = ensure(&o);
  assert_int_equal(res.outcome, CS_OUT_INVALID);
  assert_non_null(strstr(res.detail, "must be all"));
  close_on(&o);
  open_on(&o, 0, prefix, 4, g.cluster); /* 4 of 3 */
  assert_int_equal(ensure(&o).outcome, CS_OUT_INVALID);
  close_on(&o);
  open_on(&o, 0, prefix, 3, "no_such_cluster");
  res = ensure(&o);
  assert_int_equal(res.outcome, CS_OUT_INVALID);
  assert_non_null(strstr(res.detail, "remote_servers"));
  close_on(&o);

  /* Replicated tables, then a client without the settings: refused before any statement of the protocol. */
  open_on(&o, 0, prefix, 0, g.cluster);
  assert_int_equal(ensure(&o).outcome, CS_OUT_OK);
  close_on(&o);
  opened plain = {0};
  open_on(&plain, 1, prefix, 0, NULL);
  res = ensure(&plain);
  assert_int_equal(res.outcome, CS_OUT_INVALID);
  assert_non_null(strstr(res.detail, "replicated"));
  close_on(&plain);
  /* One server's tables (made on replica 1 alone), then a replicated client there: refused too. */
  fresh_prefix(single, sizeof single);
  open_on(&plain, 0, single, 0, NULL);
  assert_int_equal(ensure(&plain).outcome, CS_OUT_OK);
  close_on(&plain);
  open_on(&o, 0, single, 0, g.cluster);
  res = ensure(&o);
  assert_int_equal(res.outcome, CS_OUT_INVALID);
  assert_non_null(strstr(res.detail, "not replicated"));
  close_on(&o);
}

/* A search by a reader on replica k with or without the cluster's settings: its status, msg in msg. */
static int reader_search(unsigned k, const char *prefix, bool with_cluster, char *msg, size_t msg_size) {
  char url[128], store[] = "/tmp/capstore-cluster-store-XXXXXX";
  snprintf(url, sizeof url, "http://127.0.0.1:%u/", g.ports[k]);
  assert_non_null(mkdtemp(store));
  capstore_config cfg = {0};
  capstore_config_default(&cfg);
  cfg.name = prefix;
  cfg.store_dir = store;
  cfg.clickhouse_url = url;
  cfg.clickhouse_user = g.user;
  cfg.clickhouse_password = g.password;
  cfg.clickhouse_allow_insecure = true;
  if (with_cluster) {
    cfg.clickhouse_cluster = g.cluster;
    cfg.clickhouse_insert_quorum = REPLICAS;
  }
  capstore_reader *r = NULL;
  int rc = capstore_reader_open(&cfg, &r, msg, msg_size);
  if (rc == CS_E_OK) {
    capstore_selection sel = {0};
    cs_search_filter filter = {0};
    rc = capstore_search(r, &filter, "", 16, &sel, msg, msg_size);
    capstore_selection_free(&sel);
    capstore_reader_free(r);
  }
  rmdir(store);
  return rc;
}

/* A reader without the cluster's settings is refused before its first query; with them it reads. */
static void test_reader_settings_checked(void **state) {
  (void)state;
  char prefix[64], msg[512];
  fresh_prefix(prefix, sizeof prefix);
  opened o = {0};
  open_on(&o, 0, prefix, 0, g.cluster);
  assert_int_equal(ensure(&o).outcome, CS_OUT_OK);
  close_on(&o);
  assert_int_equal(reader_search(2, prefix, false, msg, sizeof msg), CS_E_CONFIG);
  assert_non_null(strstr(msg, "replicated"));
  assert_int_equal(reader_search(2, prefix, true, msg, sizeof msg), CS_E_OK);
}

typedef struct claimant {
  opened *o;
  cs_uuid lease;
  uint64_t base;
  pthread_barrier_t *start;
  cs_outcome claimed;
} claimant;

static void *claim_thread(void *arg) {
  claimant *c = arg;
  pthread_barrier_wait(c->start);
  cs_catalog_result res;
  c->o->cat.ops->claim(c->o->cat.self, &c->lease, c->base, 2 * CS_SEC_NS, &res);
  c->claimed = res.outcome;
  return NULL;
}

/* Two claimants on two replicas at the same moment: never both sole holders; the study saw 49 of 50 without. */
static void test_simultaneous_claims_on_two_replicas(void **state) {
  (void)state;
  char prefix[64];
  fresh_prefix(prefix, sizeof prefix);
  opened a = {0}, b = {0};
  open_on(&a, 0, prefix, 0, g.cluster);
  open_on(&b, 1, prefix, 0, g.cluster);
  assert_int_equal(ensure(&a).outcome, CS_OUT_OK);
  assert_int_equal(ensure(&b).outcome, CS_OUT_OK);
  unsigned trials = 12, one_winner = 0, contested_refused = 0;
  for (unsigned t = 0; t < trials; t++) {
    cs_uuid la = lease_of((uint8_t)(0x10 + t)), lb = lease_of((uint8_t)(0x90 + t));
    cs_cat_head h;
    uint64_t base = 0;
    for (unsigned wait = 0; wait < 100; wait++) { /* the last trial's claims expire (2 s, the 1-s clock) */
      assert_int_equal(head(&a, &la, &h).outcome, CS_OUT_OK);
      if (h.head_free) break;
      sleep_ms(100);
    }
    assert_true(h.head_free);
    base = h.head_term;
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    claimant ca = {.o = &a, .lease = la, .base = base, .start = &start};
    claimant cb = {.o = &b, .lease = lb, .base = base, .start = &start};
    pthread_t ta, tb;
    pthread_create(&ta, NULL, claim_thread, &ca);
    pthread_create(&tb, NULL, claim_thread, &cb);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    pthread_barrier_destroy(&start);
    /* Each asks on its own replica whether it holds the term. */
    cs_claims xa, xb;
    cs_catalog_result ra = read_claims(&a, &la, base + 1, &xa), rb = read_claims(&b, &lb, base + 1, &xb);
    bool a_holds = ra.outcome == CS_OUT_OK && xa.sole_mine, b_holds = rb.outcome == CS_OUT_OK && xb.sole_mine;
    assert_false(a_holds && b_holds);
    one_winner += a_holds || b_holds;
    contested_refused += ca.claimed == CS_OUT_REFUSED || cb.claimed == CS_OUT_REFUSED;
  }
  printf("simultaneous claims on two replicas: %u trials, %u with one holder, none with two; %u with a claim "
         "refused (286, an earlier quorum write pending)\n",
         trials, one_winner, contested_refused);
  assert_true(one_winner >= trials / 2); /* no livelock: a term is usually won */
  close_on(&a);
  close_on(&b);
}

/*
 * A holder releases through replica 1 while replica 2 lags: the release is
 * not confirmed (319) and nobody may take the term until it lands; once it
 * has, the old holder's publish through replica 2 never lands.
 */
static void test_release_then_write_through_lagging_replica(void **state) {
  (void)state;
  char prefix[64];
  fresh_prefix(prefix, sizeof prefix);
  opened r1 = {0}, r2 = {0}, r3 = {0};
  open_on(&r1, 0, prefix, 0, g.cluster);
  open_on(&r2, 1, prefix, 0, g.cluster);
  open_on(&r3, 2, prefix, 0, g.cluster);
  assert_int_equal(ensure(&r1).outcome, CS_OUT_OK);
  cs_uuid lease = lease_of(0x21), other = lease_of(0x22);
  cs_claims claims;
  uint64_t term = acquire(&r1, &lease, 30 * CS_SEC_NS, &claims);
  sync_replica(1, prefix); /* replica 2 holds the claim, then lags */
  fetches(1, false);
  cs_catalog_result res;
  assert_int_equal(r1.cat.ops->release(r1.cat.self, &lease, term, 0, &res), CS_E_OK);
  assert_int_equal(res.outcome, CS_OUT_UNKNOWN); /* 319: not on every replica in time; it lands later */
  cs_cat_head h;
  assert_int_equal(head(&r3, &other, &h).outcome, CS_OUT_OK);
  assert_false(h.head_free); /* the unconfirmed tombstone frees nothing: A's claim still holds the head */
  fetches(1, true);
  bool free_now = false;
  for (unsigned i = 0; i < 100 && !free_now; i++) {
    sleep_ms(200);
    free_now = head(&r3, &other, &h).outcome == CS_OUT_OK && h.head_free;
  }
  assert_true(free_now); /* the tombstone landed everywhere */
  res = publish(&r2, &lease, 1, term);
  printf("publish through replica 2 after the release landed: %s (%s)\n", cs_outcome_name(res.outcome), res.detail);
  for (unsigned k = 0; k < 3; k++) {
    opened *o = k == 0 ? &r1 : k == 1 ? &r2 : &r3;
    assert_int_equal(head(o, &lease, &h).outcome, CS_OUT_OK);
    assert_int_equal(h.watermark, 0); /* nothing published by a released holder, on any replica */
  }
  close_on(&r1);
  close_on(&r2);
  close_on(&r3);
}

/*
 * Holder A's publish times out waiting for its quorum (319: UNKNOWN) and
 * lands after A's lease ended. Successor B on another replica reads the
 * head before that: the watermark without A's version. B's barrier write is
 * refused while A's write is pending (286), and once it lands B's barrier
 * read sees it: B goes on above it, and no version is published twice.
 */
static void test_timed_out_quorum_write_lands_late(void **state) {
  (void)state;
  char prefix[64];
  fresh_prefix(prefix, sizeof prefix);
  opened a = {0}, b = {0};
  open_on(&a, 0, prefix, 0, g.cluster);
  open_on(&b, 1, prefix, 0, g.cluster);
  assert_int_equal(ensure(&a).outcome, CS_OUT_OK);
  cs_uuid la = lease_of(0x31), lb = lease_of(0x32);
  cs_claims claims;
  uint64_t ta = acquire(&a, &la, 3 * CS_SEC_NS, &claims);
  sync_replica(1, prefix);
  sync_replica(2, prefix);
  table_fetches(1, prefix, "publishes", false); /* A's publish cannot reach replicas 2 and 3; claims still can */
  table_fetches(2, prefix, "publishes", false);
  cs_catalog_result res = publish(&a, &la, 1, ta);
  assert_int_equal(res.outcome, CS_OUT_UNKNOWN); /* 319: may have applied (it has, on replica 1 only) */
  assert_int_equal(res.server_code, 319);
  sleep_ms(4500);   /* A's lease (3 s) has ended on the 1-s clock */
  cs_cat_head h;
  assert_int_equal(head(&b, &lb, &h).outcome, CS_OUT_OK);
  assert_true(h.head_free);
  assert_int_equal(h.watermark, 0); /* A's version is not there yet: a successor that trusted this would reuse it */
  assert_int_equal(claim(&b, &lb, h.head_term, 30 * CS_SEC_NS).outcome, CS_OUT_OK);
  res = read_claims(&b, &lb, h.head_term + 1, &claims);
  printf("successor's barrier while the late write is pending: %s (%s)\n", cs_outcome_name(res.outcome), res.detail);
  assert_int_equal(res.outcome, CS_OUT_REFUSED); /* 286: not applied, and B does not hold the term yet */
  assert_int_equal(res.server_code, 286);
  table_fetches(1, prefix, "publishes", true); /* A's write reaches its quorum: it lands now, after A's lease */
  table_fetches(2, prefix, "publishes", true);
  uint64_t tb = acquire_within(&b, &lb, 30, &claims);
  assert_int_not_equal(tb, 0);
  assert_int_equal(claims.watermark, 1); /* the barrier read sees A's late version */
  assert_int_equal(publish(&b, &lb, claims.watermark + 1, tb).outcome, CS_OUT_OK);
  assert_int_equal(duplicate_versions(0, prefix), 0);
  assert_int_equal(head(&a, &la, &h).outcome, CS_OUT_OK);
  assert_int_equal(h.watermark, 2);
  close_on(&a);
  close_on(&b);
}

/*
 * One replica of three down: every write is refused (285: the quorum is all
 * replicas), nothing applied and nothing lost; consistent reads go on
 * through the others; writes go on once it is back and it has caught up.
 */
static void test_one_replica_down(void **state) {
  (void)state;
  char prefix[64];
  fresh_prefix(prefix, sizeof prefix);
  opened r1 = {0}, r3 = {0};
  open_on(&r1, 0, prefix, 0, g.cluster);
  assert_int_equal(ensure(&r1).outcome, CS_OUT_OK); /* the tables on every replica first */
  cs_uuid lease = lease_of(0x41);
  cs_claims claims;
  uint64_t term = acquire(&r1, &lease, 30 * CS_SEC_NS, &claims);
  assert_int_equal(publish(&r1, &lease, 1, term).outcome, CS_OUT_OK);
  script("down", 3);
  cs_catalog_result res = publish(&r1, &lease, 2, term);
  assert_int_equal(res.outcome, CS_OUT_REFUSED);
  assert_int_equal(res.server_code, 285);
  cs_cat_head h;
  assert_int_equal(head(&r1, &lease, &h).outcome, CS_OUT_OK);
  assert_int_equal(h.watermark, 1); /* reads go on; the refused publish did not apply */
  script("up", 3);
  open_on(&r3, 2, prefix, 0, g.cluster);
  bool published = false;
  for (unsigned i = 0; i < 150 && !published; i++) {
    sleep_ms(200);
    published = publish(&r1, &lease, 2, term).outcome == CS_OUT_OK;
  }
  assert_true(published);
  assert_int_equal(head(&r3, &lease, &h).outcome, CS_OUT_OK);
  assert_int_equal(h.watermark, 2); /* a quorum of all: the returned replica holds it too */
  close_on(&r1);
  close_on(&r3);
}

/* ZooKeeper down: writes and consistent reads are refused (not applied), and go on once it is back. */
static void test_zookeeper_down_and_back(void **state) {
  (void)state;
  char prefix[64];
  fresh_prefix(prefix, sizeof prefix);
  opened r1 = {0};
  open_on(&r1, 0, prefix, 0, g.cluster);
  assert_int_equal(ensure(&r1).outcome, CS_OUT_OK);
  cs_uuid lease = lease_of(0x51);
  cs_claims claims;
  cs_cat_head h;
  assert_int_equal(head(&r1, &lease, &h).outcome, CS_OUT_OK);
  script("zk-down", 0);
  cs_catalog_result res = {0};
  for (unsigned i = 0; i < 100; i++) { /* the replica notices the lost session within its timeout */
    res = claim(&r1, &lease, h.head_term, 30 * CS_SEC_NS);
    if (res.outcome != CS_OUT_OK) break;
    sleep_ms(200);
  }
  printf("claim without ZooKeeper: %s (%s)\n", cs_outcome_name(res.outcome), res.detail);
  assert_int_equal(res.outcome, CS_OUT_REFUSED);
  script("zk-up", 0);
  uint64_t term = acquire_within(&r1, &lease, 40, &claims);
  assert_int_not_equal(term, 0);
  assert_int_equal(publish(&r1, &lease, 1, term).outcome, CS_OUT_OK);
  close_on(&r1);
}

static bool read_setup(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/cluster", dir);
  FILE *f = fopen(path, "r");
  unsigned n = 0;
  bool ok = f != NULL && fscanf(f, "%63s %u", g.cluster, &n) == 2 && n == REPLICAS;
  if (f != NULL) fclose(f);
  for (unsigned k = 0; ok && k < REPLICAS; k++) {
    snprintf(path, sizeof path, "%s/r%u/endpoint", dir, k + 1);
    f = fopen(path, "r");
    ok = f != NULL && fscanf(f, "%u %63s %127s", &g.ports[k], g.user, g.password) == 3;
    if (f != NULL) fclose(f);
  }
  return ok;
}

int main(int argc, char **argv) {
  if (argc != 3 || !read_setup(argv[1])) {
    fprintf(stderr, "usage: %s CLUSTER_DIR CH_CLUSTER_SH (a cluster of %u replicas from tools/servers/ch_cluster.sh)\n",
            argv[0], REPLICAS);
    return 1;
  }
  snprintf(g.dir, sizeof g.dir, "%s", argv[1]);
  snprintf(g.script, sizeof g.script, "%s", argv[2]);
  curl_global_init(CURL_GLOBAL_DEFAULT);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_settings_refused),
      cmocka_unit_test(test_reader_settings_checked),
      cmocka_unit_test(test_simultaneous_claims_on_two_replicas),
      cmocka_unit_test(test_release_then_write_through_lagging_replica),
      cmocka_unit_test(test_timed_out_quorum_write_lands_late),
      cmocka_unit_test(test_one_replica_down),
      cmocka_unit_test(test_zookeeper_down_and_back),
  };
  int failed = cmocka_run_group_tests_name("clickhouse_cluster", tests, NULL, NULL);
  curl_global_cleanup();
  return failed;
}
