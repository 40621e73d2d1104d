/*
 * capstore serve CONFIG: the side-car daemon. It opens the runtime on CONFIG
 * with serve set (the runtime then also ships the packs capture-role
 * processes hand into spool_dir), serves /metrics, /status and /healthz
 * (serve_http.c), logs one event per line (serve_log.c), and closes on
 * SIGTERM or SIGINT within daemon.close_timeout.
 *
 * Signals: SIGTERM, SIGINT, SIGHUP (and SIGUSR1, the close thread's wake-up)
 * are blocked in every thread before the first one starts, and only the main
 * loop takes them, with sigtimedwait: no handler runs, so no work happens in
 * one. The loop wakes at least every LOOP_WAKE_NS to look at the stats; the
 * close runs on a thread of its own so that the loop keeps logging, taking
 * signals and answering the endpoint while it drains.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capstore/capstore.h"
#include "cli.h"
#include "serve.h"

#define EXIT_NOT_DRAINED CLI_EXIT_FAILURE
#define EXIT_NOT_OPENED 3
#define LOOP_WAKE_NS (250u * CS_MS_NS)
#define SIGNAL_WAKE SIGUSR1 /* sent by the close thread when it is done */

typedef struct serve_opts {
  const char *config;
  const char *listen;     /* overrides daemon.listen; NULL: the file's */
  const char *log_path;   /* overrides daemon.log */
  const char *log_format; /* overrides daemon.log_format */
} serve_opts;

/* What the main loop saw last, so that it logs changes only. */
typedef struct serve_seen {
  cs_lease_state lease_state;
  uint64_t lease_term;
  uint64_t set_aside;
  uint64_t adopted_spools;
  uint64_t arrivals_sidelined;
  char engine_error[CS_LAST_ERROR_MAX];
  char service_error[CS_LAST_ERROR_MAX];
  uint64_t next_stats_ns;
} serve_seen;

/* The close, on a thread of its own. */
typedef struct serve_closer {
  pthread_t thread;
  pthread_t main_thread;
  bool started;
  atomic_bool done;
  capstore *cs;
  uint64_t budget_ns;
  int rc;
  char msg[512];
  uint64_t started_ns, ended_ns;
} serve_closer;

typedef struct serve_run {
  serve_opts opts;
  capstore_config cfg; /* the file's, with serve set; its strings live in the settings */
  sigset_t signals;
  serve_log log;
  serve_state state;
  serve_addr addr;
  bool listen;         /* daemon.listen is not empty */
  serve_http *http;
  serve_seen seen;
  serve_closer close;
  char store[600], catalog[600];
} serve_run;

static int serve_usage(FILE *out) {
  fprintf(out,
          "usage: capstore serve CONFIG [--listen HOST:PORT] [--log FILE] [--log-format logfmt|json]\n"
          "\n"
          "The side-car daemon: runs the service on CONFIG (docs/configuration.md) and\n"
          "ships what capture processes put in its spool: packs its own spool recovered\n"
          "and packs that capture-role processes (role \"capture\", the same spool_dir)\n"
          "hand in. It owns spool_dir (one daemon per spool) and, as a publisher, holds\n"
          "the catalog's lease. Until SIGTERM or SIGINT it serves, on daemon.listen:\n"
          "  GET /metrics   Prometheus text exposition (capstore_* metrics)\n"
          "  GET /status    one JSON object: the stats, pid, version, uptime, state\n"
          "  GET /healthz   \"ok\"\n"
          "and logs one event per line (start, open, listening, lease, error, rejected,\n"
          "adopted, arrival_set_aside, stats, signal, close, exit) to daemon.log or\n"
          "standard error. No secret is ever logged: S3 keys and the ClickHouse\n"
          "password come from the environment.\n"
          "\n"
          "options:\n"
          "  --listen HOST:PORT   instead of daemon.listen: an IPv4 literal, [IPv6] or\n"
          "                       localhost; port 0 picks a free port (the `listening`\n"
          "                       event names it); \"\" serves no endpoint\n"
          "  --log FILE           instead of daemon.log: append to FILE (\"\": stderr)\n"
          "  --log-format F       instead of daemon.log_format: logfmt or json\n"
          "\n"
          "signals:\n"
          "  SIGTERM, SIGINT   close: seal, drain within daemon.close_timeout, stop,\n"
          "                    release the lease, exit. Another one while closing is\n"
          "                    logged and the close goes on (the budget bounds it).\n"
          "  SIGHUP            reopen the log file (after logrotate moved it); ignored\n"
          "                    when logging to standard error\n"
          "  SIGPIPE           ignored\n"
          "\n"
          "exit status: 0 closed and drained (nothing left in the spool or owed to the\n"
          "             catalog); 1 closed, but not drained or a close step failed (the\n"
          "             close event and standard error name what is left); 2 usage, or\n"
          "             CONFIG unreadable or invalid (the key is named; role capture is\n"
          "             refused: that is the capture side's configuration); 3 could not\n"
          "             start: the spool is owned by another process (its pid is named),\n"
          "             the store or catalog could not be opened, the log file or the\n"
          "             listen address could not be opened.\n"
          "\n"
          "example: capstore serve /etc/capstore.json --log /var/log/capstore/serve.log\n");
  return out == stdout ? CLI_EXIT_OK : CLI_EXIT_USAGE;
}

