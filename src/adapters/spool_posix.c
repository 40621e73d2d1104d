/*
 * The POSIX spool (capstore/spool.h): staging, sealing, listing, removal,
 * quarantine and recovery of packs in one local directory.
 *
 * Every system call goes through spool->sys so tests can fail any one of
 * them. Every path is a name built from ids (or a name read back and parsed)
 * opened relative to the directory descriptor: nothing escapes the root.
 */
#define _GNU_SOURCE /* O_DIRECT; before any header */

#include "capstore/spool.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#define SPOOL_BUFFER_BYTES ((size_t)1 << 20)
/*
 * Through the page cache, a write of at least this much goes straight to the
 * file (after the buffer's few bytes): the kernel copies it once, and a copy
 * into our buffer first would only add a second.
 */
#define SPOOL_THROUGH_BYTES ((size_t)64 * 1024)
/*
 * With options.direct_io, temp files are written with O_DIRECT where the
 * file system takes it: the bytes go from our buffer to the device without a
 * copy into the page cache, and finished packs do not crowd it. Every
 * direct write is aligned to this in address, length and file offset; the
 * last one is padded with zeros and the file truncated to its size before
 * the fsync. Where O_DIRECT is refused (EINVAL at open or at a write) the
 * file is written through the page cache. By default it is: a direct write
 * waits for the device, one at a time, where the page cache lets the kernel
 * write back while the writer goes on (see bench/run_ingest.sh).
 */
#define SPOOL_DIRECT_ALIGN ((size_t)4096)
/* cs_spool_file_reserve reserves this much past what it must, where the file system has room. */
#define SPOOL_RESERVE_STEP ((uint64_t)4 << 20)
#define SPOOL_READ_BYTES ((size_t)1 << 20)
#define SPOOL_PACKS_DEFAULT 1000000u
#define SPOOL_ERROR_MAX CS_SPOOL_PROBLEM_MAX
#define SPOOL_OPEN_SUFFIX ".open"
#define SPOOL_READY_SUFFIX ".dmi-pack.ready"
#define SPOOL_QUARANTINE_SUFFIX ".quarantined"
#define SPOOL_REASON_SUFFIX ".quarantined.reason"
/* ".<36>.<16 hex>.open" */
#define SPOOL_OPEN_NAME_LEN (1u + CS_UUID_TEXT_LEN + 1u + 16u + 5u)

struct cs_spool {
  const cs_spool_sys *sys;
  int dirfd;
  int lockfd;
  uint32_t packs_max;
  bool direct_io; /* temp files with O_DIRECT where the file system takes it */
  atomic_bool cannot_reserve; /* a temp file's fallocate was refused for a reason other than room */
  uint32_t files_open; /* temp files being written through this handle */
  cs_spool_entry *index; /* ready packs, sorted by pack id */
  size_t index_count;
  size_t index_cap;
  cs_spool_kept_pack *kept; /* ready names the last check kept in place: never indexed */
  size_t kept_count;
  size_t kept_cap;
  char error[SPOOL_ERROR_MAX];
};

struct cs_spool_file {
  cs_spool *spool;
  int fd;
  bool failed;
  int failed_code; /* the first failure's code, answered again by every later call */
  cs_uuid pack_id;
  uint64_t bytes; /* accepted so far, buffered or written */
  uint64_t written; /* written to fd (direct mode: zero padding of the last write included) */
  size_t buffered;
  uint8_t *buffer; /* SPOOL_BUFFER_BYTES, aligned to SPOOL_DIRECT_ALIGN */
  bool direct;     /* fd has O_DIRECT: writes are aligned (SPOOL_DIRECT_ALIGN) until the last */
  bool synced; /* flushed, fsynced and closed: the seal only links it */
  uint64_t reserved;    /* the file system's room reserved for offsets below this (cs_spool_file_reserve) */
  bool cannot_reserve;  /* the file system refused fallocate for a reason other than room */
  bool reserve_used;    /* fallocate was called: the sync gives back what is past the end */
  char name[SPOOL_OPEN_NAME_LEN + 1];
  char error[SPOOL_ERROR_MAX]; /* file errors stay here: a file may be used beside its spool */
};

/* ---- Real system calls ---- */

static int sys_open(const char *path, int flags, mode_t mode) { return open(path, flags, mode); }
static int sys_openat(int dirfd, const char *path, int flags, mode_t mode) {
  return openat(dirfd, path, flags, mode);
}
static int sys_fstatat(int dirfd, const char *path, struct stat *out, int flags) {
  return fstatat(dirfd, path, out, flags);
}

static const cs_spool_sys spool_sys_posix = {
    .open = sys_open,
    .openat = sys_openat,
    .mkdir = mkdir,
    .write = write,
    .pread = pread,
    .fsync = fsync,
    .ftruncate = ftruncate,
    .fstat = fstat,
    .fstatat = sys_fstatat,
    .linkat = linkat,
    .renameat = renameat,
    .unlinkat = unlinkat,
    .close = close,
    .flock = flock,
    .fdopendir = fdopendir,
    .readdir = readdir,
    .closedir = closedir,
    .fallocate = fallocate,
};

const cs_spool_sys *cs_spool_sys_posix(void) { return &spool_sys_posix; }

/* ---- Errors ---- */

__attribute__((format(printf, 3, 4)))
static int spool_fail(cs_spool *spool, int code, const char *format, ...) {
  assert(code < 0);
  va_list args;
  va_start(args, format);
  vsnprintf(spool->error, sizeof spool->error, format, args);
  va_end(args);
  return code;
}

/*
 * The error of a failed system call: the file system full (or over quota)
 * is CS_E_SPOOL_FULL, the kernel short of memory CS_E_NO_MEMORY, the rest CS_E_IO.
 */
static int errno_code(int saved) {
  if (saved == ENOSPC || saved == EDQUOT) return CS_E_SPOOL_FULL;
  return saved == ENOMEM ? CS_E_NO_MEMORY : CS_E_IO;
}

/* CS_E_IO (CS_E_SPOOL_FULL for ENOSPC, EDQUOT; CS_E_NO_MEMORY for ENOMEM) naming the call, the name and errno's text. */
static int spool_fail_errno(cs_spool *spool, const char *call, const char *name) {
  int saved = errno;
  return spool_fail(spool, errno_code(saved), "%s %s: %s", call, name, strerror(saved));
}

const char *cs_spool_last_error(const cs_spool *spool) {
  if (spool == NULL) return "spool is NULL";
  return spool->error;
}

static void message_copy(char *msg, size_t msg_size, const char *text) {
  if (msg == NULL || msg_size == 0) return;
  snprintf(msg, msg_size, "%s", text);
}

/* ---- Names ---- */

static void hex_lower(const uint8_t *bytes, size_t len, char *out) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < len; i++) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  out[2 * len] = '\0';
}

void cs_spool_ready_name(const cs_uuid *pack_id, uint64_t created_at_ns, uint32_t record_count,
                         const uint8_t sha256[32], char out[CS_SPOOL_NAME_MAX + 1]) {
  assert(pack_id != NULL && sha256 != NULL && out != NULL);
  char id[CS_UUID_TEXT_LEN + 1];
  char hex[65];
  cs_uuid_format(pack_id, id);
  hex_lower(sha256, 32, hex);
  int n = snprintf(out, CS_SPOOL_NAME_MAX + 1, "%s.%llu.%u.%s" SPOOL_READY_SUFFIX, id,
                   (unsigned long long)created_at_ns, record_count, hex);
  assert(n > 0 && (size_t)n <= CS_SPOOL_NAME_MAX);
  (void)n;
}

/* Parses a decimal without sign or leading zero up to '.'; advances *text. */
static bool parse_decimal(const char **text, uint64_t max, uint64_t *out) {
  const char *p = *text;
  uint64_t value = 0;
  if (*p < '0' || *p > '9' || (p[0] == '0' && p[1] >= '0' && p[1] <= '9')) return false;
  for (; *p >= '0' && *p <= '9'; p++) {
    uint64_t digit = (uint64_t)(*p - '0');
    if (value > (max - digit) / 10) return false;
    value = value * 10 + digit;
  }
  if (*p != '.') return false;
  *out = value;
  *text = p + 1;
  return true;
}

