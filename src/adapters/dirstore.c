/*
 * The filesystem object store (include/capstore/dirstore.h). One object is one
 * file: an 80-byte metadata header, then the object's bytes. Writing both in
 * one temp file and publishing it with one link(2) (create-only) or rename(2)
 * (replace) is what makes "an object never appears without its metadata" and
 * the conditional create atomic; a separate sidecar would need two names.
 *
 * Keys map to paths segment by segment: [A-Za-z0-9._=%-] stay as they are
 * (a leading '.' does not), everything else becomes "+XX"; directories get
 * the suffix ".d", objects ".obj", so no key's file can be another key's
 * directory. Keys the store rule refuses (cs_store_key_check: "." and ".."
 * segments) are refused as every store refuses them; empty segments are
 * refused here too. A LIST names only files whose names are exactly what a
 * key maps to, so a name planted in the tree ("+2E+2E.d", "a+2Fb.obj",
 * "a+00b.obj") never becomes a key.
 */
#define _GNU_SOURCE /* O_DIRECT */
#include "capstore/dirstore.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define META_BYTES 80u
#define PATH_BYTES 4096u
static const char meta_magic[8] = {'C', 'S', 'O', 'B', 'J', '1', '\0', '\0'};

/*
 * Object directories this handle made durable (created, or found, and
 * fsynced into their parents, all the way up): a PUT into one of them skips
 * the mkdir and fsync of every component. A directory counts only while it
 * is the same one (device and inode); this handle's DELETEs forget them all.
 * What is assumed: no other process removes such a directory and creates it
 * anew under the same inode number, unsynced, between two PUTs of ours.
 */
#define DS_KNOWN_DIRS 16u

typedef struct known_dir {
  char path[PATH_BYTES];
  dev_t dev;
  ino_t ino;
  bool used;
} known_dir;

typedef struct dirstore {
  char root[PATH_BYTES / 2];
  uint64_t temp_counter;
  const cs_spool_sys *sys; /* every file-system call goes through it */
  known_dir known[DS_KNOWN_DIRS];
  uint32_t known_next; /* the slot replaced next (round robin) */
  bool direct;         /* large objects with O_DIRECT (cleared when the file system refuses it) */
} dirstore;

/* Opens dir when it is one this handle made durable and still the same directory; else -1. */
static int known_dir_open(dirstore *ds, const char *dir) {
  for (uint32_t i = 0; i < DS_KNOWN_DIRS; i++) {
    known_dir *k = &ds->known[i];
    if (!k->used || strcmp(k->path, dir) != 0) continue;
    int fd = ds->sys->open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    struct stat st;
    if (fd >= 0 && ds->sys->fstat(fd, &st) == 0 && st.st_dev == k->dev && st.st_ino == k->ino) return fd;
    if (fd >= 0) ds->sys->close(fd);
    k->used = false;
    return -1;
  }
  return -1;
}

/* Remembers dir (open at fd, its chain just made durable). */
static void known_dir_add(dirstore *ds, const char *dir, int fd) {
  struct stat st;
  if (strlen(dir) >= PATH_BYTES || ds->sys->fstat(fd, &st) != 0) return;
  known_dir *k = &ds->known[ds->known_next];
  ds->known_next = (ds->known_next + 1) % DS_KNOWN_DIRS;
  snprintf(k->path, sizeof k->path, "%s", dir);
  k->dev = st.st_dev;
  k->ino = st.st_ino;
  k->used = true;
}

static void result_set(cs_store_result *res, cs_outcome outcome, const char *what, int err) {
  res->outcome = outcome;
  res->http_status = 0;
  if (what == NULL) {
    res->detail[0] = '\0';
    return;
  }
  snprintf(res->detail, sizeof res->detail, "%s%s%s", what, err != 0 ? ": " : "", err != 0 ? strerror(err) : "");
}

static bool char_plain(char c, bool first) {
  if (c == '.') return !first;
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '=' || c == '%';
}

