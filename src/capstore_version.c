/* The library version, one place. */
const char *capstore_version(void);
const char *capstore_version(void) { return "0.1.0"; }
