/*
 * capstore-sim: runs the deterministic simulator.
 *
 *   capstore-sim --seed S            one seed (replays a failure bit for bit)
 *   capstore-sim --seeds N [--first S]
 *   capstore-sim --plan FILE         a hand-written fault plan
 *   options: --trace, --profile swarm|none|all, --without FAULT (repeatable: turn one
 *   drawn fault kind off, to minimise a failure), --minutes M (safety phase),
 *   --quiet, --stop-on-failure, --coverage (after the runs, print the coverage
 *   marks no run reached; with --verbose every mark's count), --require-coverage
 *   (--coverage, and exit 8 when a required mark was never reached),
 *   --reader-defect N (the readers re-introduce defect N, 1..4: a self-check
 *   that the checker's reader invariants can fail; sim/sim.h SIM_READER_DEFECT_*)
 */
#include "sim.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cli {
  uint64_t seed;
  uint64_t seeds;
  bool many;
  const char *plan_path;
  const char *profile;
  bool trace;
  bool quiet;
  bool stop_on_failure;
  bool coverage;
  bool require_coverage;
  bool verbose;
  uint64_t minutes;
  uint64_t without_mask;
  char without_text[256];
  uint64_t reader_defect;
  uint64_t replicas;
  uint64_t replica_defect;
} cli;

/* What to print if a core's assertion aborts the process mid-run. */
static char crash_note[2048];
static size_t crash_note_len;

static void on_fatal_signal(int sig) {
  (void)sig;
  ssize_t n = write(STDOUT_FILENO, crash_note, crash_note_len);
  (void)n;
  _exit(SIM_EXIT_CRASH);
}

static const char *kind_name(int code) {
  switch (code) {
  case SIM_EXIT_CRASH: return "crash";
  case SIM_EXIT_SAFETY: return "safety";
  case SIM_EXIT_LIVENESS: return "liveness";
  case SIM_EXIT_PLAN: return "plan";
  case SIM_EXIT_MODEL: return "model_bound";
  case SIM_EXIT_USAGE: return "usage";
  default: return "ok";
  }
}

static int usage(const char *why) {
  fprintf(stderr, "capstore-sim: %s\nusage: capstore-sim (--seed S | --seeds N [--first S] | --plan FILE)"
                  " [--profile swarm|none|all] [--without FAULT]... [--minutes M] [--trace] [--quiet] [--stop-on-failure]"
                  " [--coverage [--verbose] | --require-coverage] [--reader-defect N]"
                  " [--replicas 2|3] [--replica-defect N]\n", why);
  return SIM_EXIT_USAGE;
}

static bool parse_u64(const char *text, uint64_t *out) {
  if (text == NULL || *text == '\0') return false;
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0' || text[0] < '0' || text[0] > '9') return false;
  *out = v;
  return true;
}