/* 0, CLI_EXIT_USAGE (message printed), or -1 for --help (printed). */
static int parse_args(int argc, char **argv, serve_opts *o) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) return serve_usage(stdout), -1;
    const char **slot = strcmp(a, "--listen") == 0       ? &o->listen
                        : strcmp(a, "--log") == 0        ? &o->log_path
                        : strcmp(a, "--log-format") == 0 ? &o->log_format
                                                         : NULL;
    if (slot != NULL && i + 1 < argc) {
      *slot = argv[++i];
    } else if (slot == NULL && a[0] != '-' && o->config == NULL) {
      o->config = a;
    } else {
      fprintf(stderr, "capstore serve: %s '%s'\n", slot != NULL ? "missing value after" : "unknown argument", a);
      return serve_usage(stderr);
    }
  }
  if (o->config == NULL) return fprintf(stderr, "capstore serve: CONFIG is missing\n"), serve_usage(stderr);
  return CLI_EXIT_OK;
}

/* The file, the options over it, validated again: NULL with the reason on stderr. */
static capstore_settings *load_settings(const serve_opts *o) {
  capstore_settings *s = cli_settings_load("serve", o->config);
  if (s == NULL) return NULL;
  const struct {
    const char *option, *key, *value;
  } overrides[] = {{"--listen", "daemon.listen", o->listen},
                   {"--log", "daemon.log", o->log_path},
                   {"--log-format", "daemon.log_format", o->log_format}};
  char msg[600];
  for (size_t i = 0; i < sizeof overrides / sizeof overrides[0]; i++) {
    if (overrides[i].value == NULL) continue;
    if (capstore_settings_set(s, overrides[i].key, overrides[i].value, msg, sizeof msg) != CS_E_OK ||
        capstore_settings_validate(s, msg, sizeof msg) != CS_E_OK) {
      fprintf(stderr, "capstore serve: %s: %s\n", overrides[i].option, msg);
      capstore_settings_free(s);
      return NULL;
    }
  }
  return s;
}

/* scheme://host[:port]/path of url: a user, a password, a query and a fragment are left out. */
static void url_without_secrets(const char *url, char *out, size_t size) {
  const char *scheme_end = strstr(url, "://");
  const char *authority = scheme_end != NULL ? scheme_end + 3 : url;
  size_t authority_len = strcspn(authority, "/?#");
  const char *host = authority;
  for (const char *p = authority; p < authority + authority_len; p++)
    if (*p == '@') host = p + 1;
  const char *path = authority + authority_len;
  snprintf(out, size, "%.*s%.*s%.*s", (int)(authority - url), url, (int)(path - host), host,
           (int)strcspn(path, "?#"), path);
}

static void describe(serve_run *r) {
  const capstore_config *c = &r->cfg;
  char url[500];
  if (c->store_dir != NULL) {
    snprintf(r->store, sizeof r->store, "dir:%s", c->store_dir);
  } else {
    url_without_secrets(c->s3_endpoint != NULL ? c->s3_endpoint : "", url, sizeof url);
    snprintf(r->store, sizeof r->store, "s3:%s/%s", url, c->s3_bucket != NULL ? c->s3_bucket : "");
  }
  if (c->sqlite_path != NULL) {
    snprintf(r->catalog, sizeof r->catalog, "sqlite:%s", c->sqlite_path);
  } else {
    url_without_secrets(c->clickhouse_url != NULL ? c->clickhouse_url : "", url, sizeof url);
    snprintf(r->catalog, sizeof r->catalog, "clickhouse:%s", url);
  }
}

