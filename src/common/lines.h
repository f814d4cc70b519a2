/* Complete lines out of a byte stream that arrives in chunks of any size
 * (the CLI's NDJSON event streams from sandlotd).  libc only; fuzzed by
 * tests/fuzz/fuzz_lines.c. */
#ifndef SANDLOT_COMMON_LINES_H
#define SANDLOT_COMMON_LINES_H

#include <stddef.h>

/* A partial line (no '\n' yet).  Zero-initialise; sl_lines_free() at the
 * end. */
struct sl_lines {
	char *buf;
	size_t len, cap;
};

typedef int (*sl_line_fn)(void *ud, const char *line, size_t len);

/* Call on_line for each complete line in data, without its '\n' (a line
 * wholly inside data is passed without a copy), and keep a partial one for
 * the next call.  A line may hold any byte but '\n' (NUL included).
 * Returns 0; -1 if on_line returned < 0 (no further line is passed) or
 * memory ran out; -2 if a line grew past max bytes (nothing more is
 * read).  After -1 or -2 the state is unspecified: only sl_lines_free()
 * may follow. */
int sl_lines_feed(struct sl_lines *l, const char *data, size_t len, size_t max,
		  sl_line_fn on_line, void *ud);

/* The last line, when the stream ended without its '\n': on_line's
 * result, or 0 when there is none. */
int sl_lines_flush(struct sl_lines *l, sl_line_fn on_line, void *ud);

void sl_lines_free(struct sl_lines *l);

#endif