static int parse_args(int argc, char **argv, cli *c) {
  memset(c, 0, sizeof *c);
  c->minutes = 10;
  bool have_seed = false;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--trace") == 0) c->trace = true;
    else if (strcmp(a, "--quiet") == 0) c->quiet = true;
    else if (strcmp(a, "--stop-on-failure") == 0) c->stop_on_failure = true;
    else if (strcmp(a, "--coverage") == 0) c->coverage = true;
    else if (strcmp(a, "--require-coverage") == 0) c->coverage = c->require_coverage = true;
    else if (strcmp(a, "--verbose") == 0) c->verbose = true;
    else if (strcmp(a, "--seed") == 0 || strcmp(a, "--first") == 0) {
      if (!parse_u64(v, &c->seed)) return usage("--seed/--first needs an unsigned integer");
      have_seed = true, i++;
    } else if (strcmp(a, "--seeds") == 0) {
      if (!parse_u64(v, &c->seeds) || c->seeds == 0) return usage("--seeds needs a positive integer");
      c->many = true, i++;
    } else if (strcmp(a, "--minutes") == 0) {
      if (!parse_u64(v, &c->minutes) || c->minutes == 0 || c->minutes > 60) return usage("--minutes needs 1..60");
      i++;
    } else if (strcmp(a, "--reader-defect") == 0) {
      if (!parse_u64(v, &c->reader_defect) || c->reader_defect == 0 || c->reader_defect >= SIM_READER_DEFECT_COUNT_)
        return usage("--reader-defect needs 1..4");
      i++;
    } else if (strcmp(a, "--replicas") == 0) {
      if (!parse_u64(v, &c->replicas) || c->replicas < 2 || c->replicas > 3)
        return usage("--replicas needs 2 or 3");
      i++;
    } else if (strcmp(a, "--replica-defect") == 0) {
      if (!parse_u64(v, &c->replica_defect) || c->replica_defect == 0 || c->replica_defect >= SIM_REPLICA_DEFECT_COUNT_)
        return usage("--replica-defect needs 1 (no quorum), 2 (no barrier) or 3 (parallel quorum writes)");
      i++;
    } else if (strcmp(a, "--plan") == 0 && v != NULL) c->plan_path = v, i++;
    else if (strcmp(a, "--profile") == 0 && v != NULL) c->profile = v, i++;
    else if (strcmp(a, "--without") == 0 && v != NULL) {
      sim_fault f = sim_fault_by_name(v);
      if (strcmp(v, "list_path_order") == 0) c->without_mask |= SIM_WITHOUT_LIST_PATH_ORDER;
      else if (strcmp(v, "claims_concurrent") == 0) c->without_mask |= SIM_WITHOUT_CLAIMS_CONCURRENT;
      else if (strcmp(v, "catalog_clock_s") == 0) c->without_mask |= SIM_WITHOUT_CATALOG_CLOCK_S;
      else if (strcmp(v, "long_keys") == 0) c->without_mask |= SIM_WITHOUT_LONG_KEYS;
      else if (strcmp(v, "arrivals") == 0) c->without_mask |= SIM_WITHOUT_ARRIVALS;
      else if (strcmp(v, "readers") == 0) c->without_mask |= SIM_WITHOUT_READERS;
      else if (strcmp(v, "arrays") == 0) c->without_mask |= SIM_WITHOUT_ARRAYS;
      else if (strcmp(v, "replicas") == 0) c->without_mask |= SIM_WITHOUT_REPLICAS;
      else if (strcmp(v, "open_refused") == 0) c->without_mask |= SIM_WITHOUT_OPEN_REFUSED;
      else if (f == F_COUNT_) return usage("--without needs a fault name as printed in the profile line");
      else c->without_mask |= UINT64_C(1) << f;
      size_t used = strlen(c->without_text);
      snprintf(c->without_text + used, sizeof c->without_text - used, " --without %s", v);
      i++;
    }
    else return usage("unknown or incomplete option");
  }
  if (!have_seed && !c->many && c->plan_path == NULL) return usage("give --seed, --seeds or --plan");
  if (!have_seed) c->seed = 1;
  if (c->many && c->seeds - 1 > UINT64_MAX - c->seed) return usage("--first + --seeds passes the largest seed");
  return 0;
}

static int load_plan(const char *path, cs_plan *plan) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "capstore-sim: cannot open plan %s: %s\n", path, strerror(errno));
    return SIM_EXIT_USAGE;
  }
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text, f);
  bool too_big = n == sizeof text && fgetc(f) != EOF;
  fclose(f);
  if (too_big) {
    fprintf(stderr, "capstore-sim: plan %s is larger than 1 MiB\n", path);
    return SIM_EXIT_USAGE;
  }
  uint32_t line = 0;
  char msg[256];
  if (cs_plan_parse(text, n, plan, &line, msg, sizeof msg) != CS_E_OK) {
    fprintf(stderr, "capstore-sim: %s: %s\n", path, msg);
    return SIM_EXIT_USAGE;
  }
  return 0;
}

/* "capstore-sim --seed S" and every option that shaped the run, then --trace. */
static void replay_text(const cli *c, uint64_t seed, char *buf, size_t size) {
  char minutes[64] = "";
  if (c->minutes != 10) snprintf(minutes, sizeof minutes, " --minutes %" PRIu64, c->minutes);
  if (c->reader_defect != 0)
    snprintf(minutes + strlen(minutes), sizeof minutes - strlen(minutes), " --reader-defect %" PRIu64, c->reader_defect);
  if (c->replicas != 0)
    snprintf(minutes + strlen(minutes), sizeof minutes - strlen(minutes), " --replicas %" PRIu64, c->replicas);
  if (c->replica_defect != 0)
    snprintf(minutes + strlen(minutes), sizeof minutes - strlen(minutes), " --replica-defect %" PRIu64, c->replica_defect);
  snprintf(buf, size, "capstore-sim --seed %" PRIu64 "%s%s%s%s%s%s --trace", seed, c->profile ? " --profile " : "",
           c->profile ? c->profile : "", c->plan_path ? " --plan " : "", c->plan_path ? c->plan_path : "", minutes,
           c->without_text);
}

static void replay_line(const cli *c, uint64_t seed, FILE *out) {
  char line[sizeof crash_note - 128];
  replay_text(c, seed, line, sizeof line);
  fprintf(out, "replay: %s\n", line);
}