/* Appends the encoded segment [seg, seg+len) and suffix to out; false when too long or invalid. */
static bool segment_encode(const char *seg, size_t len, const char *suffix, char *out, size_t *used, size_t cap) {
  static const char hex[] = "0123456789ABCDEF";
  if (len == 0) return false;
  if ((len == 1 && seg[0] == '.') || (len == 2 && seg[0] == '.' && seg[1] == '.')) return false;
  size_t start = *used;
  for (size_t i = 0; i < len; i++) {
    if (*used + 4 >= cap) return false;
    unsigned char c = (unsigned char)seg[i];
    if (char_plain((char)c, i == 0)) {
      out[(*used)++] = (char)c;
    } else {
      out[(*used)++] = '+';
      out[(*used)++] = hex[c >> 4];
      out[(*used)++] = hex[c & 15u];
    }
  }
  size_t slen = strlen(suffix);
  if (*used + slen + 1 >= cap) return false;
  memcpy(out + *used, suffix, slen + 1);
  *used += slen;
  return *used - start <= CS_DIRSTORE_NAME_MAX;
}

/* The object's path under root/objects; false when the key cannot be stored. */
static bool key_path(const dirstore *ds, const char *key, char *out, size_t cap) {
  size_t key_len = strlen(key);
  if (key_len == 0 || key_len >= CS_KEY_MAX) return false;
  int n = snprintf(out, cap, "%s/objects", ds->root);
  if (n < 0 || (size_t)n >= cap) return false;
  size_t used = (size_t)n;
  const char *seg = key;
  for (;;) {
    const char *slash = memchr(seg, '/', key_len - (size_t)(seg - key));
    size_t len = slash == NULL ? key_len - (size_t)(seg - key) : (size_t)(slash - seg);
    if (used + 2 >= cap) return false;
    out[used++] = '/';
    if (!segment_encode(seg, len, slash == NULL ? ".obj" : ".d", out, &used, cap)) return false;
    if (slash == NULL) return true;
    seg = slash + 1;
  }
}

/* The store rule (cs_store_key_check): a refused key or prefix is CS_E_INVALID_ARGUMENT, named in res. */
static int key_refused(const char *key, bool is_prefix, cs_store_result *res) {
  int rc = cs_store_key_check(key, is_prefix, res->detail, sizeof res->detail);
  if (rc != CS_E_OK) {
    res->outcome = CS_OUT_INVALID;
    res->http_status = 0;
  }
  return rc;
}

/* Decodes a file name without its suffix into key text; false for foreign names. */
static bool name_decode(const char *name, size_t len, char *out, size_t *used, size_t cap) {
  for (size_t i = 0; i < len; i++) {
    if (*used + 1 >= cap) return false;
    if (name[i] != '+') {
      out[(*used)++] = name[i];
      continue;
    }
    if (i + 2 >= len) return false;
    uint8_t byte;
    if (cs_hex_decode(name + i + 1, 2, CS_HEX_UPPER, &byte) != CS_E_OK) return false;
    out[(*used)++] = (char)byte;
    i += 2;
  }
  out[*used] = '\0';
  return true;
}

/*
 * True when name[0..name_len) is exactly what segment_encode writes for the
 * segment seg[0..seg_len) it decodes to: no NUL or '/' in the segment, not
 * "." or "..", capital hex, plain bytes left plain. Any other name is not a
 * key's file.
 */
static bool name_canonical(const char *name, size_t name_len, const char *seg, size_t seg_len) {
  if (memchr(seg, '\0', seg_len) != NULL || memchr(seg, '/', seg_len) != NULL) return false;
  char again[PATH_BYTES];
  size_t used = 0;
  if (!segment_encode(seg, seg_len, "", again, &used, sizeof again)) return false;
  return used == name_len && memcmp(again, name, name_len) == 0;
}

static bool has_suffix(const char *name, size_t len, const char *suffix) {
  size_t slen = strlen(suffix);
  return len > slen && memcmp(name + len - slen, suffix, slen) == 0;
}

static void meta_encode(const cs_object_info *meta, uint8_t out[META_BYTES]) {
  memset(out, 0, META_BYTES);
  memcpy(out, meta_magic, 8);
  if (meta == NULL || !meta->is_pack) return;
  out[8] = 1;
  memcpy(out + 16, meta->pack_id.bytes, 16);
  memcpy(out + 32, meta->sha256, 32);
  for (int i = 0; i < 4; i++) out[64 + i] = (uint8_t)(meta->record_count >> (8 * i));
  for (int i = 0; i < 8; i++) out[72 + i] = (uint8_t)(meta->created_at_ns >> (8 * i));
}

