/*
 * capstore/spool.h: the POSIX spool, the local directory where the sink
 * stages packs (DESIGN.md section 4; docs/spool.md is the detailed record).
 *
 *   in progress  .<pack_id>.<random>.open
 *   sealed       <pack_id>.<created_at_ns>.<record_count>.<sha256>.dmi-pack.ready
 *   sidelined    <ready name>.quarantined, its reason in <ready name>.quarantined.reason
 *   owner lock   .capstore-spool.lock (flock; holds the owner's pid as text)
 *
 * Sealing: write the temp file, fsync it, link it to the ready name (rename
 * where the file system has no hard links), fsync the directory, unlink the
 * temp name. Sealing the same bytes twice is a no-op; different bytes under
 * one pack id is CS_E_CONFLICT. A ready name exists only for a complete,
 * fsynced file, so a crash at any point leaves no half-written pack visible.
 *
 * Every path is built from ids (a pack id, a hash, numbers) and opened with
 * openat relative to the spool's directory descriptor, so nothing escapes
 * the spool root; names read back from the directory are parsed and checked
 * before use.
 *
 * Every system call the spool makes goes through a cs_spool_sys table, so
 * tests can fail the Nth call (SQLite style) or stop after N calls (a crash).
 *
 * A spool is used by one thread at a time, except that a cs_spool_file may
 * be written and synced (cs_spool_file_write, cs_spool_file_sync) by another
 * thread while the spool serves other calls: those touch only the file.
 * The capture runtime serialises the rest and offers thread-safe wrappers
 * (capture.h). Public names use the cs_ prefix like the other headers.
 *
 * Errors: CS_E_INVALID_ARGUMENT (NULL or out-of-contract arguments),
 * CS_E_IO (a system call failed: msg names it and strerror), CS_E_SPOOL_FULL
 * (a write or sync failed because the file system is full, ENOSPC or EDQUOT), CS_E_BUSY
 * (another owner holds the lock), CS_E_CONFLICT, CS_E_NOT_FOUND,
 * CS_E_STATE (sweeping while a temp file of this spool is being written),
 * CS_E_NO_MEMORY, CS_E_TOO_LARGE (an index bound).
 */
#ifndef CAPSTORE_SPOOL_H
#define CAPSTORE_SPOOL_H

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "capstore/pack.h"
#include "capstore/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The system calls of the spool, one pointer each, with POSIX signatures.
 * cs_spool_sys_posix() returns the real ones. A test copies it and wraps
 * entries; every entry must be set. close must release the descriptor even
 * when it reports an error (as Linux does).
 */
