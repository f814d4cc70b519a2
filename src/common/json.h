/* JSON helpers shared by the CLI and sandlotd (jansson underneath).
 * Not part of libsandlot, which has no JSON dependency. */
#ifndef SANDLOT_COMMON_JSON_H
#define SANDLOT_COMMON_JSON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "sandlot.h"

/* Text as a JSON string: valid UTF-8 is kept, each invalid byte becomes
 * U+FFFD, so any output yields valid JSON.  Never NULL on success paths
 * (falls back to ""). */
json_t *json_text(const char *buf, size_t len);
/* RFC 3339 UTC ("2026-11-22T00:39:56.123Z") from ms since the epoch; JSON
 * null for 0. */
json_t *json_time(int64_t ms);
/* "created" / "modified" / "deleted" and "file" / "directory" / "symlink" / "other". */
const char *json_change_kind(char kind);
const char *json_file_type(char type);

#endif
