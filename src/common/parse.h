/* Parsers of the human-written quantities the CLI and sandlotd accept.
 * Not part of libsandlot's API: a static library of their own
 * (src/common/meson.build, parse_dep) that the programs link. */
#ifndef SANDLOT_COMMON_PARSE_H
#define SANDLOT_COMMON_PARSE_H

#include <stdint.h>

#include "sandlot.h"

/* "512M", "1G", "1.5GiB", "1048576" → bytes.  Units K/M/G/T are binary
 * (1024-based), with or without "i"/"B".  Rejects empty, negative, zero
 * when !allow_zero, overflow and junk. */
int sandlot__parse_size(const char *s, int allow_zero, uint64_t *out, sandlot_error_t **err);
/* "500ms", "30s", "2m", "1h", "1m30s", bare number = seconds → milliseconds. */
int sandlot__parse_duration(const char *s, uint64_t *out_ms, sandlot_error_t **err);
/* "2", "0.5", "1.25" → thousandths of a CPU. */
int sandlot__parse_cpus(const char *s, uint32_t *out_milli, sandlot_error_t **err);

#endif
