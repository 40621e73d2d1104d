/*
 * The benchmarks' plainest ClickHouse client: one HTTP POST through libcurl,
 * the peer the catalog adapter is measured against (capstore-bench-catalog,
 * capstore-bench-service). Header-only: each benchmark is one program.
 */
#ifndef CAPSTORE_BENCH_CLICKHOUSE_H
#define CAPSTORE_BENCH_CLICKHOUSE_H

#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

static inline size_t bench_discard(char *ptr, size_t size, size_t nmemb, void *user) {
  (void)ptr;
  (void)user;
  return size * nmemb;
}

/*
 * One POST of sql to the server at url ("http://127.0.0.1:PORT/"): sql as the
 * body, or, with body, sql in the URL and body[0 .. len) as the data (blocks
 * of 65,536 rows, as the adapter asks). Returns the HTTP status, 0 on a
 * transport error; anything but 200 is named on stderr.
 */
static inline long bench_ch_post(const char *url, const char *user, const char *password, const char *sql,
                                 const char *body, size_t len) {
  CURL *c = curl_easy_init();
  char full[1024], header[2][200];
  char *q = curl_easy_escape(c, sql, 0);
  if (body == NULL) snprintf(full, sizeof full, "%s?wait_end_of_query=1", url);
  else snprintf(full, sizeof full, "%s?wait_end_of_query=1&max_insert_block_size=65536&query=%s", url, q);
  snprintf(header[0], sizeof header[0], "X-ClickHouse-User: %s", user);
  snprintf(header[1], sizeof header[1], "X-ClickHouse-Key: %s", password);
  struct curl_slist *h = curl_slist_append(curl_slist_append(curl_slist_append(NULL, header[0]), header[1]), "Expect:");
  curl_easy_setopt(c, CURLOPT_URL, full);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body == NULL ? sql : body);
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body == NULL ? strlen(sql) : len));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bench_discard);
  long status = 0;
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) fprintf(stderr, "POST %.60s...: HTTP %ld\n", sql, status);
  curl_free(q);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  return status;
}

#endif