static bool meta_decode(const uint8_t in[META_BYTES], cs_object_info *info) {
  memset(info, 0, sizeof *info);
  if (memcmp(in, meta_magic, 8) != 0 || in[8] > 1) return false;
  info->is_pack = in[8] == 1;
  memcpy(info->pack_id.bytes, in + 16, 16);
  memcpy(info->sha256, in + 32, 32);
  for (int i = 0; i < 4; i++) info->record_count |= (uint32_t)in[64 + i] << (8 * i);
  for (int i = 0; i < 8; i++) info->created_at_ns |= (uint64_t)in[72 + i] << (8 * i);
  return true;
}

static bool write_all(const dirstore *ds, int fd, const void *bytes, size_t len) {
  const uint8_t *p = bytes;
  while (len > 0) {
    ssize_t n = ds->sys->write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= (size_t)n;
  }
  return true;
}

/* fsyncs a directory, so the names in it survive a crash; errno set on failure. */
static bool fsync_dir(const dirstore *ds, const char *path) {
  int fd = ds->sys->open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return false;
  bool ok = ds->sys->fsync(fd) == 0;
  int err = errno;
  ds->sys->close(fd);
  errno = err;
  return ok;
}

/*
 * Creates every ".d" directory of path (all but its last component). A
 * directory it creates is made durable in its parent before it is used; when
 * that fails the directory is removed again (so a later PUT creates and
 * syncs it) and the PUT fails. errno set on failure.
 */
static bool make_parents(const dirstore *ds, char *path, size_t root_len) {
  for (char *p = path + root_len + 1; (p = strchr(p, '/')) != NULL; p++) {
    *p = '\0';
    int rc = ds->sys->mkdir(path, 0755);
    int err = errno;
    bool ok = rc == 0 || err == EEXIST;
    if (ok) {
      /*
       * Synced into its parent even when it already existed: another PUT may
       * have made it a moment ago and not synced it yet (or failed to). An
       * fsync of a directory with nothing unsynced is cheap.
       */
      char *slash = strrchr(path, '/');
      *slash = '\0';
      ok = fsync_dir(ds, path);
      err = errno;
      *slash = '/';
      if (!ok && rc == 0) (void)ds->sys->unlinkat(AT_FDCWD, path, AT_REMOVEDIR);
    }
    *p = '/';
    if (!ok) {
      errno = err;
      return false;
    }
  }
  return true;
}

/*
 * Large objects are written with O_DIRECT where the file system takes it:
 * the bytes go from an aligned buffer to the device, not into new page-cache
 * pages. On the machines measured a buffered write into new pages cost
 * 1.0-1.25 ms of CPU per MB against 0.15 for O_DIRECT (docs/performance.md,
 * "Python capture"): the PUT of every pack was most of capture's CPU on the
 * embedded defaults. The header and the bytes go through a bounce buffer
 * (the header's 80 bytes put every later byte off alignment); the last write
 * is padded to DS_DIRECT_ALIGN with zeros and the file is cut to its size
 * before the fsync. Where O_DIRECT is refused (EINVAL from the open or any
 * call of the direct write) the object is written again through the page
 * cache, and this handle does not try O_DIRECT again. Small objects
 * (leases, probes) always go through the page cache.
 */
#define DS_DIRECT_ALIGN ((size_t)4096)
#define DS_DIRECT_BYTES ((size_t)1 << 20)
#define DS_DIRECT_MIN_BYTES ((size_t)256 << 10)

/* errno after a failed call, or EIO when the call left it 0: a failure is never 0. */
static int errno_or_eio(void) { return errno != 0 ? errno : EIO; }

/* One aligned write of the bounce buffer; false with errno set. */
static bool direct_put(const dirstore *ds, int fd, const uint8_t *buffer, size_t length) {
  assert(length % DS_DIRECT_ALIGN == 0 && ((uintptr_t)buffer % DS_DIRECT_ALIGN) == 0);
  return write_all(ds, fd, buffer, length);
}

