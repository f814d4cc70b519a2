/* Fuzz entry point for the HTTP/1.x Host parser (src/net/wire.c).
 * Oracles: a name is clean and the head length lies inside the input and
 * ends with the blank line; the answer for a prefix that is not "need more"
 * is the answer for the whole input. */
#include <stdint.h>
#include <string.h>

#include "net_check.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char name[SL_NAME_MAX + 1], pname[SL_NAME_MAX + 1];
	size_t head, phead;
	int full = sl_http_host(data, size, name, &head);
	check(full >= SL_HTTP_IP_LITERAL && full <= SL_HTTP_FOUND);
	if (full == SL_HTTP_FOUND) {
		check_name(name);
		check(head >= 4 && head <= size && head <= SL_HTTP_MAX_HEAD);
		check(memcmp(data + head - 4, "\r\n\r\n", 4) == 0);
	} else {
		check(name[0] == '\0' && head == 0);
	}
	if (full == SL_HTTP_NEED_MORE)
		check(size < SL_HTTP_MAX_HEAD);
	int settled = 0;
	for (size_t k = 1; k <= 16 && size; k++) {
		size_t cut = size * k / 16;
		if (cut == 0)
			continue;
		int st = sl_http_host(data, cut, pname, &phead);
		if (settled || st != SL_HTTP_NEED_MORE) {
			settled = 1;
			check(st == full);
			if (st == SL_HTTP_FOUND)
				check(strcmp(pname, name) == 0 && phead == head);
		}
	}
	return 0;
}
