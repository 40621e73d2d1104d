/*
 * The object key the capture runtime gives a sealed pack (on_sealed, what
 * the service uploads under) against the key its footer names (what spool
 * recovery and `capstore pack key` compute): both are dated, as DMI's writer
 * dates a pack, by the first record's captured_at_ns, never by the time the
 * pack was opened.
 */
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_fs_util.h"

#include "capstore/capture.h"
#include "test_pack_util.h"

/* 1 ns before 2023-11-15 00:00 UTC: DMI's float seconds round it to the next day. */
#define FIRST_CAPTURED_NS 1700006399999999999ull

typedef struct sealed_keys {
  char key[CS_KEY_MAX];
  uint64_t captured_at_ns;
  int count;
} sealed_keys;

static void on_sealed(void *context, const cs_spool_entry *entry, const cs_pack_summary *summary,
                      const cs_pack_key_fields *fields) {
  (void)entry;
  (void)summary;
  sealed_keys *seen = context;
  size_t len = 0;
  cs_pack_error err;
  seen->count++;
  seen->captured_at_ns = fields->captured_at_ns;
  if (cs_pack_object_key("", 0, fields, seen->key, &len, &err) != CS_E_OK) seen->key[0] = '\0';
}

/* The key `capstore pack key` gives the one ready pack in dir (from its footer). */
static void footer_key(const char *dir, char key[CS_KEY_MAX]) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  char path[1024] = "";
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    cs_spool_entry entry;
    if (cs_spool_parse_ready_name(e->d_name, &entry) == CS_E_OK) snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
  }
  closedir(d);
  assert_true(path[0] != '\0');
  int fd = open(path, O_RDONLY);
  struct stat st;
  assert_true(fd >= 0 && fstat(fd, &st) == 0);
  uint8_t *data = malloc((size_t)st.st_size);
  assert_int_equal(pread(fd, data, (size_t)st.st_size, 0), st.st_size);
  close(fd);
  cs_pack_error err;
  cs_pack_trailer trailer;
  cs_pack_footer footer;
  assert_int_equal(cs_pack_trailer_parse(data + st.st_size - 64, (uint64_t)st.st_size, &trailer, &err), CS_E_OK);
  assert_int_equal(cs_pack_footer_parse(&trailer, data + trailer.footer_offset, (size_t)trailer.footer_length,
                                        &footer, &err), CS_E_OK);
  cs_pack_key_fields fields;
  size_t len = 0;
  assert_int_equal(cs_pack_footer_key_fields(&footer, &fields, &err), CS_E_OK);
  assert_int_equal(cs_pack_object_key("", 0, &fields, key, &len, &err), CS_E_OK);
  cs_pack_footer_free(&footer);
  free(data);
}

static void test_sealed_key_dated_by_first_record(void **state) {
  (void)state;
  char *dir = tf_temp_dir("capture-key");
  sealed_keys seen = {.count = 0};
  cs_capture_config cfg;
  cs_capture_config_default(&cfg);
  cfg.on_sealed = on_sealed;
  cfg.on_sealed_context = &seen;
  cs_capture *cap = NULL;
  char msg[256];
  assert_int_equal(cs_capture_open(dir, &cfg, &cap, msg, sizeof msg), CS_E_OK);
  /* The pack opens now (created_at_ns is today); its records were captured in 2023. */
  uint8_t payload[4] = {1, 2, 3, 4};
  cs_pack_meta meta = tp_meta("first", 4);
  meta.captured_at_ns = FIRST_CAPTURED_NS;
  assert_int_equal(cs_capture_write(cap, &meta, payload, 4, msg, sizeof msg), CS_E_OK);
  meta = tp_meta("second", 4);
  meta.captured_at_ns = FIRST_CAPTURED_NS + 86400ull * CS_SEC_NS;
  assert_int_equal(cs_capture_write(cap, &meta, payload, 4, msg, sizeof msg), CS_E_OK);
  int rc = cs_capture_close(cap, CS_NEVER, msg, sizeof msg);
  if (rc != CS_E_OK) fail_msg("close: %s: %s", cs_strerror(rc), msg);
  cs_capture_free(cap);
  assert_int_equal(seen.count, 1);
  assert_int_equal(seen.captured_at_ns, FIRST_CAPTURED_NS);
  static const char want[] = "v1/tenant=tenant-a/date=2023-11-15/session=session-a/rank=0/";
  if (strncmp(seen.key, want, strlen(want)) != 0) fail_msg("sealed pack's key %s, want %s<pack id>", seen.key, want);
  char from_footer[CS_KEY_MAX];
  footer_key(dir, from_footer);
  assert_string_equal(seen.key, from_footer);
  tf_remove_tree(dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_sealed_key_dated_by_first_record),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
