/*
 * capstore spool: look at and repair a capture spool directory
 * (docs/spool.md).
 *
 *   list   the ready packs as their names tell them (no byte is read), the
 *          quarantined ones with their reason, and the temp files in progress;
 *          never takes the owner lock, so it works beside a running sink;
 *   check  takes the owner lock, verifies every byte of every ready pack
 *          against its name and quarantines what fails (cs_spool_check);
 *   sweep  takes the owner lock and removes stale .open temp files
 *          (cs_spool_sweep_open).
 *
 * check and sweep refuse while another owner (a sink, another check) holds
 * the lock, naming its pid: a running sink's temp files are not stale and its
 * packs are its own to quarantine.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include "capstore/spool.h"
#include "cli.h"

/* check's exit status when the pass completed but sidelined at least one pack. */
#define CLI_EXIT_QUARANTINED 3

#define QUARANTINE_SUFFIX ".quarantined"
#define REASON_SUFFIX ".reason"
/* A bound on the names one listing holds (the spool's own index bound). */
#define LIST_NAMES_MAX 1000000u


static int spool_usage(FILE *out) {
  fprintf(out,
          "usage: capstore spool list DIR    ready packs from their names (nothing is read or\n"
          "                                  hashed), quarantined packs with their reason, and\n"
          "                                  temp files in progress; works beside a running sink\n"
          "       capstore spool check DIR   verify every byte of every ready pack against its\n"
          "                                  name; quarantine the ones that fail\n"
          "       capstore spool sweep DIR   remove stale .open temp files\n"
          "\n"
          "check and sweep take the spool's owner lock (.capstore-spool.lock) and refuse while\n"
          "another owner (a running sink, another check) holds it, naming its pid.\n"
          "\n"
          "check never quarantines a pack it could not read or ran out of memory on: that is\n"
          "no verdict on its bytes. Such a pack is kept in place and named (\"kept\"), with a\n"
          "corrupt one whose rename failed; the next check looks at them again.\n"
          "\n"
          "exit status: 0 done (check: every ready pack verified)\n"
          "             1 refused or failed (DIR missing or unreadable, the lock is held,\n"
          "               an I/O error; check: a pack kept in place, or a failed reason\n"
          "               file; sweep: a temp file left); the reason is on stderr\n"
          "             2 usage\n"
          "             3 check only: the pass completed and quarantined at least one pack\n"
          "\n"
          "example: capstore spool list capstore-demo/spool\n");
  return out == stdout ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

static bool has_suffix(const char *name, const char *suffix) {
  size_t len = strlen(name);
  size_t suffix_len = strlen(suffix);
  return len >= suffix_len && strcmp(name + len - suffix_len, suffix) == 0;
}

static bool names_add(name_list *list, const char *name) {
  if (list->count >= LIST_NAMES_MAX) return false;
  if (list->count == list->cap) {
    size_t cap = list->cap == 0 ? 64 : list->cap * 2;
    char **grown = realloc(list->names, cap * sizeof *grown);
    if (grown == NULL) return false;
    list->names = grown;
    list->cap = cap;
  }
  list->names[list->count] = strdup(name);
  if (list->names[list->count] == NULL) return false;
  list->count++;
  return true;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Name order is pack id order (the names start with the canonical UUID). */
static void names_sort(name_list *list) {
  if (list->count > 1) qsort(list->names, list->count, sizeof *list->names, compare_names);
}

static void names_free(name_list *list) {
  for (size_t i = 0; i < list->count; i++) free(list->names[i]);
  free(list->names);
  memset(list, 0, sizeof *list);
}

static bool names_contain(const name_list *list, const char *name) {
  if (list->count == 0) return false; /* names is NULL then */
  return bsearch(&name, list->names, list->count, sizeof *list->names, compare_names) != NULL;
}

/* True for "<ready name>.quarantined": the part before the suffix parses as a ready name. */
static bool is_quarantined_name(const char *name) {
  if (!has_suffix(name, QUARANTINE_SUFFIX)) return false;
  char ready[CS_SPOOL_NAME_MAX + 1];
  size_t len = strlen(name) - strlen(QUARANTINE_SUFFIX);
  if (len > CS_SPOOL_NAME_MAX) return false;
  memcpy(ready, name, len);
  ready[len] = '\0';
  cs_spool_entry entry;
  return cs_spool_parse_ready_name(ready, &entry) == CS_E_OK;
}

/* Sorts one name into *out; false when memory ran out. */
/* The private spools under CS_SPOOL_HANDOFF_DIR: counted, with their owners' liveness and ready packs. */
static void scan_private(int dirfd, spool_names *out) {
  int fd = openat(dirfd, CS_SPOOL_HANDOFF_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  DIR *dir = fd < 0 ? NULL : fdopendir(fd);
  if (dir == NULL) {
    if (fd >= 0) close(fd);
    return;
  }
  for (struct dirent *d; (d = readdir(dir)) != NULL;) {
    cs_uuid id;
    if (strlen(d->d_name) != CS_UUID_TEXT_LEN || cs_uuid_parse(d->d_name, CS_UUID_TEXT_LEN, &id) != CS_E_OK) continue;
    int sub = openat(fd, d->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
    DIR *inner = sub < 0 ? NULL : fdopendir(sub);
    if (inner == NULL) {
      if (sub >= 0) close(sub);
      continue;
    }
    long pid = 0;
    bool live = cli_spool_owner(sub, &pid);
    out->private_spools++;
    out->private_live += live ? 1u : 0u;
    cs_spool_entry entry;
    for (struct dirent *e; (e = readdir(inner)) != NULL;) {
      bool ready = cs_spool_parse_ready_name(e->d_name, &entry) == CS_E_OK;
      out->private_ready += ready ? 1u : 0u;
      out->private_dead_ready += ready && !live ? 1u : 0u;
    }
    closedir(inner);
  }
  closedir(dir);
}

static bool classify(int dirfd, spool_names *out, const char *name) {
  cs_spool_entry entry;
  if (strcmp(name, CS_SPOOL_HANDOFF_DIR) == 0) {
    scan_private(dirfd, out);
    return true;
  }
  if (cs_spool_parse_ready_name(name, &entry) == CS_E_OK) return names_add(&out->ready, name);
  if (is_quarantined_name(name)) return names_add(&out->quarantined, name);
  struct stat st;
  /* In progress: what a sweep would remove (a directory under such a name it leaves alone). */
  if (cs_spool_is_open_name(name) &&
      !(fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode))) {
    out->open_count++;
  } else if (strcmp(name, CS_SPOOL_LOCK_NAME) != 0 && !has_suffix(name, REASON_SUFFIX)) out->other_count++;
  return true;
}

void cli_spool_names_free(spool_names *names) {
  names_free(&names->ready);
  names_free(&names->quarantined);
}

/* Reads the directory's names; 0, or -1 with errno set. Sorted (pack id order). */
int cli_spool_scan(int dirfd, spool_names *out) {
  memset(out, 0, sizeof *out);
  int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = fd < 0 ? NULL : fdopendir(fd);
  if (dir == NULL) {
    int saved = errno;
    if (fd >= 0) close(fd);
    errno = saved;
    return -1;
  }
  int rc = 0;
  for (;;) {
    errno = 0;
    struct dirent *d = readdir(dir);
    if (d == NULL) {
      if (errno != 0) rc = -1;
      break;
    }
    if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0) continue;
    if (!classify(dirfd, out, d->d_name)) {
      errno = ENOMEM;
      rc = -1;
      break;
    }
  }
  int saved = errno;
  closedir(dir);
  errno = saved;
  names_sort(&out->ready);
  names_sort(&out->quarantined);
  return rc;
}

/* The first line of "<quarantined name>.reason" into reason (never following a link). */
void cli_spool_read_reason(int dirfd, const char *quarantined, char reason[REASON_BYTES_MAX]) {
  char path[CS_SPOOL_NAME_MAX + 16];
  snprintf(reason, REASON_BYTES_MAX, "(no reason recorded)");
  if ((size_t)snprintf(path, sizeof path, "%s" REASON_SUFFIX, quarantined) >= sizeof path) return;
  int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); /* a FIFO must not block */
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return;
  }
  ssize_t n = read(fd, reason, REASON_BYTES_MAX - 1);
  close(fd);
  if (n <= 0) {
    snprintf(reason, REASON_BYTES_MAX, "(no reason recorded)");
    return;
  }
  reason[n] = '\0';
  reason[strcspn(reason, "\n")] = '\0';
}

