/*
 * A runtime test's state on the embedded defaults (a dirstore and SQLite
 * under a temporary directory), or on the live servers when the test is
 * given their endpoint files (tools/servers/: "port user password" for
 * ClickHouse, "endpoint key secret bucket" for S3), each env with its own
 * catalog name and key prefix there.
 */
#ifndef CAPSTORE_TEST_LIVE_ENV_H
#define CAPSTORE_TEST_LIVE_ENV_H

#include <stdio.h>
#include <unistd.h>

#include "test_fs_util.h"

typedef struct env {
  char *root;
  char spool[600], bucket[600], db[600];
  char name[64], prefix[80];
  capstore_config cfg;
} env;

static struct live {
  bool on;
  char ch_url[128], ch_user[128], ch_password[128];
  char s3_endpoint[256], s3_key[128], s3_secret[128], s3_bucket[128];
} live;

static inline void live_load(const char *ch_file, const char *s3_file) {
  FILE *f = fopen(ch_file, "r");
  if (f == NULL) fail_msg("%s: cannot read", ch_file);
  unsigned port = 0;
  if (fscanf(f, "%u %127s %127s", &port, live.ch_user, live.ch_password) < 2) fail_msg("%s: not \"port user password\"", ch_file);
  fclose(f);
  snprintf(live.ch_url, sizeof live.ch_url, "http://127.0.0.1:%u/", port);
  f = fopen(s3_file, "r");
  if (f == NULL) fail_msg("%s: cannot read", s3_file);
  if (fscanf(f, "%255s %127s %127s %127s", live.s3_endpoint, live.s3_key, live.s3_secret, live.s3_bucket) != 4)
    fail_msg("%s: not \"endpoint key secret bucket\"", s3_file);
  fclose(f);
  live.on = true;
}

/* A fresh env: the config's defaults, the embedded store and catalog, or the live servers'. */
static inline void env_make_base(env *e, const char *tag) {
  static unsigned made;
  e->root = tf_temp_dir(tag);
  snprintf(e->spool, sizeof e->spool, "%s/spool", e->root);
  snprintf(e->bucket, sizeof e->bucket, "%s/bucket", e->root);
  snprintf(e->db, sizeof e->db, "%s/catalog.db", e->root);
  capstore_config_default(&e->cfg);
  e->cfg.spool_dir = e->spool;
  e->cfg.store_dir = e->bucket;
  e->cfg.sqlite_path = e->db;
  if (!live.on) return;
  snprintf(e->name, sizeof e->name, "%s_%ld_%u", tag, (long)getpid(), made++);
  snprintf(e->prefix, sizeof e->prefix, "%s/", e->name);
  e->cfg.name = e->name;
  e->cfg.key_prefix = e->prefix;
  e->cfg.store_dir = NULL;
  e->cfg.s3_endpoint = live.s3_endpoint;
  e->cfg.s3_bucket = live.s3_bucket;
  e->cfg.s3_access_key_id = live.s3_key;
  e->cfg.s3_secret_access_key = live.s3_secret;
  e->cfg.s3_allow_insecure = true;
  e->cfg.sqlite_path = NULL;
  e->cfg.clickhouse_url = live.ch_url;
  e->cfg.clickhouse_user = live.ch_user;
  e->cfg.clickhouse_password = live.ch_password[0] != '\0' ? live.ch_password : NULL;
  e->cfg.clickhouse_allow_insecure = true;
  e->cfg.service.lease_guard_ns = 1100 * CS_MS_NS; /* ClickHouse 18.16 stamps whole seconds */
}

static inline capstore *open_capstore(env *e) {
  capstore *cs = NULL;
  char msg[256];
  if (capstore_open(&e->cfg, &cs, msg, sizeof msg) != CS_E_OK) fail_msg("capstore_open: %s", msg);
  return cs;
}

static inline capstore_reader *open_reader(env *e) {
  capstore_reader *r = NULL;
  char msg[256];
  if (capstore_reader_open(&e->cfg, &r, msg, sizeof msg) != CS_E_OK) fail_msg("capstore_reader_open: %s", msg);
  return r;
}

#endif