int cs_spool_parse_ready_name(const char *name, cs_spool_entry *out) {
  if (name == NULL || out == NULL) return CS_E_INVALID_ARGUMENT;
  size_t len = strnlen(name, CS_SPOOL_NAME_MAX + 1);
  if (len > CS_SPOOL_NAME_MAX || len < CS_UUID_TEXT_LEN + 1) return CS_E_PARSE;
  cs_spool_entry entry;
  memset(&entry, 0, sizeof entry);
  if (cs_uuid_parse(name, CS_UUID_TEXT_LEN, &entry.pack_id) != CS_E_OK) return CS_E_PARSE;
  const char *p = name + CS_UUID_TEXT_LEN;
  if (*p++ != '.') return CS_E_PARSE;
  uint64_t count = 0;
  if (!parse_decimal(&p, UINT64_MAX, &entry.created_at_ns)) return CS_E_PARSE;
  if (!parse_decimal(&p, CS_PACK_RECORDS_MAX, &count)) return CS_E_PARSE;
  entry.record_count = (uint32_t)count;
  if (strnlen(p, 65) < 64 || cs_hex_decode(p, 64, CS_HEX_LOWER, entry.sha256) != CS_E_OK) return CS_E_PARSE;
  if (strcmp(p + 64, SPOOL_READY_SUFFIX) != 0) return CS_E_PARSE;
  memcpy(entry.name, name, len + 1);
  *out = entry;
  return CS_E_OK;
}

static bool has_suffix(const char *name, const char *suffix) {
  size_t len = strlen(name);
  size_t suffix_len = strlen(suffix);
  return len >= suffix_len && strcmp(name + len - suffix_len, suffix) == 0;
}

/* True for ".<canonical uuid>.<16 lowercase hex>.open": only our temp names are swept. */
bool cs_spool_is_open_name(const char *name) {
  if (strlen(name) != SPOOL_OPEN_NAME_LEN || name[0] != '.') return false;
  cs_uuid id;
  if (cs_uuid_parse(name + 1, CS_UUID_TEXT_LEN, &id) != CS_E_OK) return false;
  const char *p = name + 1 + CS_UUID_TEXT_LEN;
  if (*p++ != '.') return false;
  for (int i = 0; i < 16; i++) {
    if (cs_hex_value(p[i], CS_HEX_LOWER) < 0) return false;
  }
  return strcmp(p + 16, SPOOL_OPEN_SUFFIX) == 0;
}

/* ---- Index (ready packs by id) ---- */

/* The position of pack_id, or where it would go; *found tells which. */
static size_t index_search(const cs_spool *spool, const cs_uuid *pack_id, bool *found) {
  size_t low = 0;
  size_t high = spool->index_count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    int order = cs_uuid_compare(&spool->index[mid].pack_id, pack_id);
    if (order == 0) {
      *found = true;
      return mid;
    }
    if (order < 0) low = mid + 1;
    else high = mid;
  }
  *found = false;
  return low;
}

/* Adds or replaces entry; CS_E_TOO_LARGE past packs_max, CS_E_NO_MEMORY. */
static int index_put(cs_spool *spool, const cs_spool_entry *entry) {
  bool found = false;
  size_t at = index_search(spool, &entry->pack_id, &found);
  if (found) {
    spool->index[at] = *entry;
    return CS_E_OK;
  }
  if (spool->index_count >= spool->packs_max) {
    return spool_fail(spool, CS_E_TOO_LARGE, "the spool index is full (%u packs)", spool->packs_max);
  }
  if (spool->index_count == spool->index_cap) {
    size_t cap = spool->index_cap == 0 ? 64 : spool->index_cap * 2;
    cs_spool_entry *grown = realloc(spool->index, cap * sizeof *grown);
    if (grown == NULL) return spool_fail(spool, CS_E_NO_MEMORY, "spool index allocation failed");
    spool->index = grown;
    spool->index_cap = cap;
  }
  memmove(&spool->index[at + 1], &spool->index[at], (spool->index_count - at) * sizeof *entry);
  spool->index[at] = *entry;
  spool->index_count++;
  assert(spool->index_count <= spool->index_cap);
  return CS_E_OK;
}

static void index_drop(cs_spool *spool, size_t at) {
  assert(at < spool->index_count);
  memmove(&spool->index[at], &spool->index[at + 1],
          (spool->index_count - at - 1) * sizeof spool->index[0]);
  spool->index_count--;
}

/* ---- Kept names: what the last check left in place without settling it ---- */

/* True when the last check kept name: listing leaves it out, so nothing hands it out. */
static bool kept_contains(const cs_spool *spool, const char *name) {
  for (size_t i = 0; i < spool->kept_count; i++) {
    if (strcmp(spool->kept[i].name, name) == 0) return true;
  }
  return false;
}

/* Adds a kept name; CS_E_TOO_LARGE past packs_max, CS_E_NO_MEMORY. */
static int kept_add(cs_spool *spool, const char *name, uint64_t size_bytes, int code, const char *reason) {
  assert(code < 0 && strlen(name) <= CS_SPOOL_NAME_MAX);
  if (spool->kept_count >= spool->packs_max) {
    return spool_fail(spool, CS_E_TOO_LARGE, "the spool's table of kept packs is full (%u)", spool->packs_max);
  }
  if (spool->kept_count == spool->kept_cap) {
    size_t cap = spool->kept_cap == 0 ? 8 : spool->kept_cap * 2;
    cs_spool_kept_pack *grown = realloc(spool->kept, cap * sizeof *grown);
    if (grown == NULL) return spool_fail(spool, CS_E_NO_MEMORY, "kept pack table allocation failed");
    spool->kept = grown;
    spool->kept_cap = cap;
  }
  cs_spool_kept_pack *k = &spool->kept[spool->kept_count++];
  memset(k, 0, sizeof *k);
  snprintf(k->name, sizeof k->name, "%s", name);
  k->size_bytes = size_bytes;
  k->code = code;
  snprintf(k->reason, sizeof k->reason, "%s", reason);
  assert(spool->kept_count <= spool->kept_cap);
  return CS_E_OK;
}

size_t cs_spool_kept(const cs_spool *spool, cs_spool_kept_pack *out, size_t capacity) {
  if (spool == NULL) return 0;
  size_t n = capacity < spool->kept_count ? capacity : spool->kept_count;
  if (n > 0 && out != NULL) memcpy(out, spool->kept, n * sizeof *out);
  return spool->kept_count;
}

/* Records the pass's first problem in report (later ones are counted, not kept). */
static void report_problem(cs_spool_recovery *report, int code, const char *message) {
  assert(code < 0);
  if (report->problem_code != 0) return;
  report->problem_code = code;
  snprintf(report->problem, sizeof report->problem, "%s", message);
}

/* ---- Directory walking ---- */

typedef int (*spool_visit_fn)(cs_spool *spool, const char *name, void *context);

/*
 * Calls visit for every name in the directory (but . and ..). The walk reads
 * all names first, so the visitor may rename or unlink. CS_E_IO on a failed
 * readdir or open; the visitor's first error is returned after the walk.
 */
static int spool_walk(cs_spool *spool, spool_visit_fn visit, void *context) {
  int fd = spool->sys->openat(spool->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return spool_fail_errno(spool, "open", "the spool directory");
  DIR *dir = spool->sys->fdopendir(fd);
  if (dir == NULL) {
    int rc = spool_fail_errno(spool, "fdopendir", "the spool directory");
    spool->sys->close(fd);
    return rc;
  }
  char **names = NULL;
  size_t count = 0, cap = 0;
  int rc = CS_E_OK;
  for (;;) {
    errno = 0;
    struct dirent *d = spool->sys->readdir(dir);
    if (d == NULL) {
      if (errno != 0) rc = spool_fail_errno(spool, "readdir", "the spool directory");
      break;
    }
    if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0) continue;
    if (count == cap) {
      cap = cap == 0 ? 64 : cap * 2;
      char **grown = realloc(names, cap * sizeof *grown);
      if (grown == NULL) { rc = spool_fail(spool, CS_E_NO_MEMORY, "name list allocation failed"); break; }
      names = grown;
    }
    names[count] = strdup(d->d_name);
    if (names[count] == NULL) { rc = spool_fail(spool, CS_E_NO_MEMORY, "name allocation failed"); break; }
    count++;
  }
  spool->sys->closedir(dir);
  /* Every name is visited even after a failure: a recovery pass goes on and reports the first. */
  char first_error[SPOOL_ERROR_MAX];
  memcpy(first_error, spool->error, sizeof first_error);
  for (size_t i = 0; i < count; i++) {
    int visit_rc = visit(spool, names[i], context);
    if (rc == CS_E_OK && visit_rc != CS_E_OK) {
      rc = visit_rc;
      memcpy(first_error, spool->error, sizeof first_error);
    }
    free(names[i]);
  }
  free(names);
  if (rc != CS_E_OK) memcpy(spool->error, first_error, sizeof first_error);
  return rc;
}