static int open_dir(const char *command, const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fprintf(stderr, "capstore spool %s: %s: %s\n", command, dir, strerror(errno));
  return fd;
}

/* One ready pack's line; false (and a line saying so) when the name is not a regular file. */
static bool print_ready(int dirfd, const char *name, uint64_t *total_bytes) {
  cs_spool_entry entry;
  (void)cs_spool_parse_ready_name(name, &entry); /* cli_spool_scan() kept parseable names only */
  struct stat st;
  char size[32] = "?";
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISREG(st.st_mode)) {
      printf("not a pack   %s\n             reason: not a regular file (spool check quarantines it)\n",
             name);
      return false;
    }
    snprintf(size, sizeof size, "%lld", (long long)st.st_size);
    *total_bytes += (uint64_t)st.st_size;
  }
  char id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(&entry.pack_id, id);
  printf("ready        %s  records %u  bytes %s  created_at_ns %llu  sha256 %.64s\n", id,
         entry.record_count, size, (unsigned long long)entry.created_at_ns,
         name + strlen(name) - strlen(".dmi-pack.ready") - 64);
  return true;
}

/* capstore spool list DIR */
static int cmd_list(const char *dir) {
  int dirfd = open_dir("list", dir);
  if (dirfd < 0) return CLI_EXIT_FAILURE;
  spool_names names;
  if (cli_spool_scan(dirfd, &names) != 0) {
    fprintf(stderr, "capstore spool list: %s: reading the directory: %s\n", dir, strerror(errno));
    cli_spool_names_free(&names);
    close(dirfd);
    return CLI_EXIT_FAILURE;
  }
  uint64_t bytes = 0;
  size_t ready = 0;
  for (size_t i = 0; i < names.ready.count; i++) {
    if (print_ready(dirfd, names.ready.names[i], &bytes)) ready++;
    else names.other_count++;
  }
  for (size_t i = 0; i < names.quarantined.count; i++) {
    char reason[REASON_BYTES_MAX];
    cli_spool_read_reason(dirfd, names.quarantined.names[i], reason);
    printf("quarantined  %s\n             reason: %s\n", names.quarantined.names[i], reason);
  }
  printf("%s: %zu ready (%llu bytes), %zu quarantined, %zu in progress (.open), %zu other files\n",
         dir, ready, (unsigned long long)bytes, names.quarantined.count,
         names.open_count, names.other_count);
  cli_spool_names_free(&names);
  close(dirfd);
  return fflush(stdout) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
}

