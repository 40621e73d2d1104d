/*
 * The runtime's footer read (INDEX, recovery, the prefetch thread) under
 * memory limits: a good pack is read or reported short of memory (retried),
 * never reported corrupt (which INDEX answers by setting the pack aside).
 */
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <zlib.h>

#include "rs_internal.h"
#include "test_pack_util.h"

static uint64_t address_space_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long pages = 0;
  assert_non_null(f);
  assert_int_equal(fscanf(f, "%llu", &pages), 1);
  fclose(f);
  return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void test_memory_limit_is_not_corruption(void **state) {
  (void)state;
#if defined(__SANITIZE_ADDRESS__)
  skip(); /* ASan reserves terabytes of shadow address space: RLIMIT_AS cannot apply */
#endif
  /* 8,000 records: a footer of about 3.5 MB, a tree of about 45 MB. */
  uint32_t *lengths = calloc(8000, sizeof *lengths);
  for (uint32_t i = 0; i < 8000; i++) lengths[i] = 1;
  tp_bytes pack = tp_build(8000, lengths);
  free(lengths);
  char path[] = "/tmp/capstore-footer-read-XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  unlink(path);
  assert_int_equal(write(fd, pack.data, pack.len), (ssize_t)pack.len);
  int outcomes[3] = {0};
  malloc_trim(0); /* free heap memory would be parsed into without the limit seeing it */
  for (uint64_t extra_mb = 4; extra_mb <= 76; extra_mb += 6) {
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
      uint64_t limit = address_space_bytes() + extra_mb * 1024 * 1024;
      struct rlimit rl = {.rlim_cur = limit, .rlim_max = limit};
      if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(9);
      cs_pack_footer footer;
      char msg[200] = "";
      int rc = rs_footer_read_fd(fd, pack.len, &footer, NULL, msg, sizeof msg);
      if (rc == CS_E_OK) _exit(0);
      if (rc == CS_E_NO_MEMORY) _exit(1);
      fprintf(stderr, "limit +%llu MB: %s: %s\n", (unsigned long long)extra_mb, cs_strerror(rc), msg);
      _exit(2);
    }
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    if (WIFSIGNALED(status)) {
      fail_msg("limit +%llu MB: the read died of signal %d", (unsigned long long)extra_mb, WTERMSIG(status));
    }
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) <= 1);
    outcomes[WEXITSTATUS(status)]++;
  }
  print_message("%d limits read the footer, %d answered no memory\n", outcomes[0], outcomes[1]);
  assert_true(outcomes[0] > 0 && outcomes[1] > 0);
  close(fd);
  tp_free(&pack);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_memory_limit_is_not_corruption),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