/* "a directory", "a symbolic link", ... for a message. */
static const char *file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return S_ISREG(mode) ? "a regular file" : "of an unknown kind";
}

/* CS_E_CORRUPT: a ready name that is not a regular file, of the kind named. */
static int not_regular(cs_spool *spool, const char *name, const char *kind) {
  return spool_fail(spool, CS_E_CORRUPT, "%s is %s, not a regular file", name, kind);
}

/*
 * Size of a ready file by name; CS_E_IO, CS_E_NOT_FOUND when it vanished,
 * CS_E_CORRUPT when the name is not a regular file (a link, a directory).
 */
static int ready_size(cs_spool *spool, const char *name, uint64_t *size) {
  struct stat st;
  if (spool->sys->fstatat(spool->dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return CS_E_NOT_FOUND;
    return spool_fail_errno(spool, "stat", name);
  }
  if (!S_ISREG(st.st_mode)) return not_regular(spool, name, file_kind(st.st_mode));
  *size = (uint64_t)st.st_size;
  return CS_E_OK;
}

/*
 * A ready name that is not a regular file is no pack: left out here,
 * quarantined by a check. A name the last check kept is left out too.
 */
static int visit_index(cs_spool *spool, const char *name, void *context) {
  (void)context;
  cs_spool_entry entry;
  if (cs_spool_parse_ready_name(name, &entry) != CS_E_OK) return CS_E_OK;
  if (kept_contains(spool, name)) return CS_E_OK;
  int rc = ready_size(spool, name, &entry.size_bytes);
  if (rc == CS_E_NOT_FOUND || rc == CS_E_CORRUPT) return CS_E_OK;
  if (rc != CS_E_OK) return rc;
  return index_put(spool, &entry);
}

/* Rebuilds the index from the directory's names (no hashing). */
static int spool_reindex(cs_spool *spool) {
  spool->index_count = 0;
  return spool_walk(spool, visit_index, NULL);
}

/* ---- Open, lock, close ---- */

/* Reads the holder's pid from the lock file into msg. */
static void describe_holder(cs_spool *spool, const char *path) {
  char text[32] = {0};
  ssize_t n = spool->sys->pread(spool->lockfd, text, sizeof text - 1, 0);
  long pid = n > 0 ? strtol(text, NULL, 10) : 0;
  if (pid > 0 && pid == (long)getpid()) { /* flock is per open file: this process holds it elsewhere */
    spool_fail(spool, CS_E_BUSY,
               "spool %s is already open in this process (pid %ld holds %s): one owner per spool", path, pid,
               CS_SPOOL_LOCK_NAME);
    return;
  }
  if (pid > 0) {
    spool_fail(spool, CS_E_BUSY, "spool %s is owned by another process (pid %ld holds %s)", path,
               pid, CS_SPOOL_LOCK_NAME);
    return;
  }
  spool_fail(spool, CS_E_BUSY, "spool %s is owned by another owner (%s is locked)", path,
             CS_SPOOL_LOCK_NAME);
}

static int spool_lock(cs_spool *spool, const char *path) {
  spool->lockfd = spool->sys->openat(spool->dirfd, CS_SPOOL_LOCK_NAME,
                                     O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
  if (spool->lockfd < 0) return spool_fail_errno(spool, "open", CS_SPOOL_LOCK_NAME);
  if (spool->sys->flock(spool->lockfd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return spool_fail_errno(spool, "flock", CS_SPOOL_LOCK_NAME);
    describe_holder(spool, path);
    return CS_E_BUSY;
  }
  char text[32];
  int len = snprintf(text, sizeof text, "%ld\n", (long)getpid());
  /* The pid is only a courtesy for the next owner's message: failures are not fatal. */
  if (spool->sys->ftruncate(spool->lockfd, 0) == 0) {
    (void)!spool->sys->write(spool->lockfd, text, (size_t)len);
  }
  return CS_E_OK;
}

static int spool_open_dir(cs_spool *spool, const char *path, bool create) {
  spool->dirfd = spool->sys->open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (spool->dirfd < 0 && errno == ENOENT && create) {
    if (spool->sys->mkdir(path, 0750) != 0 && errno != EEXIST) {
      return spool_fail_errno(spool, "mkdir", path);
    }
    spool->dirfd = spool->sys->open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  }
  if (spool->dirfd < 0) return spool_fail_errno(spool, "open", path);
  return CS_E_OK;
}

static void spool_free(cs_spool *spool) {
  if (spool->lockfd >= 0) spool->sys->close(spool->lockfd); /* releases the flock */
  if (spool->dirfd >= 0) spool->sys->close(spool->dirfd);
  free(spool->index);
  free(spool->kept);
  free(spool);
}

int cs_spool_open(const char *path, const cs_spool_options *options, cs_spool **out, char *msg,
                  size_t msg_size) {
  message_copy(msg, msg_size, "");
  if (out == NULL) { message_copy(msg, msg_size, "out is NULL"); return CS_E_INVALID_ARGUMENT; }
  *out = NULL;
  if (path == NULL || path[0] == '\0') {
    message_copy(msg, msg_size, "spool path is NULL or empty");
    return CS_E_INVALID_ARGUMENT;
  }
  cs_spool_options defaults = {0};
  if (options == NULL) options = &defaults;
  cs_spool *spool = calloc(1, sizeof *spool);
  if (spool == NULL) { message_copy(msg, msg_size, "spool allocation failed"); return CS_E_NO_MEMORY; }
  spool->sys = options->sys != NULL ? options->sys : cs_spool_sys_posix();
  spool->packs_max = options->packs_max != 0 ? options->packs_max : SPOOL_PACKS_DEFAULT;
  spool->direct_io = options->direct_io;
  spool->dirfd = -1;
  spool->lockfd = -1;
  int rc = spool_open_dir(spool, path, options->create);
  if (rc == CS_E_OK) rc = spool_lock(spool, path);
  if (rc == CS_E_OK) rc = spool_reindex(spool);
  if (rc != CS_E_OK) {
    message_copy(msg, msg_size, spool->error);
    spool_free(spool);
    return rc;
  }
  *out = spool;
  return CS_E_OK;
}

int cs_spool_close(cs_spool *spool) {
  if (spool == NULL) return CS_E_OK;
  /* Temp files are owned by their writers; an unfinished one is swept at the next recovery. */
  spool_free(spool);
  return CS_E_OK;
}

/* ---- Writing ---- */

static int file_random_name(cs_spool_file *file) {
  uint8_t random[8];
  if (getrandom(random, sizeof random, 0) != (ssize_t)sizeof random) return CS_E_IO;
  char id[CS_UUID_TEXT_LEN + 1];
  char hex[17];
  cs_uuid_format(&file->pack_id, id);
  hex_lower(random, sizeof random, hex);
  int n = snprintf(file->name, sizeof file->name, ".%s.%s" SPOOL_OPEN_SUFFIX, id, hex);
  assert(n == (int)SPOOL_OPEN_NAME_LEN);
  (void)n;
  return CS_E_OK;
}

#define SPOOL_CREATE_FLAGS (O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW)

/*
 * Creates the temp file, with O_DIRECT when the file system takes it. Some
 * refuse O_DIRECT with EINVAL only after creating the name: our random name
 * is unlinked before the plain retry.
 */
static int file_create(cs_spool *spool, cs_spool_file *file) {
  if (spool->direct_io) {
    file->direct = true;
    file->fd = spool->sys->openat(spool->dirfd, file->name, SPOOL_CREATE_FLAGS | O_DIRECT, 0640);
    if (file->fd >= 0 || errno != EINVAL) return file->fd;
    file->direct = false;
    (void)spool->sys->unlinkat(spool->dirfd, file->name, 0);
  }
  file->fd = spool->sys->openat(spool->dirfd, file->name, SPOOL_CREATE_FLAGS, 0640);
  return file->fd;
}

int cs_spool_begin(cs_spool *spool, const cs_uuid *pack_id, cs_spool_file **out) {
  if (spool == NULL || pack_id == NULL || out == NULL) return CS_E_INVALID_ARGUMENT;
  *out = NULL;
  cs_spool_file *file = calloc(1, sizeof *file);
  void *buffer = NULL;
  if (posix_memalign(&buffer, SPOOL_DIRECT_ALIGN, SPOOL_BUFFER_BYTES) != 0) buffer = NULL;
  if (file == NULL || buffer == NULL) {
    free(file);
    free(buffer);
    return spool_fail(spool, CS_E_NO_MEMORY, "temp file buffer allocation failed");
  }
  file->spool = spool;
  file->pack_id = *pack_id;
  file->buffer = buffer;
  if (file_random_name(file) != CS_E_OK) {
    free(buffer);
    free(file);
    return spool_fail(spool, CS_E_IO, "getrandom failed for a temp file name");
  }
  if (file_create(spool, file) < 0) {
    int rc = spool_fail_errno(spool, "create", file->name);
    free(buffer);
    free(file);
    return rc;
  }
  spool->files_open++;
  *out = file;
  return CS_E_OK;
}

__attribute__((format(printf, 3, 4)))
static int file_fail(cs_spool_file *file, int code, const char *format, ...) {
  if (file->failed_code == CS_E_OK) file->failed_code = code;
  va_list args;
  va_start(args, format);
  vsnprintf(file->error, sizeof file->error, format, args);
  va_end(args);
  return code;
}

static int file_fail_errno(cs_spool_file *file, const char *call) {
  int saved = errno;
  return file_fail(file, errno_code(saved), "%s %s: %s", call, file->name, strerror(saved));
}

const char *cs_spool_file_error(const cs_spool_file *file) {
  return file == NULL ? "file is NULL" : file->error;
}

/*
 * Leaves direct mode after a direct write was refused (EINVAL): reopens the
 * name for appending through the page cache, where every length and address
 * is fine. The file position is its size, which is what was written.
 */
static int file_leave_direct(cs_spool_file *file) {
  const cs_spool_sys *sys = file->spool->sys;
  assert(file->direct);
  int fd = sys->openat(file->spool->dirfd, file->name, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) return -1;
  (void)sys->close(file->fd);
  file->fd = fd;
  file->direct = false;
  return 0;
}

/* Writes all of bytes (retrying short writes and EINTR); CS_E_IO and the file fails. */
static int file_write_all(cs_spool_file *file, const uint8_t *bytes, size_t length) {
  const cs_spool_sys *sys = file->spool->sys;
  while (length > 0) {
    ssize_t n = sys->write(file->fd, bytes, length);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EINVAL && file->direct && file_leave_direct(file) == 0) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      file->failed = true;
      return file_fail_errno(file, "write");
    }
    bytes += n;
    length -= (size_t)n;
    file->written += (uint64_t)n;
  }
  return CS_E_OK;
}

/*
 * Writes the buffer. In direct mode only the last write of a file may be a
 * partial buffer (last): it is padded with zeros to the alignment, and
 * cs_spool_file_sync truncates the padding away.
 */
static int file_drain(cs_spool_file *file, bool last) {
  if (file->buffered == 0) return CS_E_OK;
  size_t length = file->buffered;
  if (file->direct && length % SPOOL_DIRECT_ALIGN != 0) {
    assert(last);
    size_t padded = (length + SPOOL_DIRECT_ALIGN - 1) & ~(SPOOL_DIRECT_ALIGN - 1);
    assert(padded <= SPOOL_BUFFER_BYTES);
    memset(file->buffer + length, 0, padded - length);
    length = padded;
  }
  (void)last;
  int rc = file_write_all(file, file->buffer, length);
  file->buffered = 0;
  return rc;
}

/* True when bytes can go to the file without passing through the buffer (once it is drained). */
static bool file_write_through(const cs_spool_file *file, const uint8_t *bytes, size_t length) {
  if (!file->direct) return length >= SPOOL_THROUGH_BYTES;
  if (file->buffered != 0) return false;
  return length >= SPOOL_DIRECT_ALIGN && (uintptr_t)bytes % SPOOL_DIRECT_ALIGN == 0;
}

int cs_spool_file_write(cs_spool_file *file, const void *bytes, size_t length) {
  if (file == NULL || (bytes == NULL && length > 0)) return CS_E_INVALID_ARGUMENT;
  if (file->failed) return file->failed_code != CS_E_OK ? file->failed_code : CS_E_IO; /* file->error names the call */
  if (file->synced) return file_fail(file, CS_E_IO, "%s: the file is already synced", file->name);
  const uint8_t *in = bytes;
  file->bytes += length;
  while (length > 0) {
    if (file_write_through(file, in, length)) {
      /* Direct mode writes the aligned part in place (no copy); the rest is buffered. */
      size_t n = file->direct ? length & ~(SPOOL_DIRECT_ALIGN - 1) : length;
      int rc = file_drain(file, false);
      if (rc == CS_E_OK) rc = file_write_all(file, in, n);
      if (rc != CS_E_OK) return rc;
      in += n;
      length -= n;
      continue;
    }
    size_t n = SPOOL_BUFFER_BYTES - file->buffered;
    if (n > length) n = length;
    memcpy(file->buffer + file->buffered, in, n);
    file->buffered += n;
    in += n;
    length -= n;
    if (file->buffered == SPOOL_BUFFER_BYTES) {
      int rc = file_drain(file, false);
      if (rc != CS_E_OK) return rc;
    }
  }
  assert(file->buffered < SPOOL_BUFFER_BYTES);
  return CS_E_OK;
}

/*
 * After a reservation that failed for room: gives back whatever the failed
 * call allocated (ext4 keeps the blocks a failed fallocate took; tmpfs undoes
 * them) and everything reserved past the file's end, by a truncate to the
 * file's size. What stays reserved is what was written.
 */
static void reserve_undo(cs_spool_file *file) {
  (void)file->spool->sys->ftruncate(file->fd, (off_t)file->written);
  file->reserved = file->written & ~(uint64_t)(SPOOL_DIRECT_ALIGN - 1);
}

int cs_spool_file_reserve(cs_spool_file *file, size_t length) {
  if (file == NULL) return CS_E_INVALID_ARGUMENT;
  const cs_spool_sys *sys = file->spool->sys;
  if (file->cannot_reserve || file->failed || file->synced) return CS_E_OK;
  /* Whole blocks (a direct write pads its last one to the alignment). */
  uint64_t need = (file->bytes + length + SPOOL_DIRECT_ALIGN - 1) & ~(uint64_t)(SPOOL_DIRECT_ALIGN - 1);
  if (need <= file->reserved) return CS_E_OK;
  if (need > (uint64_t)INT64_MAX - SPOOL_RESERVE_STEP) return CS_E_INVALID_ARGUMENT;
  if (sys->fallocate == NULL) {
    file->cannot_reserve = true;
    return CS_E_OK;
  }
  file->reserve_used = true;
  assert(file->fd >= 0);
  /* A step ahead (fewer calls), else only what is needed; fallocate allocates what is missing. */
  uint64_t tries[2] = {need + SPOOL_RESERVE_STEP, need};
  for (int i = 0; i < 2;) {
    if (sys->fallocate(file->fd, FALLOC_FL_KEEP_SIZE, (off_t)file->reserved, (off_t)(tries[i] - file->reserved)) == 0) {
      file->reserved = tries[i];
      return CS_E_OK;
    }
    if (errno == EINTR) continue;
    if (errno != ENOSPC && errno != EDQUOT) {
      /* EOPNOTSUPP (a file system without it), anything else: writes go on unreserved. */
      file->cannot_reserve = true;
      atomic_store_explicit(&file->spool->cannot_reserve, true, memory_order_relaxed);
      return CS_E_OK;
    }
    reserve_undo(file); /* hold nothing the failed call took while waiting for room */
    i++;
  }
  return CS_E_SPOOL_FULL;
}

/*
 * At the sync, after the last write: gives back the room reserved past the
 * file's end. Best effort (a file system that keeps it frees it with the
 * file). tmpfs and XFS free it by punching the range; ext4 ignores a hole
 * past the end and frees it on a truncate to the same size.
 */
static void file_unreserve(cs_spool_file *file) {
  const cs_spool_sys *sys = file->spool->sys;
  if (!file->reserve_used || sys->fallocate == NULL) return;
  uint64_t end = (file->bytes + SPOOL_DIRECT_ALIGN - 1) & ~(uint64_t)(SPOOL_DIRECT_ALIGN - 1);
  if (file->reserved > end)
    (void)sys->fallocate(file->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)end, (off_t)(file->reserved - end));
  (void)sys->ftruncate(file->fd, (off_t)file->bytes);
  file->reserved = 0;
}

