/* Fuzz entry point for sandlot-init's reader of event counter files
 * (init__events_parse in src/init/events.c): the lines "oom_kill N" and
 * "max N" of a cgroup's memory.events, memory.oom_control or pids.events.
 * The bytes come from the kernel through a descriptor the host opened, but
 * a backend may hand init any file, so the reader takes whatever it gets.
 *
 * Input: byte 0 picks the key ("oom_kill" or "max"); the rest is the file.
 * Oracle: the answer is that of a plain reference: the first line starting
 * with the key and a space, whose remainder is a non-empty run of digits
 * fitting 64 bits, or -1 when the first line with that start is malformed
 * or there is none; the reader never reads past the input.
 */
#include <stdlib.h>
#include <string.h>

#include "init/loop.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static int reference(const uint8_t *p, size_t n, const char *key, uint64_t *out)
{
	size_t kl = strlen(key);
	const uint8_t *end = p + n;
	while (p < end) {
		const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
		const uint8_t *le = nl ? nl : end;
		if ((size_t)(le - p) > kl && memcmp(p, key, kl) == 0 && p[kl] == ' ') {
			const uint8_t *d = p + kl + 1;
			if (d == le)
				return -1;
			unsigned __int128 v = 0;
			for (; d < le; d++) {
				if (*d < '0' || *d > '9')
					return -1;
				v = v * 10 + (unsigned)(*d - '0');
				if (v > UINT64_MAX)
					return -1;
			}
			*out = (uint64_t)v;
			return 0;
		}
		p = nl ? nl + 1 : end;
	}
	return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const char *key = data[0] & 1 ? "max" : "oom_kill";
	/* An exact-size copy, so that ASan catches a read past the end. */
	size_t n = size - 1;
	char *buf = malloc(n ? n : 1);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, n);
	uint64_t got = 0xdeadbeef, want = 0;
	int rc = init__events_parse(buf, n, key, &got);
	int ref = reference(data + 1, n, key, &want);
	check(rc == ref);
	check(rc < 0 || got == want);
	free(buf);
	return 0;
}