/* Writes header + bytes to fd (opened with O_DIRECT) through an aligned buffer; 0 or an errno. */
static int direct_write(const dirstore *ds, int fd, const uint8_t header[META_BYTES], const uint8_t *bytes,
                        size_t len) {
  uint8_t *buffer = NULL;
  if (posix_memalign((void **)&buffer, DS_DIRECT_ALIGN, DS_DIRECT_BYTES) != 0) return ENOMEM;
  memcpy(buffer, header, META_BYTES);
  size_t fill = META_BYTES, done = 0;
  int err = 0;
  while (err == 0) {
    size_t take = len - done < DS_DIRECT_BYTES - fill ? len - done : DS_DIRECT_BYTES - fill;
    memcpy(buffer + fill, bytes + done, take);
    fill += take;
    done += take;
    if (done == len) break;
    assert(fill == DS_DIRECT_BYTES);
    if (!direct_put(ds, fd, buffer, fill)) err = errno_or_eio();
    fill = 0;
  }
  if (err == 0) {
    size_t padded = (fill + DS_DIRECT_ALIGN - 1) / DS_DIRECT_ALIGN * DS_DIRECT_ALIGN;
    memset(buffer + fill, 0, padded - fill);
    if (!direct_put(ds, fd, buffer, padded) || ds->sys->ftruncate(fd, (off_t)(META_BYTES + len)) != 0)
      err = errno_or_eio();
  }
  free(buffer);
  return err;
}

/* Writes header and bytes to the temp file tmp (created now), fsynced; 0 or an errno (tmp removed). */
static int temp_write_as(dirstore *ds, const char *tmp, bool direct, const uint8_t header[META_BYTES],
                         const void *bytes, size_t len) {
  int fd = ds->sys->open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0) return errno_or_eio();
  int err = 0;
  if (direct) err = direct_write(ds, fd, header, bytes, len);
  else if (!write_all(ds, fd, header, META_BYTES) || (len > 0 && !write_all(ds, fd, bytes, len)))
    err = errno_or_eio();
  if (err == 0 && ds->sys->fsync(fd) != 0) err = errno_or_eio();
  if (ds->sys->close(fd) != 0 && err == 0) err = errno_or_eio();
  if (err == 0) return 0;
  ds->sys->unlinkat(AT_FDCWD, tmp, 0);
  return err;
}

/* Writes header and bytes to a fresh temp file, fsynced. */
static int temp_write(dirstore *ds, const void *bytes, size_t len, const cs_object_info *meta, char *tmp,
                      size_t cap) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int n = snprintf(tmp, cap, "%s/tmp/%ld-%llu-%ld.tmp", ds->root, (long)getpid(),
                   (unsigned long long)++ds->temp_counter, (long)ts.tv_nsec);
  if (n < 0 || (size_t)n >= cap) return ENAMETOOLONG;
  uint8_t header[META_BYTES];
  meta_encode(meta, header);
  bool direct = ds->direct && len >= DS_DIRECT_MIN_BYTES;
  int err = temp_write_as(ds, tmp, direct, header, bytes, len);
  if (err == EINVAL && direct) {
    ds->direct = false; /* this file system refuses O_DIRECT: every later PUT goes through the page cache */
    err = temp_write_as(ds, tmp, false, header, bytes, len);
  }
  return err;
}

static void parent_of(const char *path, char *out, size_t cap) {
  snprintf(out, cap, "%s", path);
  char *slash = strrchr(out, '/');
  if (slash != NULL) *slash = '\0';
}