bool cs_spool_reserves(const cs_spool *spool) {
  return spool != NULL && spool->sys->fallocate != NULL &&
         !atomic_load_explicit(&((cs_spool *)(uintptr_t)spool)->cannot_reserve, memory_order_relaxed);
}

int cs_spool_file_write_fn(void *context, const uint8_t *bytes, size_t length) {
  return cs_spool_file_write(context, bytes, length) == CS_E_OK ? 0 : -1;
}

/* Closes and frees file; unlinks its temp name when unlink is set. */
static void file_release(cs_spool_file *file, bool unlink) {
  cs_spool *spool = file->spool;
  assert(spool->files_open > 0);
  if (file->fd >= 0) spool->sys->close(file->fd);
  if (unlink) spool->sys->unlinkat(spool->dirfd, file->name, 0);
  spool->files_open--;
  free(file->buffer);
  free(file);
}

void cs_spool_abort(cs_spool *spool, cs_spool_file *file) {
  if (spool == NULL || file == NULL) return;
  assert(file->spool == spool);
  file_release(file, true);
}

int cs_spool_file_sync(cs_spool_file *file, const cs_pack_summary *summary) {
  if (file == NULL || summary == NULL) return CS_E_INVALID_ARGUMENT;
  if (file->synced) return CS_E_OK;
  const cs_spool_sys *sys = file->spool->sys;
  if (file->failed) return file->failed_code != CS_E_OK ? file->failed_code : CS_E_IO; /* file->error names the call */
  int rc = file_drain(file, true);
  if (rc != CS_E_OK) return rc;
  /* Direct mode padded its last write: cut the file back to the bytes it was given. */
  if (file->written != file->bytes && sys->ftruncate(file->fd, (off_t)file->bytes) != 0) {
    file->failed = true;
    return file_fail_errno(file, "ftruncate");
  }
  file_unreserve(file);
  if (file->bytes != summary->size_bytes) {
    return file_fail(file, CS_E_INVALID_ARGUMENT, "%s holds %llu bytes but the summary says %llu",
                     file->name, (unsigned long long)file->bytes,
                     (unsigned long long)summary->size_bytes);
  }
  if (!cs_uuid_equal(&file->pack_id, &summary->pack_id)) {
    return file_fail(file, CS_E_INVALID_ARGUMENT, "%s: the summary names another pack id", file->name);
  }
  if (sys->fsync(file->fd) != 0) {
    file->failed = true;
    return file_fail_errno(file, "fsync");
  }
  int fd = file->fd;
  file->fd = -1;
  if (sys->close(fd) != 0) {
    file->failed = true;
    return file_fail_errno(file, "close");
  }
  file->synced = true;
  return CS_E_OK;
}