/* Opens the spool as its owner: CS_E_BUSY (naming the holder's pid) while another holds it. */
static cs_spool *open_owner(const char *command, const char *dir) {
  cs_spool *spool = NULL;
  cs_spool_options options = {.create = false};
  char msg[400];
  int rc = cs_spool_open(dir, &options, &spool, msg, sizeof msg);
  if (rc == CS_E_OK) return spool;
  if (rc == CS_E_BUSY) {
    fprintf(stderr, "capstore spool %s: refused: %s; stop it first\n", command, msg);
  } else {
    fprintf(stderr, "capstore spool %s: %s: %s (%s)\n", command, dir, msg, cs_strerror(rc));
  }
  return NULL;
}

/* Prints the packs quarantined since `before` was scanned, with their reasons. */
static size_t print_new_quarantines(int dirfd, const spool_names *before) {
  spool_names after;
  size_t count = 0;
  if (cli_spool_scan(dirfd, &after) == 0) {
    for (size_t i = 0; i < after.quarantined.count; i++) {
      const char *name = after.quarantined.names[i];
      if (names_contain(&before->quarantined, name)) continue;
      char reason[REASON_BYTES_MAX];
      cli_spool_read_reason(dirfd, name, reason);
      printf("quarantined  %s\n             reason: %s\n", name, reason);
      count++;
    }
  }
  cli_spool_names_free(&after);
  return count;
}

/* Prints each pack the check kept in place, with what failed. */
static void print_kept(const cs_spool *spool) {
  size_t count = cs_spool_kept(spool, NULL, 0);
  cs_spool_kept_pack *kept = count > 0 ? calloc(count, sizeof *kept) : NULL;
  if (count > 0 && kept == NULL) {
    printf("kept         %zu packs (no memory to name them)\n", count);
    return;
  }
  count = cs_spool_kept(spool, kept, count);
  for (size_t i = 0; i < count; i++) {
    const char *what = kept[i].code == CS_E_CORRUPT ? "corrupt, but the quarantine failed"
                       : kept[i].code == CS_E_NO_MEMORY ? "not checked: out of memory (no verdict on its bytes)"
                                                         : "not checked: it could not be read (no verdict on its bytes)";
    printf("kept         %s\n             %s\n             reason: %s\n", kept[i].name, what, kept[i].reason);
  }
  free(kept);
}