static int ds_put(void *self, const char *key, const void *bytes, size_t len, const cs_object_info *meta,
                  bool if_none_match, cs_store_result *res) {
  dirstore *ds = self;
  if (res == NULL || (bytes == NULL && len > 0)) return CS_E_INVALID_ARGUMENT;
  if (key_refused(key, false, res) != CS_E_OK) return CS_E_INVALID_ARGUMENT;
  char path[PATH_BYTES], tmp[PATH_BYTES], dir[PATH_BYTES];
  if (!key_path(ds, key, path, sizeof path)) {
    result_set(res, CS_OUT_INVALID, "key not representable in dirstore", 0);
    return CS_E_OK;
  }
  int err = temp_write(ds, bytes, len, meta, tmp, sizeof tmp);
  if (err != 0) {
    result_set(res, CS_OUT_SERVER_ERROR, "temp write", err);
    return CS_E_OK;
  }
  /*
   * Publish relative to the parent directory's descriptor, and fsync that
   * descriptor: a concurrent DELETE may remove an empty parent at any point
   * (then mkdir, open or link/rename fail with ENOENT and the PUT tries
   * again, a bounded number of times), but never a directory holding the
   * object just published.
   */
  const char *leaf = strrchr(path, '/') + 1;
  const char *step = "mkdir";
  int rc = -1, dirfd = -1;
  parent_of(path, dir, sizeof dir);
  for (int attempt = 0; attempt < 4; attempt++) {
    dirfd = attempt == 0 ? known_dir_open(ds, dir) : -1;
    if (dirfd < 0) {
      step = "mkdir";
      if (!make_parents(ds, path, strlen(ds->root) + strlen("/objects"))) {
        err = errno;
        if (err == ENOENT) continue;
        break;
      }
      step = "open directory";
      dirfd = ds->sys->open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
      if (dirfd < 0) {
        err = errno;
        if (err == ENOENT) continue;
        break;
      }
      known_dir_add(ds, dir, dirfd);
    }
    step = if_none_match ? "link" : "rename";
    rc = if_none_match ? ds->sys->linkat(AT_FDCWD, tmp, dirfd, leaf, 0) : ds->sys->renameat(AT_FDCWD, tmp, dirfd, leaf);
    err = rc == 0 ? 0 : errno;
    if (rc == 0 || err != ENOENT) break;
    ds->sys->close(dirfd);
    dirfd = -1;
  }
  if (if_none_match || rc != 0) ds->sys->unlinkat(AT_FDCWD, tmp, 0);
  if (rc != 0) {
    if (dirfd >= 0) ds->sys->close(dirfd);
    if (err == EEXIST && if_none_match) result_set(res, CS_OUT_PRECONDITION, "object exists", 0);
    else result_set(res, CS_OUT_SERVER_ERROR, step, err);
    return CS_E_OK;
  }
  bool synced = ds->sys->fsync(dirfd) == 0;
  err = errno;
  ds->sys->close(dirfd);
  if (!synced) {
    /* Published, maybe not durable: as a request whose answer was lost, it may or may not stand. */
    result_set(res, CS_OUT_UNKNOWN, "published, but the fsync of its directory failed", err);
    return CS_E_OK;
  }
  result_set(res, CS_OUT_OK, NULL, 0);
  return CS_E_OK;
}

/* Opens the object file and reads its header; answers the outcome. */
static cs_outcome object_open(dirstore *ds, const char *key, int *fd_out, cs_object_info *info, uint64_t *size,
                              cs_store_result *res) {
  char path[PATH_BYTES];
  if (!key_path(ds, key, path, sizeof path)) {
    result_set(res, CS_OUT_NOT_FOUND, "key not representable in dirstore", 0);
    return CS_OUT_NOT_FOUND;
  }
  int fd = ds->sys->open(path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    int err = errno;
    cs_outcome out = err == ENOENT || err == ENOTDIR ? CS_OUT_NOT_FOUND : CS_OUT_SERVER_ERROR;
    result_set(res, out, "open", err);
    return out;
  }
  uint8_t header[META_BYTES];
  struct stat st;
  if (ds->sys->fstat(fd, &st) != 0 || st.st_size < (off_t)META_BYTES ||
      ds->sys->pread(fd, header, META_BYTES, 0) != META_BYTES || !meta_decode(header, info)) {
    ds->sys->close(fd);
    result_set(res, CS_OUT_SERVER_ERROR, "object header unreadable", 0);
    return CS_OUT_SERVER_ERROR;
  }
  info->size_bytes = (uint64_t)st.st_size - META_BYTES;
  *size = info->size_bytes;
  *fd_out = fd;
  result_set(res, CS_OUT_OK, NULL, 0);
  return CS_OUT_OK;
}

static int ds_head(void *self, const char *key, cs_object_info *info, cs_store_result *res) {
  if (info == NULL || res == NULL) return CS_E_INVALID_ARGUMENT;
  if (key_refused(key, false, res) != CS_E_OK) return CS_E_INVALID_ARGUMENT;
  int fd = -1;
  uint64_t size = 0;
  if (object_open(self, key, &fd, info, &size, res) == CS_OUT_OK) ((dirstore *)self)->sys->close(fd);
  return CS_E_OK;
}

/*
 * Resolves a range against size as HTTP Range does: a suffix longer than the
 * object is the whole object; an offset at or past the end is refused.
 */
static bool range_resolve(const cs_range *range, uint64_t size, uint64_t *offset, uint64_t *length) {
  if (range == NULL) {
    *offset = 0;
    *length = size;
    return true;
  }
  if (range->suffix) {
    if (range->length == 0) return false;
    *length = range->length < size ? range->length : size;
    *offset = size - *length;
    return true;
  }
  if (range->offset >= size || range->length == 0) return false;
  *offset = range->offset;
  *length = size - range->offset < range->length ? size - range->offset : range->length;
  return true;
}

