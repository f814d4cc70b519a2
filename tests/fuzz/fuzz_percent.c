/* Fuzz entry point for percent-decoding (src/common/percent.c), which
 * sandlotd applies to the {} segments of request paths.
 *
 * Oracle: a plain reference decoder.  The input decodes exactly when every
 * '%' starts "%XX" with two hex digits and no byte of the result is NUL;
 * the result is then the reference's, byte for byte, and NUL-terminated.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/percent.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static int hex(uint8_t c)
{
	static const char upper[] = "0123456789ABCDEF", lower[] = "0123456789abcdef";
	for (int i = 0; i < 16; i++)
		if (c == (uint8_t)upper[i] || c == (uint8_t)lower[i])
			return i;
	return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *want = malloc(size + 1);
	check(want != NULL);
	size_t n = 0;
	int ok = 1;
	for (size_t i = 0; i < size && ok; i++) {
		int c = data[i];
		if (c == '%') {
			int hi = i + 1 < size ? hex(data[i + 1]) : -1;
			int lo = i + 2 < size ? hex(data[i + 2]) : -1;
			if (hi < 0 || lo < 0) {
				ok = 0;
				break;
			}
			c = hi * 16 + lo;
			i += 2;
		}
		if (c == 0)
			ok = 0;
		want[n++] = (uint8_t)c;
	}
	errno = 0;
	char *got = sandlot__percent_decode((const char *)data, size);
	if (ok) {
		check(got != NULL && strlen(got) == n && memcmp(got, want, n) == 0);
	} else {
		check(got == NULL && errno == EINVAL);
	}
	free(got);
	free(want);
	return 0;
}