/* cs_spool_file_sync, its error copied to the spool's. */
static int file_finish(cs_spool_file *file, const cs_pack_summary *summary) {
  int rc = cs_spool_file_sync(file, summary);
  if (rc != CS_E_OK) spool_fail(file->spool, rc, "%s", file->error);
  return rc;
}

/* Links (or renames) the temp name to the ready name; *renamed tells which. */
static int publish_name(cs_spool *spool, const char *temp, const char *ready, bool *renamed) {
  *renamed = false;
  if (spool->sys->linkat(spool->dirfd, temp, spool->dirfd, ready, 0) == 0) return CS_E_OK;
  if (errno == EEXIST) return CS_E_CONFLICT; /* the caller compares names */
  if (errno != EPERM && errno != EOPNOTSUPP && errno != ENOSYS && errno != EMLINK) {
    return spool_fail_errno(spool, "link", ready);
  }
  if (spool->sys->renameat(spool->dirfd, temp, spool->dirfd, ready) != 0) {
    return spool_fail_errno(spool, "rename", ready);
  }
  *renamed = true;
  return CS_E_OK;
}

/* CS_E_OK when no pack with this id is ready, CS_SPOOL_ALREADY-style 1 when the same one is. */
static int seal_precheck(cs_spool *spool, const cs_spool_entry *entry, bool *already) {
  bool found = false;
  size_t at = index_search(spool, &entry->pack_id, &found);
  *already = found && strcmp(spool->index[at].name, entry->name) == 0;
  if (!found || *already) return CS_E_OK;
  return spool_fail(spool, CS_E_CONFLICT, "pack %.36s is already sealed with other bytes as %s",
                    entry->name, spool->index[at].name);
}

/* Makes the ready name durable; a failed directory fsync takes the name back. */
static int seal_link(cs_spool *spool, cs_spool_file *file, cs_spool_entry *entry, bool *already) {
  bool renamed = false;
  int rc = publish_name(spool, file->name, entry->name, &renamed);
  if (rc == CS_E_CONFLICT) {
    /* Same name: same id, time, count and hash, so the same bytes. */
    *already = true;
    return ready_size(spool, entry->name, &entry->size_bytes);
  }
  if (rc != CS_E_OK) return rc;
  if (spool->sys->fsync(spool->dirfd) != 0) {
    rc = spool_fail_errno(spool, "fsync", "the spool directory after linking a pack");
    spool->sys->unlinkat(spool->dirfd, entry->name, 0);
    return rc;
  }
  /* A temp name left behind after a seal is harmless: recovery sweeps it. */
  if (!renamed) spool->sys->unlinkat(spool->dirfd, file->name, 0);
  return CS_E_OK;
}

int cs_spool_seal(cs_spool *spool, cs_spool_file *file, const cs_pack_summary *summary,
                  cs_spool_entry *out, cs_spool_seal_result *result) {
  if (spool == NULL || file == NULL || summary == NULL) {
    if (spool != NULL && file != NULL) file_release(file, true);
    return CS_E_INVALID_ARGUMENT;
  }
  assert(file->spool == spool);
  cs_spool_entry entry;
  memset(&entry, 0, sizeof entry);
  entry.pack_id = summary->pack_id;
  entry.created_at_ns = summary->created_at_ns;
  entry.record_count = summary->record_count;
  entry.size_bytes = summary->size_bytes;
  memcpy(entry.sha256, summary->sha256, 32);
  cs_spool_ready_name(&summary->pack_id, summary->created_at_ns, summary->record_count,
                      summary->sha256, entry.name);
  bool already = false;
  int rc = seal_precheck(spool, &entry, &already);
  if (rc == CS_E_OK && !already) rc = file_finish(file, summary);
  if (rc == CS_E_OK && !already) {
    rc = seal_link(spool, file, &entry, &already);
    /* No room for the name (a directory that needs a block): the synced file is kept for another try. */
    if (rc == CS_E_SPOOL_FULL) return rc;
  }
  if (rc == CS_E_OK) rc = index_put(spool, &entry);
  file_release(file, true);
  if (rc != CS_E_OK) return rc;
  if (out != NULL) *out = entry;
  if (result != NULL) *result = already ? CS_SPOOL_ALREADY : CS_SPOOL_SEALED;
  return CS_E_OK;
}