/* Role capture, and a listen address that does not parse: CLI_EXIT_USAGE with the reason on stderr. */
static int check_config(serve_run *r) {
  if (r->cfg.role == CS_ROLE_CAPTURE) {
    fprintf(stderr,
            "capstore serve: %s: role is capture: that is the configuration of a capture process, which hands "
            "its packs to capstore serve; serve a configuration with role publisher or uploader (the same "
            "spool_dir, with store.* and catalog.*)\n",
            r->opts.config);
    return CLI_EXIT_USAGE;
  }
  const char *listen = r->cfg.daemon.listen;
  r->listen = listen != NULL && listen[0] != '\0';
  char err[300];
  if (r->listen && serve_addr_parse(listen, &r->addr, err, sizeof err) != 0) {
    fprintf(stderr, "capstore serve: %s: %s\n", r->opts.listen != NULL ? "--listen" : "daemon.listen", err);
    return CLI_EXIT_USAGE;
  }
  return CLI_EXIT_OK;
}

/* Before any thread starts, so that every thread inherits the mask and only sigtimedwait takes these. */
static void block_signals(serve_run *r) {
  sigemptyset(&r->signals);
  sigaddset(&r->signals, SIGTERM);
  sigaddset(&r->signals, SIGINT);
  sigaddset(&r->signals, SIGHUP);
  sigaddset(&r->signals, SIGNAL_WAKE);
  pthread_sigmask(SIG_BLOCK, &r->signals, NULL);
  struct sigaction ignore;
  memset(&ignore, 0, sizeof ignore);
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, NULL);
}

static const char *role_name(cs_role role) { return role == CS_ROLE_UPLOADER ? "uploader" : "publisher"; }

static void log_start(serve_run *r) {
  SERVE_LOG(&r->log, "info", "start", SF_TEXT("version", capstore_version()), SF_U64("pid", r->state.pid),
            SF_TEXT("config", r->opts.config), SF_TEXT("role", role_name(r->cfg.role)),
            SF_TEXT("spool_dir", r->cfg.spool_dir), SF_TEXT("store", r->store), SF_TEXT("catalog", r->catalog),
            SF_TEXT("listen", r->listen ? r->cfg.daemon.listen : ""),
            SF_U64("close_timeout_ms", r->cfg.daemon.close_timeout_ns / CS_MS_NS));
}

/* Opens the runtime: CLI_EXIT_OK, EXIT_NOT_OPENED, or CLI_EXIT_USAGE for a configuration it refused. */
static int open_runtime(serve_run *r) {
  char msg[600];
  uint64_t t0 = capstore_clock_ns();
  int rc = capstore_open(&r->cfg, &r->state.cs, msg, sizeof msg);
  uint64_t ms = (capstore_clock_ns() - t0) / CS_MS_NS;
  if (rc != CS_E_OK) {
    SERVE_LOG(&r->log, "error", "open", SF_TEXT("result", "failed"), SF_TEXT("error", msg), SF_U64("duration_ms", ms));
    if (r->log.path != NULL) fprintf(stderr, "capstore serve: could not open: %s\n", msg);
    r->state.cs = NULL;
    return rc == CS_E_CONFIG ? CLI_EXIT_USAGE : EXIT_NOT_OPENED;
  }
  capstore_stats st;
  capstore_stats_get(r->state.cs, &st);
  const cs_spool_recovery *rec = &st.capture.recovery;
  SERVE_LOG(&r->log, rec->quarantined > 0 || rec->kept > 0 ? "warn" : "info", "open", SF_TEXT("result", "ok"),
            SF_U64("duration_ms", ms), SF_U64("recovered_packs", st.capture.recovered_packs),
            SF_U64("recovered_bytes", st.capture.recovered_bytes), SF_U64("recovery_quarantined", rec->quarantined),
            SF_U64("recovery_kept", rec->kept), SF_TEXT("recovery_problem", rec->problem));
  return CLI_EXIT_OK;
}

static int start_endpoint(serve_run *r) {
  if (!r->listen) {
    SERVE_LOG(&r->log, "info", "listening", SF_TEXT("addr", ""), SF_TEXT("note", "daemon.listen is empty: no endpoint"));
    return CLI_EXIT_OK;
  }
  char err[400];
  uint16_t port;
  if (serve_http_start(&r->http, &r->addr, &r->state, &port, err, sizeof err) != 0) {
    SERVE_LOG(&r->log, "error", "listening", SF_TEXT("result", "failed"), SF_TEXT("error", err));
    if (r->log.path != NULL) fprintf(stderr, "capstore serve: %s\n", err);
    return EXIT_NOT_OPENED;
  }
  /* The endpoint's thread already answers: /status shows the address from listen_ready on. */
  serve_addr_format(&r->addr, port, r->state.listen, sizeof r->state.listen);
  atomic_store(&r->state.listen_ready, true);
  SERVE_LOG(&r->log, "info", "listening", SF_TEXT("addr", r->state.listen));
  return CLI_EXIT_OK;
}