typedef struct cs_spool_sys {
  int (*open)(const char *path, int flags, mode_t mode);
  int (*openat)(int dirfd, const char *path, int flags, mode_t mode);
  int (*mkdir)(const char *path, mode_t mode);
  ssize_t (*write)(int fd, const void *bytes, size_t length);
  ssize_t (*pread)(int fd, void *bytes, size_t length, off_t offset);
  int (*fsync)(int fd);
  int (*ftruncate)(int fd, off_t length);
  int (*fstat)(int fd, struct stat *out);
  int (*fstatat)(int dirfd, const char *path, struct stat *out, int flags);
  int (*linkat)(int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags);
  int (*renameat)(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
  int (*unlinkat)(int dirfd, const char *path, int flags);
  int (*close)(int fd);
  int (*flock)(int fd, int operation);
  DIR *(*fdopendir)(int fd);
  struct dirent *(*readdir)(DIR *dir);
  int (*closedir)(DIR *dir);
  /* Linux fallocate(2); NULL: the file system reserves nothing (cs_spool_file_reserve). */
  int (*fallocate)(int fd, int mode, off_t offset, off_t length);
} cs_spool_sys;

const cs_spool_sys *cs_spool_sys_posix(void);

typedef struct cs_spool_options {
  const cs_spool_sys *sys; /* NULL: cs_spool_sys_posix() */
  bool create;             /* create the directory (one level) when missing */
  uint32_t packs_max;      /* bound of the in-memory index of ready packs; 0: 1,000,000 */
  bool direct_io;          /* write temp files with O_DIRECT where the file system takes it
                              (no page cache; each write waits for the device) */
} cs_spool_options;

typedef struct cs_spool cs_spool;

/* Longest name the spool builds or accepts (a ready name is 164 bytes). */
#define CS_SPOOL_NAME_MAX 255u
#define CS_SPOOL_LOCK_NAME ".capstore-spool.lock"
/* The directory in a served spool holding capture-role processes' private spools (capstore.h, rs_handoff.c). */
#define CS_SPOOL_HANDOFF_DIR ".capture"

/* A sealed pack as its ready name (and the file's size) tell it. */
typedef struct cs_spool_entry {
  cs_uuid pack_id;
  uint64_t created_at_ns;
  uint32_t record_count;
  uint8_t sha256[32];
  uint64_t size_bytes;
  char name[CS_SPOOL_NAME_MAX + 1];
} cs_spool_entry;

/*
 * Opens (and with options->create, creates) the spool directory and takes
 * its owner lock. CS_E_BUSY when another owner holds it; msg then names the
 * holder's pid when it could be read. Loads the index of ready packs by
 * name (no hashing). Nothing is swept or checked: see cs_spool_recover.
 */
int cs_spool_open(const char *path, const cs_spool_options *options, cs_spool **out, char *msg,
                  size_t msg_size);

/*
 * Releases the lock and frees the spool. Temp files still being written are
 * unlinked. Returns CS_E_OK or the first error of the clean-up (the spool is
 * freed either way).
 */
int cs_spool_close(cs_spool *spool);

/* The last error's message ("fsync .<id>.<r>.open: Input/output error"); never NULL. */
const char *cs_spool_last_error(const cs_spool *spool);

/* ---- Writing a pack ------------------------------------------------------- */

typedef struct cs_spool_file cs_spool_file;

/*
 * Creates the temp file .<pack_id>.<random>.open (O_EXCL) for a pack being
 * written. The spool buffers writes (1 MiB) and counts bytes.
 */
int cs_spool_begin(cs_spool *spool, const cs_uuid *pack_id, cs_spool_file **out);

/*
 * Appends bytes to the temp file. CS_E_IO (cs_spool_file_error says why);
 * after a failure the file refuses every write.
 */
int cs_spool_file_write(cs_spool_file *file, const void *bytes, size_t length);

/*
 * Reserves the file system's room for the next length bytes written to
 * the temp file (fallocate, its size unchanged; in steps of a few MiB where
 * there is room), so those writes, and the sync of what is buffered, do not
 * fail for a full disk. CS_E_SPOOL_FULL when the file system has no room
 * (ENOSPC, EDQUOT): nothing changed, the file stays usable, and a call
 * once room came back may succeed. CS_E_OK otherwise, also where the file
 * system cannot reserve (a write may then still meet a full disk). The sync
 * gives back what was reserved past the file's end; an abort frees it all.
 * Same thread rules as cs_spool_file_write.
 */
int cs_spool_file_reserve(cs_spool_file *file, size_t length);

/*
 * Whether the spool's temp files get their room reserved: true until a
 * file's fallocate was refused for a reason other than room (the file
 * system cannot), false with a sys table without fallocate. Any thread.
 */
bool cs_spool_reserves(const cs_spool *spool);

/*
 * The first step of a seal, which may run outside the spool's serialisation:
 * writes what is buffered, checks the size and pack id against the summary
 * (CS_E_INVALID_ARGUMENT), fsyncs and closes the temp file (CS_E_IO). The
 * seal then only links. Optional: cs_spool_seal does it when not done.
 */
int cs_spool_file_sync(cs_spool_file *file, const cs_pack_summary *summary);

/* The last error of a file operation; never NULL. */
const char *cs_spool_file_error(const cs_spool_file *file);

/* A cs_pack_write_fn writing to a cs_spool_file (context): 0 or -1. */
int cs_spool_file_write_fn(void *context, const uint8_t *bytes, size_t length);

/* What a seal did. */
typedef enum cs_spool_seal_result {
  CS_SPOOL_SEALED = 1,    /* a new ready file */
  CS_SPOOL_ALREADY = 2,   /* the same bytes were sealed before: nothing changed */
} cs_spool_seal_result;

/*
 * Seals the temp file as the pack summary describes (the writer's summary):
 * checks that the bytes written match summary->size_bytes, fsyncs the file,
 * links it to the ready name, fsyncs the directory and unlinks the temp name.
 * Consumes file whatever the outcome (on failure the temp name is unlinked,
 * best effort; a ready name made before a failed directory fsync is unlinked
 * again so a failed seal leaves no pack behind, best effort), but one: when
 * the link finds no room for the name (ENOSPC, EDQUOT: a directory that
 * needs a new block on a full file system) it answers CS_E_SPOOL_FULL and
 * keeps the synced file, for another cs_spool_seal once room may have come
 * back, or cs_spool_abort.
 * CS_E_CONFLICT when a ready pack with this id has other bytes;
 * CS_E_INVALID_ARGUMENT when the summary disagrees with the file.
 * out (may be NULL) gets the entry and *result (may be NULL) what happened.
 */
int cs_spool_seal(cs_spool *spool, cs_spool_file *file, const cs_pack_summary *summary,
                  cs_spool_entry *out, cs_spool_seal_result *result);

/* Drops a temp file: unlinks its name and frees it. */
void cs_spool_abort(cs_spool *spool, cs_spool_file *file);

/*
 * Seals a whole pack held in memory (verified first with the pack verifier:
 * CS_E_CORRUPT and msg otherwise). For tools and tests.
 */
int cs_spool_put(cs_spool *spool, const uint8_t *object, size_t size, cs_spool_entry *out,
                 cs_spool_seal_result *result);

/* ---- Reading the spool ------------------------------------------------------ */

/*
 * Lists the ready packs by reading the directory and parsing names (plus one
 * fstatat for the size): never re-hashes. Unparseable names are skipped.
 * Fills up to capacity entries in name order (that is pack id order, so
 * time order for UUIDv7 ids); *count gets how many exist (may exceed
 * capacity). Also refreshes the in-memory index.
 */
int cs_spool_list(cs_spool *spool, cs_spool_entry *entries, size_t capacity, size_t *count);

/*
 * The ready packs this handle hands out (its index: what recovery checked,
 * what it sealed and what cs_spool_admit admitted), in name order, without
 * reading the directory. Fills up to capacity; *count gets how many exist.
 */
int cs_spool_entries(const cs_spool *spool, cs_spool_entry *entries, size_t capacity, size_t *count);

/* Quota use from the index: ready packs and their bytes. */
void cs_spool_usage(const cs_spool *spool, uint64_t *bytes, uint32_t *packs);

/* Looks a ready pack up by id in the index: CS_E_OK or CS_E_NOT_FOUND. */
int cs_spool_find(const cs_spool *spool, const cs_uuid *pack_id, cs_spool_entry *out);

/* Opens a ready pack read-only (O_RDONLY|O_CLOEXEC|O_NOFOLLOW); the caller closes *fd. */
int cs_spool_open_pack(cs_spool *spool, const cs_uuid *pack_id, int *fd, cs_spool_entry *out);

/*
 * Removes a ready pack (after hand-off). *size_bytes (may be NULL) gets its
 * size for cs_sink_on_removed. CS_E_NOT_FOUND, or CS_E_IO when the unlink
 * failed (the pack stays). The directory fsync after it is best effort: a
 * power loss that undid the unlink only brings back a pack already handed
 * off, whose second hand-off is a no-op.
 */
int cs_spool_remove(cs_spool *spool, const cs_uuid *pack_id, uint64_t *size_bytes);

/*
 * Sidelines a ready pack: renames it to <name>.quarantined, writes the reason
 * (one line of text) to <name>.quarantined.reason, fsyncs the directory.
 * The reason file is best effort: the rename is what takes the pack out of
 * the ready set. CS_E_NOT_FOUND.
 */
int cs_spool_quarantine(cs_spool *spool, const cs_uuid *pack_id, const char *reason,
                        uint64_t *size_bytes);

/* ---- Recovery ----------------------------------------------------------------- */

/* Longest problem or reason message a recovery pass reports, NUL included. */
#define CS_SPOOL_PROBLEM_MAX 320u

typedef struct cs_spool_recovery {
  uint32_t open_removed;     /* stale .open files unlinked */
  uint32_t ready_ok;         /* ready packs whose bytes match their names */
  uint32_t quarantined;      /* ready packs sidelined by this pass */
  uint32_t skipped;          /* other names left alone (foreign files) */
  uint64_t ready_bytes;      /* bytes of the ready packs after the pass */
  uint32_t errors;           /* system calls (and allocations) that failed; the pass went on */
  uint32_t kept;             /* ready names left in place with no verdict, or with one that
                                could not be carried out: unreadable (EACCES, EIO, EMFILE...),
                                short of memory, or corrupt with a failed rename. None is
                                handed out (listed, found, opened) until a later check settles
                                it; cs_spool_kept names each with its reason */
  uint64_t kept_bytes;       /* their sizes: they still take room on disk */
  int problem_code;          /* the pass's first problem (CS_E_IO, CS_E_NO_MEMORY, ...); 0: none */
  char problem[CS_SPOOL_PROBLEM_MAX]; /* its message ("" when none), naming the file and why */
} cs_spool_recovery;

/* A ready name the last check kept in place (see cs_spool_recovery.kept). */
typedef struct cs_spool_kept_pack {
  char name[CS_SPOOL_NAME_MAX + 1];
  uint64_t size_bytes;                /* 0 when it could not be stat'ed */
  int code;                           /* CS_E_IO, CS_E_NO_MEMORY, ...: no verdict on its bytes;
                                         CS_E_CORRUPT: found corrupt, the quarantine failed */
  char reason[CS_SPOOL_PROBLEM_MAX];  /* what failed, naming the file */
} cs_spool_kept_pack;

/*
 * Removes every stale .open file. The caller states, by making this call,
 * that no sink writes to the spool: the engine calls it before the sink
 * opens. CS_E_STATE while a temp file of this spool handle is open. A temp
 * file that cannot be removed is left, counted in report->errors and named
 * in report->problem; the sweep goes on and still answers CS_E_OK.
 */
int cs_spool_sweep_open(cs_spool *spool, cs_spool_recovery *report);

/*
 * Checks every ready file's bytes against its name with the full pack
 * verifier (trailer, footer, header, every payload CRC, the SHA-256, and
 * the name's pack id, created_at_ns, record count and hash) and quarantines
 * what fails, with the verifier's reason. Also rebuilds the index.
 *
 * Only a verdict on the bytes quarantines. A pack the pass cannot judge (its
 * open or a read fails: EACCES, EIO, EMFILE, ENFILE, ENOMEM; memory runs out
 * in the parser or the verifier) and a corrupt one whose rename fails are
 * kept under their ready names, counted in report->kept and listed by
 * cs_spool_kept, and handed out by no call of this handle until a later
 * check settles them. One bad file never stops the pass.
 *
 * Returns CS_E_OK when the pass went through every name (even if it
 * quarantined or kept packs: see report->kept and report->problem), or the
 * error that stopped it (the directory could not be read, the index could
 * not grow: CS_E_IO, CS_E_NO_MEMORY, CS_E_TOO_LARGE).
 */
int cs_spool_check(cs_spool *spool, cs_spool_recovery *report);

/*
 * The ready names the last cs_spool_check kept in place, in the order it
 * met them: fills up to capacity of out (may be NULL with 0) and returns
 * how many there are.
 */
size_t cs_spool_kept(const cs_spool *spool, cs_spool_kept_pack *out, size_t capacity);

/* cs_spool_sweep_open then cs_spool_check (the recovery pass at start). */
int cs_spool_recover(cs_spool *spool, cs_spool_recovery *report);

/*
 * Admits ready packs another process linked into the directory since the
 * index was built (capstore serve takes capture processes' packs this way):
 * each ready name not in the index is checked as cs_spool_check checks it
 * (the full verifier, bytes against name). A good one is indexed and copied
 * to out; a corrupt one is quarantined with the verifier's reason
 * (report->quarantined); one that cannot be judged now (a read failed,
 * memory ran short) is left as it is, not indexed, for the next pass
 * (report->errors, report->problem). At most capacity packs are admitted per
 * call; the rest wait, unindexed, for the next. *count gets how many were
 * admitted, out holds them in name order. each (may be NULL) is called for
 * every pack admitted, in the walk's order, with the footer the check parsed
 * (footer_length: its bytes in the pack): it may keep the footer by taking
 * it (leaving *footer zeroed); what it leaves is freed. Returns CS_E_OK, or what stopped
 * the walk (the directory could not be read; the index could not grow).
 */
typedef void (*cs_spool_admit_fn)(void *context, const cs_spool_entry *entry, cs_pack_footer *footer,
                                  uint64_t footer_length);
int cs_spool_admit(cs_spool *spool, cs_spool_entry *out, size_t capacity, size_t *count,
                   cs_spool_recovery *report, cs_spool_admit_fn each, void *context);

/* ---- Names ------------------------------------------------------------------- */

/* The ready name of a pack into out[CS_SPOOL_NAME_MAX + 1]. */
void cs_spool_ready_name(const cs_uuid *pack_id, uint64_t created_at_ns, uint32_t record_count,
                         const uint8_t sha256[32], char out[CS_SPOOL_NAME_MAX + 1]);

/*
 * Parses a ready name (exactly the grammar above: canonical lowercase UUID,
 * decimal numbers without leading zeros, 64 lowercase hex digits).
 * CS_E_OK or CS_E_PARSE; out->size_bytes is set to 0.
 */
int cs_spool_parse_ready_name(const char *name, cs_spool_entry *out);

/* True for a sealing temp file's name, ".<uuid>.<16 hex digits>.open": what a sweep removes. */
bool cs_spool_is_open_name(const char *name);

#ifdef __cplusplus
}
#endif

#endif