/*
 * Written by the crash handler (with write(2) only) when the process aborts:
 * the seed, and the line that replays it.
 */
static void arm_crash_note(const cli *c, uint64_t seed) {
  char line[sizeof crash_note - 128];
  replay_text(c, seed, line, sizeof line);
  int n = snprintf(crash_note, sizeof crash_note,
                   "\nFAIL seed=%" PRIu64 " kind=crash: the process aborted (an assertion or a signal)\nreplay: %s\n",
                   seed, line);
  crash_note_len = n < 0 ? 0 : (size_t)n < sizeof crash_note ? (size_t)n : sizeof crash_note - 1;
}

/* Runs one seed; its coverage marks are added to coverage unless that is NULL. */
static int run_one(const cli *c, const cs_plan *plan, uint64_t seed, FILE *out, sim_coverage *coverage) {
  arm_crash_note(c, seed);
  fflush(out);
  sim_options opts = {.seed = seed, .profile_name = c->profile, .plan = plan, .plan_path = c->plan_path,
                      .trace = c->trace, .out = out, .duration_ns = c->minutes * 60 * CS_SEC_NS,
                      .liveness_ns = 300 * CS_SEC_NS, .without_mask = c->without_mask, .coverage = coverage,
                      .reader_defect = (uint32_t)c->reader_defect, .replicas = (uint32_t)c->replicas,
                      .replica_defect = (uint32_t)c->replica_defect};
  sim_result res;
  sim_run(&opts, &res);
  if (res.exit_code == SIM_EXIT_USAGE) {
    fprintf(stderr, "capstore-sim: %s\n", res.reason);
    return res.exit_code;
  }
  if (res.exit_code != SIM_EXIT_OK) {
    fprintf(out, "FAIL seed=%" PRIu64 " kind=%s at=%.3fs: %s\n", seed, kind_name(res.exit_code),
            (double)res.sim_end_ns / 1e9, res.reason);
    replay_line(c, seed, out);
  }
  fprintf(out, "seed=%" PRIu64 " result=%s events=%" PRIu64 " sim_time=%.1fs trace=%016" PRIx64 "\n", seed,
          kind_name(res.exit_code), res.events, (double)res.sim_end_ns / 1e9, res.trace_hash);
  return res.exit_code;
}

/* Prints the coverage report; a failed run's code comes first, then a required mark never reached. */
static int coverage_end(const cli *c, const sim_coverage *cov, int rc) {
  if (cov == NULL) return rc;
  uint32_t missing = sim_cov_report(cov, c->verbose, stdout);
  if (rc == SIM_EXIT_OK && c->require_coverage && missing > 0) return SIM_EXIT_COVERAGE;
  return rc;
}

int main(int argc, char **argv) {
  cli c;
  signal(SIGABRT, on_fatal_signal);
  signal(SIGSEGV, on_fatal_signal);
  signal(SIGFPE, on_fatal_signal);
  int rc = parse_args(argc, argv, &c);
  if (rc != 0) return rc;
  static cs_plan plan;
  if (c.plan_path != NULL && (rc = load_plan(c.plan_path, &plan)) != 0) return rc;
  const cs_plan *planp = c.plan_path != NULL ? &plan : NULL;
  static sim_coverage coverage;
  sim_coverage *cov = c.coverage ? &coverage : NULL;
  if (!c.many) {
    rc = run_one(&c, planp, c.seed, stdout, cov);
    return rc == SIM_EXIT_USAGE ? rc : coverage_end(&c, cov, rc);
  }
  FILE *sink = c.quiet ? fopen("/dev/null", "w") : stdout;
  if (sink == NULL) return SIM_EXIT_CRASH;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  uint64_t failed = 0;
  int first_failure = 0;
  for (uint64_t i = 0; i < c.seeds; i++) {
    int code = run_one(&c, planp, c.seed + i, sink, cov);
    if (code == SIM_EXIT_OK) continue;
    if (c.quiet) run_one(&c, planp, c.seed + i, stdout, NULL); /* print the failure in full */
    failed++;
    if (first_failure == 0) first_failure = code;
    if (c.stop_on_failure) {
      printf("first failure at seed %" PRIu64 " after %" PRIu64 " seeds\n", c.seed + i, i + 1);
      c.seeds = i + 1;
      break;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf(stderr, "%" PRIu64 " seeds in %.2f s: %.0f seeds per minute\n", c.seeds, secs,
          secs > 0 ? (double)c.seeds * 60.0 / secs : 0.0);
  printf("%" PRIu64 " passed, %" PRIu64 " failed\n", c.seeds - failed, failed);
  if (c.quiet) fclose(sink);
  return coverage_end(&c, cov, first_failure);
}