static int ds_get(void *self, const char *key, const cs_range *range, void *buf, size_t cap, size_t *got,
                  cs_store_result *res) {
  if (got == NULL || res == NULL || (buf == NULL && cap > 0)) return CS_E_INVALID_ARGUMENT;
  *got = 0;
  if (key_refused(key, false, res) != CS_E_OK) return CS_E_INVALID_ARGUMENT;
  int fd = -1;
  uint64_t size = 0, offset = 0, length = 0;
  cs_object_info info;
  const dirstore *ds = self;
  if (object_open(self, key, &fd, &info, &size, res) != CS_OUT_OK) return CS_E_OK;
  if (!range_resolve(range, size, &offset, &length)) {
    ds->sys->close(fd);
    result_set(res, CS_OUT_INVALID, "range not satisfiable", 0);
    return CS_E_OK;
  }
  if (length > cap) {
    ds->sys->close(fd);
    return CS_E_TOO_LARGE;
  }
  size_t done = 0;
  int err = 0;
  while (done < length) {
    ssize_t n = ds->sys->pread(fd, (uint8_t *)buf + done, (size_t)length - done, (off_t)(META_BYTES + offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    done += (size_t)n;
  }
  ds->sys->close(fd);
  *got = done;
  if (err != 0) {
    *got = 0;
    result_set(res, CS_OUT_SERVER_ERROR, "read", err);
  } else if (done != length) {
    *got = 0;
    result_set(res, CS_OUT_INVALID, "short read", 0);
  }
  return CS_E_OK;
}

/* Keys collected by a LIST walk. */
typedef struct key_set {
  char **keys;
  size_t count, capacity;
} key_set;

static bool key_set_add(key_set *set, const char *key) {
  if (set->count == set->capacity) {
    size_t cap = set->capacity == 0 ? 64 : set->capacity * 2;
    char **keys = realloc(set->keys, cap * sizeof *keys);
    if (keys == NULL) return false;
    set->keys = keys;
    set->capacity = cap;
  }
  set->keys[set->count] = strdup(key);
  return set->keys[set->count++] != NULL;
}

static void key_set_free(key_set *set) {
  for (size_t i = 0; i < set->count; i++) free(set->keys[i]);
  free(set->keys);
}

static int key_cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b); /* bytewise: strcmp compares as unsigned char */
}

typedef struct walk_args {
  const dirstore *ds;
  const char *prefix;
  const char *token;
  key_set *set;
  int depth;
} walk_args;

/* Walks dir (whose keys start with key[0..key_len)) and collects keys after token under prefix. */
static bool walk(const char *dir, char *key, size_t key_len, walk_args *args) {
  if (args->depth > (int)CS_KEY_MAX / 2) return true;
  const cs_spool_sys *sys = args->ds->sys;
  int fd = sys->open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return errno == ENOENT || errno == ENOTDIR; /* removed by a concurrent DELETE: empty */
  DIR *d = sys->fdopendir(fd);
  if (d == NULL) {
    int err = errno;
    sys->close(fd);
    errno = err;
    return false;
  }
  bool ok = true;
  int err = 0;
  struct dirent *ent;
  while (ok) {
    errno = 0;
    if ((ent = sys->readdir(d)) == NULL) {
      err = errno; /* NULL with errno set is an error, not the end: never a page with keys missing */
      ok = err == 0;
      break;
    }
    size_t len = strlen(ent->d_name);
    bool is_dir = has_suffix(ent->d_name, len, ".d");
    bool is_obj = has_suffix(ent->d_name, len, ".obj");
    if (!is_dir && !is_obj) continue;
    size_t used = key_len, name_len = len - (is_dir ? 2 : 4);
    if (!name_decode(ent->d_name, name_len, key, &used, CS_KEY_MAX)) continue;
    if (!name_canonical(ent->d_name, name_len, key + key_len, used - key_len)) continue; /* planted, not a key's */
    size_t plen = strlen(args->prefix);
    size_t cmp_len = used < plen ? used : plen;
    if (memcmp(key, args->prefix, cmp_len) != 0) continue; /* not under prefix: prune */
    if (is_obj) {
      if (used >= plen && strcmp(key, args->token) > 0 && !key_set_add(args->set, key)) {
        ok = false;
        err = ENOMEM;
      }
      continue;
    }
    char sub[PATH_BYTES];
    if (used + 1 >= CS_KEY_MAX || snprintf(sub, sizeof sub, "%s/%s", dir, ent->d_name) >= (int)sizeof sub) continue;
    key[used] = '/';
    key[used + 1] = '\0';
    args->depth++;
    ok = walk(sub, key, used + 1, args);
    if (!ok) err = errno;
    args->depth--;
  }
  sys->closedir(d);
  errno = err;
  return ok;
}

