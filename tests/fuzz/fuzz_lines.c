/* Fuzz entry point for the NDJSON line splitter (src/common/lines.c), which
 * the CLI feeds with sandlotd's event streams in whatever chunks curl hands
 * it.
 *
 * Input: byte 0 picks the line limit, byte 1 the line whose callback fails
 * (255: none), byte 2 seeds the chunk sizes; the rest is the stream.
 * Oracle: the lines passed (and the -1 or -2 the feed returns) are those of
 * a plain split of the whole stream at '\n', whatever the chunking: -2 at
 * the first line (complete or not) longer than the limit, -1 right after
 * the failing callback, and sl_lines_flush() gives the last line when it
 * has no '\n'.
 */
#include <stdlib.h>
#include <string.h>

#include "common/lines.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

struct seen {
	const uint8_t *stream;
	size_t size;
	size_t pos;      /* where the next expected line starts */
	unsigned count;  /* lines passed */
	unsigned fail_at;
};

static int on_line(void *ud, const char *line, size_t len)
{
	struct seen *s = ud;
	/* The next line of the stream, exactly. */
	check(s->pos + len <= s->size && memcmp(line, s->stream + s->pos, len) == 0);
	check(!memchr(line, '\n', len));
	check(s->pos + len == s->size || s->stream[s->pos + len] == '\n');
	s->pos += len + 1;
	return s->count++ == s->fail_at ? -1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	static const size_t limits[] = { 0, 1, 2, 3, 7, 16, 100, 65535, 65536, 70000 };
	size_t max = limits[data[0] % (sizeof(limits) / sizeof(limits[0]))];
	unsigned fail_at = data[1] == 255 ? ~0u : data[1] % 8;
	uint32_t seed = data[2];
	const uint8_t *stream = data + 3;
	size = size - 3;

	/* What a plain split says. */
	int want_rc = 0;
	unsigned want_lines = 0;
	size_t at = 0;
	int last_partial = 0;
	while (at < size) {
		const uint8_t *nl = memchr(stream + at, '\n', size - at);
		size_t len = nl ? (size_t)(nl - (stream + at)) : size - at;
		if (len > max) {
			want_rc = -2;
			break;
		}
		if (!nl) {
			last_partial = 1;
			break;
		}
		if (want_lines++ == fail_at) {
			want_rc = -1;
			break;
		}
		at += len + 1;
	}

	struct sl_lines l = { 0 };
	struct seen s = { .stream = stream, .size = size, .fail_at = fail_at };
	size_t off = 0;
	int rc = 0;
	while (off < size && rc == 0) {
		seed = seed * 1103515245u + 12345u;
		size_t n = 1 + (seed >> 16) % 200;
		if (n > size - off)
			n = size - off;
		rc = sl_lines_feed(&l, (const char *)stream + off, n, max, on_line, &s);
		off += n;
	}
	check(rc == want_rc);
	check(s.count == want_lines);
	if (rc == 0) {
		int frc = sl_lines_flush(&l, on_line, &s);
		check(s.count == want_lines + (unsigned)last_partial);
		check(frc == (last_partial && want_lines == fail_at ? -1 : 0));
		check(s.pos >= size);
		check(sl_lines_flush(&l, on_line, &s) == 0 && s.count == want_lines + (unsigned)last_partial);
	}
	sl_lines_free(&l);
	return 0;
}