int cs_spool_put(cs_spool *spool, const uint8_t *object, size_t size, cs_spool_entry *out,
                 cs_spool_seal_result *result) {
  if (spool == NULL || (object == NULL && size > 0)) return CS_E_INVALID_ARGUMENT;
  cs_pack_summary summary;
  cs_pack_error err;
  int rc = cs_pack_verify_buffer(object, size, &summary, &err);
  if (rc != CS_E_OK) return spool_fail(spool, rc, "the pack does not verify: %s", err.message);
  cs_spool_file *file = NULL;
  rc = cs_spool_begin(spool, &summary.pack_id, &file);
  if (rc != CS_E_OK) return rc;
  rc = cs_spool_file_write(file, object, size);
  if (rc != CS_E_OK) {
    spool_fail(spool, rc, "%s", file->error);
    cs_spool_abort(spool, file);
    return rc;
  }
  return cs_spool_seal(spool, file, &summary, out, result);
}

/* ---- Reading, removal, quarantine ---- */

int cs_spool_list(cs_spool *spool, cs_spool_entry *entries, size_t capacity, size_t *count) {
  if (spool == NULL || count == NULL || (entries == NULL && capacity > 0)) {
    return CS_E_INVALID_ARGUMENT;
  }
  int rc = spool_reindex(spool);
  *count = spool->index_count;
  size_t n = capacity < spool->index_count ? capacity : spool->index_count;
  if (n > 0) memcpy(entries, spool->index, n * sizeof *entries);
  return rc;
}

void cs_spool_usage(const cs_spool *spool, uint64_t *bytes, uint32_t *packs) {
  assert(spool != NULL);
  uint64_t total = 0;
  for (size_t i = 0; i < spool->index_count; i++) total += spool->index[i].size_bytes;
  if (bytes != NULL) *bytes = total;
  if (packs != NULL) *packs = (uint32_t)spool->index_count;
}

int cs_spool_find(const cs_spool *spool, const cs_uuid *pack_id, cs_spool_entry *out) {
  if (spool == NULL || pack_id == NULL) return CS_E_INVALID_ARGUMENT;
  bool found = false;
  size_t at = index_search(spool, pack_id, &found);
  if (!found) return CS_E_NOT_FOUND;
  if (out != NULL) *out = spool->index[at];
  return CS_E_OK;
}

/* The index position of pack_id, or CS_E_NOT_FOUND with a message. */
static int spool_locate(cs_spool *spool, const cs_uuid *pack_id, size_t *at) {
  bool found = false;
  *at = index_search(spool, pack_id, &found);
  if (found) return CS_E_OK;
  char id[CS_UUID_TEXT_LEN + 1];
  cs_uuid_format(pack_id, id);
  return spool_fail(spool, CS_E_NOT_FOUND, "pack %s is not in the spool", id);
}