/* ---- watching the stats -------------------------------------------------------------------------------- */

static void log_stats(serve_run *r, const capstore_stats *st) {
  const cs_snapshot *v = &st->service;
  SERVE_LOG(&r->log, "info", "stats", SF_U64("spooled", v->spooled), SF_U64("uploaded", v->uploaded),
            SF_U64("indexed", v->indexed), SF_U64("handed_off", v->handed_off),
            SF_U64("pending_index", v->pending_index), SF_U64("pending_spool", v->pending_spool),
            SF_U64("backlog", v->backlog), SF_U64("set_aside", v->set_aside),
            SF_U64("oldest_unshipped_ms", v->oldest_unshipped_age_ns / CS_MS_NS),
            SF_U64("bytes_uploaded", st->bytes_uploaded), SF_U64("cycles", v->cycles),
            SF_U64("cycles_failed", v->cycles_failed), SF_U64("inflight", v->inflight),
            SF_TEXT("lease", cs_lease_state_name(v->lease_state)), SF_U64("lease_term", v->lease_term),
            SF_U64("watermark", v->watermark));
}

/* An error text that changed and is not empty: logged once, with where it came from. */
static void watch_error(serve_run *r, char *seen, const char *now, const char *source, const char *level) {
  if (strcmp(seen, now) == 0) return;
  snprintf(seen, CS_LAST_ERROR_MAX, "%s", now);
  if (now[0] != '\0') SERVE_LOG(&r->log, level, "error", SF_TEXT("source", source), SF_TEXT("message", now));
}

static void watch_stats(serve_run *r) {
  capstore_stats st;
  capstore_stats_get(r->state.cs, &st);
  const cs_snapshot *v = &st.service;
  serve_seen *seen = &r->seen;
  /* A renewal takes the next term while held: counted in the stats line (lease_term), not an event of its own. */
  bool renewal = v->lease_state == CS_LEASE_HELD && seen->lease_state == CS_LEASE_HELD;
  if (v->lease_state != seen->lease_state || (v->lease_term != seen->lease_term && !renewal)) {
    SERVE_LOG(&r->log, "info", "lease", SF_TEXT("state", cs_lease_state_name(v->lease_state)),
              SF_U64("term", v->lease_term), SF_TEXT("previous", cs_lease_state_name(seen->lease_state)),
              SF_U64("previous_term", seen->lease_term));
  }
  if (v->lease_state != seen->lease_state || v->lease_term != seen->lease_term) {
    seen->lease_state = v->lease_state;
    seen->lease_term = v->lease_term;
  }
  watch_error(r, seen->engine_error, st.engine_last_error, "engine", "error");
  watch_error(r, seen->service_error, v->last_error, "service", "warn");
  if (v->set_aside > seen->set_aside) {
    SERVE_LOG(&r->log, "warn", "rejected", SF_U64("count", v->set_aside - seen->set_aside),
              SF_U64("total", v->set_aside), SF_U64("listed", v->rejected_count),
              SF_TEXT("last_error", v->last_error));
    seen->set_aside = v->set_aside;
  }
  uint64_t sidelined = st.capture.admit_quarantined + st.arrivals_set_aside;
  if (sidelined > seen->arrivals_sidelined) {
    SERVE_LOG(&r->log, "warn", "arrival_set_aside", SF_U64("count", sidelined - seen->arrivals_sidelined),
              SF_U64("total", sidelined), SF_TEXT("last_error", st.engine_last_error),
              SF_TEXT("note", "a pack handed into the spool failed its check: <name>.quarantined and its .reason"));
    seen->arrivals_sidelined = sidelined;
  }
  if (st.adopted_spools > seen->adopted_spools) {
    SERVE_LOG(&r->log, "warn", "adopted", SF_U64("count", st.adopted_spools - seen->adopted_spools),
              SF_U64("total", st.adopted_spools), SF_TEXT("note", "a capture process died: its sealed packs ship here"));
    seen->adopted_spools = st.adopted_spools;
  }
  uint64_t now = capstore_clock_ns();
  if (r->cfg.daemon.stats_interval_ns != 0 && now >= seen->next_stats_ns) {
    log_stats(r, &st);
    seen->next_stats_ns = now + r->cfg.daemon.stats_interval_ns;
  }
}

