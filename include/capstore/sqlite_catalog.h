/*
 * capstore/sqlite_catalog.h: the catalog.h contract on an embedded SQLite
 * database (Debian's libsqlite3). Tables carry CS_CATALOG_SCHEMA_VERSION in
 * their names; every primitive is one statement or one IMMEDIATE transaction
 * with bound parameters; the server clock is this process's CLOCK_REALTIME in
 * nanoseconds; WAL, busy timeout and synchronous=FULL. Several connections
 * (processes) may share one file. Schema: docs/adapters.md.
 */
#ifndef CAPSTORE_SQLITE_CATALOG_H
#define CAPSTORE_SQLITE_CATALOG_H

#include "capstore/catalog.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Opens (creating when absent) the database at path and fills *out. Does not
 * create tables: call out->ops->schema_ensure. busy_timeout_ms 0 takes 5000.
 * Returns CS_E_OK, CS_E_INVALID_ARGUMENT, CS_E_IO (SQLite refused the file)
 * or CS_E_NO_MEMORY. Close with out->ops->close(out->self).
 */
int cs_sqlite_catalog_open(const char *path, uint32_t busy_timeout_ms, cs_catalog *out);

/*
 * Writes the names of the tables present, comma-separated, into buf (for
 * tests and the schema check). Returns CS_E_OK, CS_E_TOO_LARGE or CS_E_IO.
 */
int cs_sqlite_catalog_tables(const cs_catalog *catalog, char *buf, size_t buf_size);

#ifdef __cplusplus
}
#endif

#endif