static int ds_list(void *self, const char *prefix, const char *token, uint32_t max_keys, cs_list_page *page,
                   cs_store_result *res) {
  dirstore *ds = self;
  if (prefix == NULL || token == NULL || page == NULL || res == NULL || max_keys == 0 || page->keys == NULL)
    return CS_E_INVALID_ARGUMENT;
  if (key_refused(prefix, true, res) != CS_E_OK) return CS_E_INVALID_ARGUMENT;
  uint32_t limit = max_keys < page->key_capacity ? max_keys : page->key_capacity;
  if (limit == 0) return CS_E_INVALID_ARGUMENT;
  page->key_count = 0;
  page->next_token[0] = '\0';
  char dir[PATH_BYTES], key[CS_KEY_MAX];
  snprintf(dir, sizeof dir, "%s/objects", ds->root);
  key[0] = '\0';
  key_set set = {0};
  walk_args args = {.ds = ds, .prefix = prefix, .token = token, .set = &set};
  if (!walk(dir, key, 0, &args)) {
    int err = errno;
    key_set_free(&set);
    result_set(res, CS_OUT_SERVER_ERROR, "directory walk", err);
    return CS_E_OK;
  }
  if (set.count > 0) qsort(set.keys, set.count, sizeof set.keys[0], key_cmp);
  for (size_t i = 0; i < set.count && page->key_count < limit; i++)
    snprintf(page->keys[page->key_count++], CS_KEY_MAX, "%s", set.keys[i]);
  if (set.count > page->key_count)
    snprintf(page->next_token, sizeof page->next_token, "%s", page->keys[page->key_count - 1]);
  key_set_free(&set);
  result_set(res, CS_OUT_OK, NULL, 0);
  return CS_E_OK;
}

static int ds_del(void *self, const char *key, cs_store_result *res) {
  dirstore *ds = self;
  if (res == NULL) return CS_E_INVALID_ARGUMENT;
  if (key_refused(key, false, res) != CS_E_OK) return CS_E_INVALID_ARGUMENT;
  char path[PATH_BYTES];
  if (!key_path(ds, key, path, sizeof path)) {
    result_set(res, CS_OUT_OK, NULL, 0); /* like S3: deleting an absent key succeeds */
    return CS_E_OK;
  }
  /* Unlink relative to the parent's descriptor and fsync it: a concurrent DELETE may remove the emptied parent. */
  char dir[PATH_BYTES];
  parent_of(path, dir, sizeof dir);
  int dirfd = ds->sys->open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (dirfd < 0) {
    if (errno != ENOENT && errno != ENOTDIR) result_set(res, CS_OUT_SERVER_ERROR, "open directory", errno);
    else result_set(res, CS_OUT_OK, NULL, 0); /* no parent: no object */
    return CS_E_OK;
  }
  if (ds->sys->unlinkat(dirfd, strrchr(path, '/') + 1, 0) != 0) {
    int err = errno;
    ds->sys->close(dirfd);
    if (err != ENOENT && err != ENOTDIR) result_set(res, CS_OUT_SERVER_ERROR, "unlink", err);
    else result_set(res, CS_OUT_OK, NULL, 0);
    return CS_E_OK;
  }
  bool synced = ds->sys->fsync(dirfd) == 0;
  int err = errno;
  ds->sys->close(dirfd);
  if (!synced) {
    /* Gone, maybe not durably: the object may come back after a crash. */
    result_set(res, CS_OUT_UNKNOWN, "unlinked, but the fsync of its directory failed", err);
    return CS_E_OK;
  }
  /* Remove now-empty parents, stopping at the first that is not empty; the known directories may go with them. */
  for (uint32_t i = 0; i < DS_KNOWN_DIRS; i++) ds->known[i].used = false;
  size_t root_len = strlen(ds->root) + strlen("/objects");
  for (char *slash = strrchr(path, '/'); slash != NULL && (size_t)(slash - path) > root_len;
       slash = strrchr(path, '/')) {
    *slash = '\0';
    if (ds->sys->unlinkat(AT_FDCWD, path, AT_REMOVEDIR) != 0) break;
  }
  result_set(res, CS_OUT_OK, NULL, 0);
  return CS_E_OK;
}