int cs_spool_open_pack(cs_spool *spool, const cs_uuid *pack_id, int *fd, cs_spool_entry *out) {
  if (spool == NULL || pack_id == NULL || fd == NULL) return CS_E_INVALID_ARGUMENT;
  size_t at = 0;
  int rc = spool_locate(spool, pack_id, &at);
  if (rc != CS_E_OK) return rc;
  const cs_spool_entry *entry = &spool->index[at];
  *fd = spool->sys->openat(spool->dirfd, entry->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
  if (*fd < 0) return spool_fail_errno(spool, "open", entry->name);
  if (out != NULL) *out = *entry;
  return CS_E_OK;
}

int cs_spool_remove(cs_spool *spool, const cs_uuid *pack_id, uint64_t *size_bytes) {
  if (spool == NULL || pack_id == NULL) return CS_E_INVALID_ARGUMENT;
  size_t at = 0;
  int rc = spool_locate(spool, pack_id, &at);
  if (rc != CS_E_OK) return rc;
  const cs_spool_entry *entry = &spool->index[at];
  if (spool->sys->unlinkat(spool->dirfd, entry->name, 0) != 0 && errno != ENOENT) {
    return spool_fail_errno(spool, "unlink", entry->name);
  }
  uint64_t size = entry->size_bytes;
  index_drop(spool, at);
  if (size_bytes != NULL) *size_bytes = size;
  /*
   * Best effort: the name is gone. If a power loss undid the unlink, the pack
   * would only come back to be handed off again, which is a no-op upstream.
   */
  (void)spool->sys->fsync(spool->dirfd);
  return CS_E_OK;
}

/* Writes the reason file (best effort: its failure is reported but the rename stands). */
static int write_reason(cs_spool *spool, const char *name, const char *reason) {
  char path[CS_SPOOL_NAME_MAX + 32];
  snprintf(path, sizeof path, "%s" SPOOL_REASON_SUFFIX, name);
  /* O_NONBLOCK: a FIFO planted under the reason's name fails the open instead of blocking it. */
  int fd = spool->sys->openat(spool->dirfd, path,
                              O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0640);
  if (fd < 0) return spool_fail_errno(spool, "create", path);
  char line[SPOOL_ERROR_MAX + 8];
  int len = snprintf(line, sizeof line, "%s\n", reason);
  if (len < 0 || (size_t)len >= sizeof line) len = (int)sizeof line - 1;
  ssize_t n = spool->sys->write(fd, line, (size_t)len);
  int rc = CS_E_OK;
  if (n != len) rc = spool_fail(spool, CS_E_IO, "write %s failed", path);
  if (rc == CS_E_OK && spool->sys->fsync(fd) != 0) rc = spool_fail_errno(spool, "fsync", path);
  spool->sys->close(fd);
  return rc;
}

/*
 * Renames name to name.quarantined and records the reason. *renamed says
 * whether the pack left the ready set: an error after the rename (the
 * reason file, the directory fsync) leaves it renamed.
 */
static int quarantine_name(cs_spool *spool, const char *name, const char *reason, bool *renamed) {
  *renamed = false;
  char target[CS_SPOOL_NAME_MAX + 16];
  int n = snprintf(target, sizeof target, "%s" SPOOL_QUARANTINE_SUFFIX, name);
  if (n < 0 || (size_t)n >= sizeof target || (size_t)n > CS_SPOOL_NAME_MAX) {
    return spool_fail(spool, CS_E_TOO_LARGE, "quarantine name for %s is too long", name);
  }
  if (spool->sys->renameat(spool->dirfd, name, spool->dirfd, target) != 0) {
    return spool_fail_errno(spool, "rename", name);
  }
  *renamed = true;
  int rc = write_reason(spool, name, reason);
  if (spool->sys->fsync(spool->dirfd) != 0 && rc == CS_E_OK) {
    rc = spool_fail_errno(spool, "fsync", "the spool directory after a quarantine");
  }
  return rc;
}

int cs_spool_quarantine(cs_spool *spool, const cs_uuid *pack_id, const char *reason,
                        uint64_t *size_bytes) {
  if (spool == NULL || pack_id == NULL || reason == NULL) return CS_E_INVALID_ARGUMENT;
  size_t at = 0;
  int rc = spool_locate(spool, pack_id, &at);
  if (rc != CS_E_OK) return rc;
  cs_spool_entry entry = spool->index[at];
  bool renamed = false;
  rc = quarantine_name(spool, entry.name, reason, &renamed);
  /* Once renamed the pack has left the ready set, even when the reason could not be written. */
  if (!renamed) return rc;
  index_drop(spool, at);
  if (size_bytes != NULL) *size_bytes = entry.size_bytes;
  return rc;
}

/* ---- Recovery ---- */

static int visit_sweep(cs_spool *spool, const char *name, void *context) {
  cs_spool_recovery *report = context;
  if (!cs_spool_is_open_name(name)) return CS_E_OK;
  int unlinked = spool->sys->unlinkat(spool->dirfd, name, 0);
  if (unlinked != 0 && errno == EISDIR) { /* a directory under a temp file's name: not ours, left alone */
    report->skipped++;
    return CS_E_OK;
  }
  if (unlinked != 0 && errno != ENOENT) { /* left in place (another owner's, a read-only file system...) */
    report->errors++;
    int rc = spool_fail_errno(spool, "unlink", name);
    report_problem(report, rc, spool->error);
    return CS_E_OK;
  }
  report->open_removed++;
  return CS_E_OK;
}

int cs_spool_sweep_open(cs_spool *spool, cs_spool_recovery *report) {
  if (spool == NULL) return CS_E_INVALID_ARGUMENT;
  cs_spool_recovery local = {0};
  if (report == NULL) report = &local;
  if (spool->files_open > 0) {
    return spool_fail(spool, CS_E_STATE, "cannot sweep: %u temp files of this spool are being written",
                      spool->files_open);
  }
  int rc = spool_walk(spool, visit_sweep, report);
  if (rc == CS_E_OK && report->open_removed > 0 && spool->sys->fsync(spool->dirfd) != 0) {
    report->errors++;
    rc = spool_fail_errno(spool, "fsync", "the spool directory after the sweep");
  }
  return rc;
}

/* Reads exactly length bytes at offset; CS_E_IO (a short file reads as EIO). */
static int read_exact(cs_spool *spool, int fd, const char *name, uint64_t offset, void *bytes,
                      size_t length) {
  uint8_t *out = bytes;
  while (length > 0) {
    ssize_t n = spool->sys->pread(fd, out, length, (off_t)offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return spool_fail_errno(spool, "read", name);
    }
    out += n;
    offset += (uint64_t)n;
    length -= (size_t)n;
  }
  return CS_E_OK;
}

/* Verification state of one ready file: what the checks read. */
typedef struct check_file {
  const char *name;
  int fd;
  uint64_t size;
  cs_pack_trailer trailer;
  cs_pack_footer footer;
  bool footer_parsed;
  uint8_t *chunk;
} check_file;

/*
 * A failure of the pack library on c: CS_E_CORRUPT (a refusal of the bytes)
 * or, for no verdict, CS_E_NO_MEMORY (out of memory) or CS_E_STATE; the kind
 * and the library's message in spool->error.
 */
static int check_refuse(cs_spool *spool, const check_file *c, const cs_pack_error *err) {
  int code = cs_pack_error_is_verdict(err->kind) ? CS_E_CORRUPT
             : err->kind == CS_PACK_E_NO_MEMORY ? CS_E_NO_MEMORY
                                                : CS_E_STATE;
  return spool_fail(spool, code, "%s: %s: %s", c->name, cs_pack_error_kind_name(err->kind), err->message);
}

/* Trailer, footer and header: everything but the payloads. */
static int check_structure(cs_spool *spool, check_file *c) {
  cs_pack_error err;
  uint8_t tail[CS_PACK_TRAILER_SIZE] = {0};
  if (c->size >= CS_PACK_TRAILER_SIZE) {
    int rc = read_exact(spool, c->fd, c->name, c->size - CS_PACK_TRAILER_SIZE, tail, sizeof tail);
    if (rc != CS_E_OK) return rc;
  }
  if (cs_pack_trailer_parse(tail, c->size, &c->trailer, &err) != CS_E_OK) return check_refuse(spool, c, &err);
  uint8_t *footer = malloc(c->trailer.footer_length > 0 ? (size_t)c->trailer.footer_length : 1);
  if (footer == NULL) {
    return spool_fail(spool, CS_E_NO_MEMORY, "%s: out of memory for its footer of %llu bytes", c->name,
                      (unsigned long long)c->trailer.footer_length);
  }
  int rc = read_exact(spool, c->fd, c->name, c->trailer.footer_offset, footer,
                      (size_t)c->trailer.footer_length);
  if (rc == CS_E_OK) {
    rc = cs_pack_footer_parse(&c->trailer, footer, (size_t)c->trailer.footer_length, &c->footer, &err);
    c->footer_parsed = rc == CS_E_OK;
    if (rc != CS_E_OK) rc = check_refuse(spool, c, &err);
  }
  free(footer);
  if (rc != CS_E_OK) return rc;
  uint8_t head[CS_PACK_HEADER_SIZE];
  rc = read_exact(spool, c->fd, c->name, 0, head, sizeof head);
  if (rc != CS_E_OK) return rc;
  cs_pack_header header;
  if (cs_pack_header_parse(head, &header, &err) != CS_E_OK ||
      cs_pack_header_check(&header, &c->trailer, &c->footer, &err) != CS_E_OK) {
    return check_refuse(spool, c, &err);
  }
  return CS_E_OK;
}

/* Streams every byte through the verifier. */
static int check_stream(cs_spool *spool, check_file *c, cs_pack_summary *summary) {
  cs_pack_error err;
  cs_pack_verifier *verifier = NULL;
  if (cs_pack_verifier_new(&c->trailer, &c->footer, &verifier, &err) != CS_E_OK) {
    return check_refuse(spool, c, &err);
  }
  int rc = CS_E_OK;
  for (uint64_t offset = 0; offset < c->size && rc == CS_E_OK;) {
    size_t length = c->size - offset < SPOOL_READ_BYTES ? (size_t)(c->size - offset) : SPOOL_READ_BYTES;
    rc = read_exact(spool, c->fd, c->name, offset, c->chunk, length);
    if (rc == CS_E_OK && cs_pack_verifier_update(verifier, c->chunk, length, &err) != CS_E_OK) {
      rc = check_refuse(spool, c, &err);
    }
    offset += length;
  }
  if (rc == CS_E_OK && cs_pack_verifier_finish(verifier, summary, &err) != CS_E_OK) {
    rc = check_refuse(spool, c, &err);
  }
  cs_pack_verifier_free(verifier);
  return rc;
}

/* The name must say what the bytes are. */
static int check_name(cs_spool *spool, const cs_spool_entry *entry, const cs_pack_summary *summary) {
  const char *field = NULL;
  if (!cs_uuid_equal(&entry->pack_id, &summary->pack_id)) field = "pack id";
  else if (entry->created_at_ns != summary->created_at_ns) field = "created_at_ns";
  else if (entry->record_count != summary->record_count) field = "record count";
  else if (memcmp(entry->sha256, summary->sha256, 32) != 0) field = "sha256";
  if (field == NULL) return CS_E_OK;
  return spool_fail(spool, CS_E_CORRUPT, "%s: name_mismatch: the name's %s differs from the bytes'",
                    entry->name, field);
}

/*
 * CS_E_OK (the bytes match the name), CS_E_CORRUPT (a verdict: reason in
 * spool->error), or no verdict: CS_E_IO (a stat, open or read failed),
 * CS_E_NO_MEMORY, CS_E_STATE.
 */
static int check_ready_file(cs_spool *spool, cs_spool_entry *entry, cs_pack_footer *keep, uint64_t *keep_length) {
  check_file c;
  memset(&c, 0, sizeof c);
  c.name = entry->name;
  /* Never opened unless regular: a FIFO would block the open, a socket refuse it. */
  int rc = ready_size(spool, entry->name, &entry->size_bytes);
  if (rc == CS_E_CORRUPT) return rc;
  if (rc == CS_E_NOT_FOUND) return spool_fail(spool, CS_E_IO, "%s vanished while being checked", entry->name);
  if (rc != CS_E_OK) return rc;
  /* O_NONBLOCK: the name may be replaced after the stat; it means nothing to a regular file. */
  c.fd = spool->sys->openat(spool->dirfd, entry->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
  if (c.fd < 0 && (errno == ELOOP || errno == ENXIO)) { /* swapped since the stat: a link, a socket */
    return not_regular(spool, entry->name, errno == ELOOP ? "a symbolic link" : "a socket or a FIFO");
  }
  if (c.fd < 0) return spool_fail_errno(spool, "open", entry->name);
  struct stat st;
  if (spool->sys->fstat(c.fd, &st) != 0) rc = spool_fail_errno(spool, "stat", entry->name);
  else if (!S_ISREG(st.st_mode)) rc = not_regular(spool, entry->name, file_kind(st.st_mode));
  c.size = (uint64_t)st.st_size;
  c.chunk = malloc(SPOOL_READ_BYTES);
  if (rc == CS_E_OK && c.chunk == NULL) {
    rc = spool_fail(spool, CS_E_NO_MEMORY, "%s: out of memory for a read buffer of %zu bytes", entry->name,
                    SPOOL_READ_BYTES);
  }
  cs_pack_summary summary;
  if (rc == CS_E_OK) rc = check_structure(spool, &c);
  if (rc == CS_E_OK) rc = check_stream(spool, &c, &summary);
  if (rc == CS_E_OK) rc = check_name(spool, entry, &summary);
  entry->size_bytes = c.size;
  if (rc == CS_E_OK && c.footer_parsed && keep != NULL) { /* the caller's now: parsed once */
    *keep = c.footer;
    *keep_length = c.trailer.footer_length;
  } else if (c.footer_parsed) {
    cs_pack_footer_free(&c.footer);
  }
  free(c.chunk);
  spool->sys->close(c.fd);
  return rc;
}

/*
 * No verdict on name's bytes (rc, message in spool->error): the pack stays
 * under its ready name, out of the index, for a later check. Returns what
 * only a failure of the kept table itself makes an error.
 */
static int check_keep(cs_spool *spool, cs_spool_recovery *report, const char *name, int rc) {
  char why[SPOOL_ERROR_MAX];
  snprintf(why, sizeof why, "%s", spool->error);
  report->errors++;
  report_problem(report, rc, why);
  uint64_t size = 0;
  int found = ready_size(spool, name, &size);
  if (found == CS_E_NOT_FOUND) return CS_E_OK; /* gone meanwhile: nothing to keep */
  report->kept++;
  report->kept_bytes += size;
  return kept_add(spool, name, size, rc, why);
}

/* A verdict: name's bytes (or its kind of file) fail; reason in spool->error. */
static int check_quarantine(cs_spool *spool, cs_spool_recovery *report, const char *name) {
  char reason[SPOOL_ERROR_MAX];
  snprintf(reason, sizeof reason, "%s", spool->error);
  bool renamed = false;
  int rc = quarantine_name(spool, name, reason, &renamed);
  if (renamed) report->quarantined++;
  if (rc == CS_E_OK) return CS_E_OK;
  if (renamed) { /* out of the ready set; its reason file or the directory fsync failed */
    report->errors++;
    report_problem(report, rc, spool->error);
    return CS_E_OK;
  }
  /* Still under its ready name: kept, and never handed out, since its bytes are bad. */
  const char *failure = strstr(spool->error, name); /* "rename <name>: <why>": reason names it already */
  size_t name_len = strlen(name);
  if (failure == NULL || strncmp(failure + name_len, ": ", 2) != 0) failure = spool->error;
  else failure += name_len + 2;
  char why[SPOOL_ERROR_MAX];
  snprintf(why, sizeof why, "%s", failure);
  spool_fail(spool, CS_E_CORRUPT, "%s (not quarantined: %s)", reason, why);
  return check_keep(spool, report, name, CS_E_CORRUPT);
}

static int visit_check(cs_spool *spool, const char *name, void *context) {
  cs_spool_recovery *report = context;
  cs_spool_entry entry;
  if (strcmp(name, CS_SPOOL_LOCK_NAME) == 0 || has_suffix(name, SPOOL_QUARANTINE_SUFFIX) ||
      has_suffix(name, SPOOL_REASON_SUFFIX) || cs_spool_is_open_name(name)) {
    return CS_E_OK;
  }
  if (!has_suffix(name, SPOOL_READY_SUFFIX)) {
    report->skipped++;
    return CS_E_OK;
  }
  int rc = cs_spool_parse_ready_name(name, &entry);
  if (rc != CS_E_OK) {
    rc = spool_fail(spool, CS_E_CORRUPT, "%s: bad_name: not <uuid>.<created_at_ns>.<records>.<sha256>.dmi-pack.ready", name);
  } else {
    rc = check_ready_file(spool, &entry, NULL, NULL);
  }
  if (rc == CS_E_OK) {
    report->ready_ok++;
    report->ready_bytes += entry.size_bytes;
    return index_put(spool, &entry);
  }
  if (rc == CS_E_CORRUPT) return check_quarantine(spool, report, name);
  return check_keep(spool, report, name, rc); /* says nothing about the bytes: never quarantined */
}

int cs_spool_check(cs_spool *spool, cs_spool_recovery *report) {
  if (spool == NULL) return CS_E_INVALID_ARGUMENT;
  cs_spool_recovery local = {0};
  if (report == NULL) report = &local;
  spool->index_count = 0;
  spool->kept_count = 0; /* this pass decides afresh */
  return spool_walk(spool, visit_check, report);
}

/* What an admission pass carries through the walk. */
typedef struct admit_pass {
  cs_spool_entry *out;
  size_t capacity, count;
  cs_spool_recovery *report;
  cs_spool_admit_fn each;
  void *context;
} admit_pass;

static int visit_admit(cs_spool *spool, const char *name, void *context) {
  admit_pass *pass = context;
  cs_spool_entry entry;
  if (pass->count == pass->capacity) return CS_E_OK; /* the rest wait for the next pass, unindexed */
  if (!has_suffix(name, SPOOL_READY_SUFFIX) || cs_spool_parse_ready_name(name, &entry) != CS_E_OK) return CS_E_OK;
  bool known = false;
  (void)index_search(spool, &entry.pack_id, &known);
  if (known || kept_contains(spool, name)) return CS_E_OK;
  cs_pack_footer footer;
  uint64_t footer_length = 0;
  memset(&footer, 0, sizeof footer);
  int rc = check_ready_file(spool, &entry, pass->each != NULL ? &footer : NULL, &footer_length);
  if (rc == CS_E_OK) {
    rc = index_put(spool, &entry);
    if (rc == CS_E_OK && pass->each != NULL) pass->each(pass->context, &entry, &footer, footer_length);
    cs_pack_footer_free(&footer);
    if (rc != CS_E_OK) return rc;
    pass->report->ready_ok++;
    pass->report->ready_bytes += entry.size_bytes;
    pass->out[pass->count++] = entry;
    return CS_E_OK;
  }
  if (rc == CS_E_CORRUPT) return check_quarantine(spool, pass->report, name);
  /* No verdict (a read failed, memory ran short): not indexed, not kept; the next pass tries again. */
  pass->report->errors++;
  report_problem(pass->report, rc, spool->error);
  return CS_E_OK;
}

static int entry_name_order(const void *a, const void *b) {
  return strcmp(((const cs_spool_entry *)a)->name, ((const cs_spool_entry *)b)->name);
}

int cs_spool_admit(cs_spool *spool, cs_spool_entry *out, size_t capacity, size_t *count,
                   cs_spool_recovery *report, cs_spool_admit_fn each, void *context) {
  if (spool == NULL || count == NULL || (out == NULL && capacity > 0)) return CS_E_INVALID_ARGUMENT;
  cs_spool_recovery local = {0};
  if (report == NULL) report = &local;
  memset(report, 0, sizeof *report);
  admit_pass pass = {.out = out, .capacity = capacity, .report = report, .each = each, .context = context};
  int rc = spool_walk(spool, visit_admit, &pass);
  if (pass.count > 1) qsort(out, pass.count, sizeof *out, entry_name_order);
  *count = pass.count;
  return rc;
}

int cs_spool_entries(const cs_spool *spool, cs_spool_entry *entries, size_t capacity, size_t *count) {
  if (spool == NULL || count == NULL || (entries == NULL && capacity > 0)) return CS_E_INVALID_ARGUMENT;
  *count = spool->index_count;
  size_t n = capacity < spool->index_count ? capacity : spool->index_count;
  if (n > 0) memcpy(entries, spool->index, n * sizeof *entries);
  return CS_E_OK;
}

int cs_spool_recover(cs_spool *spool, cs_spool_recovery *report) {
  if (spool == NULL) return CS_E_INVALID_ARGUMENT;
  cs_spool_recovery local = {0};
  if (report == NULL) report = &local;
  memset(report, 0, sizeof *report);
  int rc = cs_spool_sweep_open(spool, report);
  int check_rc = cs_spool_check(spool, report);
  return rc != CS_E_OK ? rc : check_rc;
}
