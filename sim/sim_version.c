/* The simulator model version: bump when the canonical trace changes meaning. */
const char *capstore_sim_model_version(void);
const char *capstore_sim_model_version(void) { return "sim-1"; }
