/* Fuzz entry point for the summary of a vm sandbox's console log
 * (src/backend/vm-console.c): the guest writes that log, so its bytes are
 * untrusted.
 *
 * Input: byte 0 picks the output size (1 to 256) and whether the first
 * line is cut (bit 7); the rest is the log's tail.
 * Oracle: the summary is NUL-terminated within the output, printable ASCII
 * only, never empty (when there is room for a byte), and nothing past the
 * output is written; the replay build's ASan checks every read stays in
 * the input.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/vm.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t n = (size_t)(data[0] & 0x7f) * 2 + 1;
	int cut = data[0] >> 7;
	char *buf = malloc(size - 1 + 1);
	char *out = malloc(n + 16);
	check(buf && out);
	memcpy(buf, data + 1, size - 1);
	memset(out, 'X', n + 16);
	sandlot__vm_console_summary(buf, size - 1, cut, out, n);
	size_t len = strnlen(out, n);
	check(len < n);
	for (size_t i = n; i < n + 16; i++)
		check(out[i] == 'X');
	check(len > 0 || n == 1);
	for (size_t i = 0; i < len; i++)
		check(out[i] >= 0x20 && out[i] < 0x7f);
	free(buf);
	free(out);
	return 0;
}