/* capstore spool check DIR */
static int cmd_check(const char *dir) {
  cs_spool *spool = open_owner("check", dir);
  if (spool == NULL) return CLI_EXIT_FAILURE;
  int dirfd = open_dir("check", dir);
  spool_names before;
  if (dirfd < 0 || cli_spool_scan(dirfd, &before) != 0) {
    if (dirfd >= 0) fprintf(stderr, "capstore spool check: %s: reading the directory: %s\n", dir, strerror(errno));
    if (dirfd >= 0) cli_spool_names_free(&before);
    cs_spool_close(spool);
    if (dirfd >= 0) close(dirfd);
    return CLI_EXIT_FAILURE;
  }
  cs_spool_recovery report = {0};
  int rc = cs_spool_check(spool, &report);
  char error[400];
  snprintf(error, sizeof error, "%s", cs_spool_last_error(spool));
  print_kept(spool);
  cs_spool_close(spool); /* releases the lock */
  print_new_quarantines(dirfd, &before);
  cli_spool_names_free(&before);
  close(dirfd);
  printf("%s: checked %u ready packs: %u verified (%llu bytes), %u quarantined, %u kept in place "
         "(%llu bytes), %u errors, %u other files left alone\n",
         dir, report.ready_ok + report.quarantined + report.kept, report.ready_ok,
         (unsigned long long)report.ready_bytes, report.quarantined, report.kept,
         (unsigned long long)report.kept_bytes, report.errors, report.skipped);
  fflush(stdout);
  if (rc != CS_E_OK) {
    fprintf(stderr, "capstore spool check: %s: the pass stopped: %s (%s)\n", dir, error, cs_strerror(rc));
    return CLI_EXIT_FAILURE;
  }
  if (report.problem_code != 0) {
    fprintf(stderr, "capstore spool check: %s: %u packs kept in place, %u errors; the first: %s (%s)\n", dir,
            report.kept, report.errors, report.problem, cs_strerror(report.problem_code));
    return CLI_EXIT_FAILURE;
  }
  return report.quarantined > 0 ? CLI_EXIT_QUARANTINED : CLI_EXIT_OK;
}

/* capstore spool sweep DIR */
static int cmd_sweep(const char *dir) {
  cs_spool *spool = open_owner("sweep", dir);
  if (spool == NULL) return CLI_EXIT_FAILURE;
  cs_spool_recovery report = {0};
  int rc = cs_spool_sweep_open(spool, &report);
  char error[400];
  snprintf(error, sizeof error, "%s", cs_spool_last_error(spool));
  cs_spool_close(spool);
  printf("%s: removed %u stale .open temp files\n", dir, report.open_removed);
  fflush(stdout);
  if (rc != CS_E_OK) {
    fprintf(stderr, "capstore spool sweep: %s: %s (%s)\n", dir, error, cs_strerror(rc));
    return CLI_EXIT_FAILURE;
  }
  if (report.problem_code != 0) {
    fprintf(stderr, "capstore spool sweep: %s: %u temp files left: the first: %s (%s)\n", dir, report.errors,
            report.problem, cs_strerror(report.problem_code));
    return CLI_EXIT_FAILURE;
  }
  return CLI_EXIT_OK;
}

int cli_spool_main(int argc, char **argv) {
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0)) {
    return spool_usage(stdout);
  }
  if (argc != 3) return spool_usage(stderr);
  if (strcmp(argv[1], "list") == 0) return cmd_list(argv[2]);
  if (strcmp(argv[1], "check") == 0) return cmd_check(argv[2]);
  if (strcmp(argv[1], "sweep") == 0) return cmd_sweep(argv[2]);
  fprintf(stderr, "capstore spool: unknown subcommand '%s'\n", argv[1]);
  return spool_usage(stderr);
}

bool cli_spool_owner(int dirfd, long *pid) {
  *pid = 0;
  int fd = openat(dirfd, CS_SPOOL_LOCK_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  char text[32] = "";
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  *pid = strtol(text, NULL, 10);
  return *pid > 0 && (kill((pid_t)*pid, 0) == 0 || errno == EPERM);
}