static void ds_close(void *self) { free(self); }

static const cs_store_ops dirstore_ops = {
    .name = "dirstore", .put = ds_put, .head = ds_head, .get = ds_get, .list = ds_list, .del = ds_del,
    .close = ds_close};

/*
 * Removes temp files left by writers that died mid-PUT: older than an hour
 * (a PUT takes seconds; this keeps a live writer's file safe even where its
 * pid means nothing here, as in another PID namespace on a shared volume)
 * and named by a pid that is not running here. Best effort: a temp file is
 * never visible as an object, it only takes space.
 */
#define TEMP_STALE_S 3600
static void sweep_temps(const dirstore *ds) {
  char dir[PATH_BYTES], path[PATH_BYTES];
  snprintf(dir, sizeof dir, "%s/tmp", ds->root);
  int fd = ds->sys->open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (fd < 0) return;
  DIR *d = ds->sys->fdopendir(fd);
  if (d == NULL) {
    ds->sys->close(fd);
    return;
  }
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  struct dirent *ent;
  while ((ent = ds->sys->readdir(d)) != NULL) {
    char *end = NULL;
    long pid = strtol(ent->d_name, &end, 10);
    if (end == ent->d_name || *end != '-' || pid <= 0 || !has_suffix(ent->d_name, strlen(ent->d_name), ".tmp")) continue;
    if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    if (snprintf(path, sizeof path, "%s/%s", dir, ent->d_name) >= (int)sizeof path) continue;
    struct stat st;
    if (ds->sys->fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
        st.st_mtime > now.tv_sec - TEMP_STALE_S)
      continue;
    (void)ds->sys->unlinkat(AT_FDCWD, path, 0);
  }
  ds->sys->closedir(d);
}

int cs_dirstore_open(const char *root, cs_store *out) { return cs_dirstore_open_with(root, NULL, out); }

int cs_dirstore_open_with(const char *root, const cs_spool_sys *sys, cs_store *out) {
  if (root == NULL || out == NULL || root[0] == '\0') return CS_E_INVALID_ARGUMENT;
  dirstore *ds = calloc(1, sizeof *ds);
  if (ds == NULL) return CS_E_NO_MEMORY;
  int n = snprintf(ds->root, sizeof ds->root, "%s", root);
  char path[PATH_BYTES];
  if (n <= 0 || (size_t)n >= sizeof ds->root - 64) {
    free(ds);
    return CS_E_INVALID_ARGUMENT;
  }
  while (n > 1 && ds->root[n - 1] == '/') ds->root[--n] = '\0';
  ds->sys = sys != NULL ? sys : cs_spool_sys_posix();
  ds->direct = true;
  /*
   * Its directories are fsynced into their parents at every open, made now
   * or not: an earlier open may have made them and failed to sync them.
   * An object answered OK stays reachable.
   */
  bool ok = ds->sys->mkdir(ds->root, 0755) == 0 || errno == EEXIST;
  if (ok) {
    parent_of(ds->root, path, sizeof path);
    ok = fsync_dir(ds, strchr(ds->root, '/') == NULL ? "." : path[0] == '\0' ? "/" : path);
  }
  snprintf(path, sizeof path, "%s/objects", ds->root);
  ok = ok && (ds->sys->mkdir(path, 0755) == 0 || errno == EEXIST);
  snprintf(path, sizeof path, "%s/tmp", ds->root);
  ok = ok && (ds->sys->mkdir(path, 0755) == 0 || errno == EEXIST);
  ok = ok && fsync_dir(ds, ds->root);
  if (!ok) {
    free(ds);
    return CS_E_IO;
  }
  sweep_temps(ds);
  /* Every field: a reused cs_store must not keep an old store's queue. The flags are what it does (probes check). */
  *out = (cs_store){.ops = &dirstore_ops,
                    .self = ds,
                    .enforces_if_none_match = true,
                    .exact_suffix_ranges = true,
                    .lists_bytewise = true};
  return CS_E_OK;
}
