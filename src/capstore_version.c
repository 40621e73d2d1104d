/* The library version, one place: the CMake project's VERSION, passed in as CAPSTORE_VERSION. */
#include "capstore/capstore.h"

#ifndef CAPSTORE_VERSION
#error "CAPSTORE_VERSION is set by CMakeLists.txt (project VERSION)"
#endif

const char *capstore_version(void) { return CAPSTORE_VERSION; }