/* ---- signals and the close ----------------------------------------------------------------------------- */

static void *close_thread(void *arg) {
  serve_closer *c = arg;
  c->rc = capstore_close(c->cs, c->budget_ns, c->msg, sizeof c->msg);
  c->ended_ns = capstore_clock_ns();
  atomic_store(&c->done, true);
  pthread_kill(c->main_thread, SIGNAL_WAKE);
  return NULL;
}

static const char *signal_name(int sig) {
  return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGUSR1";
}

static void start_close(serve_run *r, int sig) {
  serve_closer *c = &r->close;
  atomic_store(&r->state.closing, true);
  c->cs = r->state.cs;
  c->budget_ns = r->cfg.daemon.close_timeout_ns;
  c->main_thread = pthread_self();
  c->started_ns = capstore_clock_ns();
  SERVE_LOG(&r->log, "info", "signal", SF_TEXT("signal", signal_name(sig)), SF_TEXT("action", "close"),
            SF_U64("budget_ms", c->budget_ns / CS_MS_NS));
  if (pthread_create(&c->thread, NULL, close_thread, c) == 0) {
    c->started = true;
    return;
  }
  /* No thread for it: close here (the loop stops logging meanwhile, which is all that is lost). */
  SERVE_LOG(&r->log, "warn", "close", SF_TEXT("note", "no thread for the close: closing on the main thread"));
  close_thread(c);
}

static void reopen_log(serve_run *r) {
  char err[400];
  int rc = serve_log_reopen(&r->log, err, sizeof err);
  if (rc < 0)
    SERVE_LOG(&r->log, "error", "signal", SF_TEXT("signal", "SIGHUP"), SF_TEXT("action", "reopen failed"),
              SF_TEXT("error", err));
  else
    SERVE_LOG(&r->log, "info", "signal", SF_TEXT("signal", "SIGHUP"),
              SF_TEXT("action", rc > 0 ? "log reopened" : "ignored: logging to standard error"));
}

static void on_signal(serve_run *r, int sig) {
  if (sig == SIGHUP) return reopen_log(r);
  if (sig != SIGTERM && sig != SIGINT) return; /* SIGNAL_WAKE: the loop looks at the close next */
  if (!atomic_load(&r->state.closing)) return start_close(r, sig);
  SERVE_LOG(&r->log, "warn", "signal", SF_TEXT("signal", signal_name(sig)),
            SF_TEXT("action", "ignored: already closing, within the close budget"));
}

/* Until the close is done: signals, and the stats at least every LOOP_WAKE_NS. */
static void serve_loop(serve_run *r) {
  for (;;) {
    struct timespec wait = {0, (long)LOOP_WAKE_NS};
    siginfo_t info;
    int sig = sigtimedwait(&r->signals, &info, &wait);
    if (sig > 0) on_signal(r, sig);
    watch_stats(r);
    if (atomic_load(&r->close.done)) break;
  }
  if (r->close.started) pthread_join(r->close.thread, NULL);
}

/* ---- what is left, and the exit ------------------------------------------------------------------------- */

/*
 * Ready and set-aside packs left in the spool by name, and ready packs stranded in the private spools of capture
 * processes that died (not adopted: a permission, say); -1 when it cannot be read.
 */
static long spool_left(const char *dir, long *set_aside, long *stranded) {
  int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  *set_aside = *stranded = 0;
  if (dirfd < 0) return -1;
  spool_names names;
  long ready = -1;
  if (cli_spool_scan(dirfd, &names) == 0) {
    ready = (long)names.ready.count;
    *set_aside = (long)names.quarantined.count;
    *stranded = (long)names.private_dead_ready;
  }
  cli_spool_names_free(&names);
  close(dirfd);
  return ready;
}

