/* Swarm testing: per seed, each fault kind is on or off with its own rate. */
#include "sim.h"

#include <string.h>

static const char *const fault_names[F_COUNT_] = {
    "store_outage",   "store_stall",    "store_5xx",       "store_throttle",      "store_unknown",
    "store_slow",     "store_403_head", "catalog_outage",  "catalog_stall",       "catalog_unknown",
    "catalog_too_large", "rivals",      "pause_holder",    "clock_skew",          "poison_large",
    "poison_invalid", "foreign_objects", "crashes",        "torn_writes",         "disk_full",
    "uploaders",      "replace",        "store_other_bytes", "store_changes",     "slow_disk",
    "close",          "close_stalled",  "config_corners",    "catalog_5xx",         "catalog_throttle",
};

const char *sim_fault_name(sim_fault fault) {
  return (unsigned)fault < F_COUNT_ ? fault_names[fault] : "?";
}

sim_fault sim_fault_by_name(const char *name) {
  for (uint32_t i = 0; i < F_COUNT_; i++)
    if (strcmp(fault_names[i], name) == 0) return (sim_fault)i;
  return F_COUNT_;
}

/*
 * Kinds from F_CATALOG_5XX on came after seeds were recorded (faults/seeds.txt,
 * campaigns): they draw from a stream of their own (seeded by late_seed), so
 * the kinds before them, and every draw of a seed that turns them all off,
 * stay as they were.
 */
void sim_profile_draw(sim_profile *profile, cs_prng *prng, uint64_t late_seed) {
  memset(profile, 0, sizeof *profile);
  cs_prng late;
  cs_prng_seed(&late, late_seed);
  for (uint32_t i = 0; i < F_COUNT_; i++) {
    cs_prng *r = i >= F_CATALOG_5XX ? &late : prng;
    profile->on[i] = cs_prng_below(r, 2) == 1;
    /* Rates from rare to frequent: 5 to 100 per thousand opportunities. */
    profile->rate_permille[i] = profile->on[i] ? 5 + (uint32_t)cs_prng_below(r, 96) : 0;
  }
}

int sim_profile_named(sim_profile *profile, const char *name, cs_prng *prng, uint64_t late_seed) {
  if (strcmp(name, "swarm") == 0) {
    sim_profile_draw(profile, prng, late_seed);
    return CS_E_OK;
  }
  memset(profile, 0, sizeof *profile);
  if (strcmp(name, "none") == 0) return CS_E_OK;
  if (strcmp(name, "all") != 0) return CS_E_NOT_FOUND;
  for (uint32_t i = 0; i < F_COUNT_; i++) {
    profile->on[i] = true;
    profile->rate_permille[i] = 30;
  }
  return CS_E_OK;
}

void sim_profile_print(const sim_profile *profile, FILE *out) {
  bool any = false;
  for (uint32_t i = 0; i < F_COUNT_; i++) {
    if (!profile->on[i]) continue;
    fprintf(out, "%s%s=%u", any ? "," : "", fault_names[i], profile->rate_permille[i]);
    any = true;
  }
  if (!any) fputs("none", out);
}