/* Logs the close and returns the exit status: 0 only when the close said drained and nothing is left. */
static int report_close(serve_run *r) {
  serve_closer *c = &r->close;
  capstore_stats st;
  capstore_stats_get(r->state.cs, &st);
  long set_aside, stranded;
  long ready = spool_left(r->cfg.spool_dir, &set_aside, &stranded);
  const cs_snapshot *v = &st.service;
  bool drained = c->rc == CS_E_OK && ready == 0 && stranded == 0 && v->pending_index == 0;
  char left[400], dead[120] = "";
  if (stranded > 0)
    snprintf(dead, sizeof dead, ", %ld in the private spools of capture processes that died", stranded);
  snprintf(left, sizeof left, "%ld pack%s in the spool%s%s, %u owed to the catalog, %u not handed off", ready,
           ready == 1 ? "" : "s", ready < 0 ? " (unreadable)" : "", dead, v->pending_index, v->pending_spool);
  SERVE_LOG(&r->log, drained ? "info" : "error", "close", SF_TEXT("result", c->rc == CS_E_OK ? "ok" : "failed"),
            SF_BOOL("drained", drained), SF_TEXT("error", c->msg), SF_TEXT("left", drained ? "" : left),
            SF_U64("spool_packs", ready < 0 ? 0 : (uint64_t)ready), SF_U64("owed_to_catalog", v->pending_index),
            SF_U64("not_handed_off", v->pending_spool), SF_U64("set_aside_in_spool", (uint64_t)set_aside),
            SF_U64("stranded_in_private_spools", (uint64_t)stranded),
            SF_U64("duration_ms", (c->ended_ns - c->started_ns) / CS_MS_NS));
  if (drained) return CLI_EXIT_OK;
  if (r->log.path != NULL) /* on standard error the close event said it */
    fprintf(stderr, "capstore serve: closed without draining%s%s: left %s\n", c->rc != CS_E_OK ? ": " : "",
            c->rc != CS_E_OK ? c->msg : "", left);
  return EXIT_NOT_DRAINED;
}

/* Closes on this thread (no signal asked for it: the endpoint could not start). */
static void close_now(serve_run *r) {
  serve_closer *c = &r->close;
  c->cs = r->state.cs;
  c->budget_ns = r->cfg.daemon.close_timeout_ns;
  c->main_thread = pthread_self();
  c->started_ns = capstore_clock_ns();
  atomic_store(&r->state.closing, true);
  c->rc = capstore_close(c->cs, c->budget_ns, c->msg, sizeof c->msg);
  c->ended_ns = capstore_clock_ns();
  (void)report_close(r);
}

/* Everything after the options: CLI_EXIT_* as the usage says. */
static int serve_run_main(serve_run *r) {
  int code = check_config(r);
  if (code != CLI_EXIT_OK) return code;
  block_signals(r);
  char err[600];
  const char *format = r->cfg.daemon.log_format;
  if (serve_log_open(&r->log, r->cfg.daemon.log_path, format != NULL && strcmp(format, "json") == 0, err,
                     sizeof err) != 0)
    return fprintf(stderr, "capstore serve: %s\n", err), EXIT_NOT_OPENED;
  describe(r);
  r->state = (serve_state){.cfg = &r->cfg, .config_path = r->opts.config, .store = r->store, .catalog = r->catalog,
                           .pid = (long)getpid(), .started_ns = capstore_clock_ns(), .log = &r->log};
  log_start(r);
  code = open_runtime(r);
  if (code == CLI_EXIT_OK) {
    code = start_endpoint(r);
    if (code == CLI_EXIT_OK) {
      r->seen.next_stats_ns = capstore_clock_ns() + r->cfg.daemon.stats_interval_ns;
      watch_stats(r); /* the lease and errors as they stand after open */
      serve_loop(r);
      serve_http_stop(r->http);
      watch_stats(r); /* the release */
      code = report_close(r);
    } else {
      close_now(r);
    }
    capstore_free(r->state.cs);
  }
  SERVE_LOG(&r->log, code == CLI_EXIT_OK ? "info" : "error", "exit", SF_U64("code", code));
  serve_log_close(&r->log);
  return code;
}

int cli_serve_main(int argc, char **argv) {
  serve_run *r = calloc(1, sizeof *r);
  if (r == NULL) return fprintf(stderr, "capstore serve: out of memory\n"), CLI_EXIT_FAILURE;
  int code = parse_args(argc, argv, &r->opts);
  if (code != CLI_EXIT_OK) return free(r), code < 0 ? CLI_EXIT_OK : code;
  capstore_settings *s = load_settings(&r->opts);
  if (s == NULL) return free(r), CLI_EXIT_USAGE;
  r->cfg = *capstore_settings_config(s);
  r->cfg.serve = true;
  code = serve_run_main(r);
  capstore_settings_free(s);
  free(r);
  return code;
}
