/* Fuzz entry point for the checks of MCP requests' headers
 * (src/mcp/headers.c): Accept and Origin, as a client sends them to /mcp.
 *
 * The input is split at its first NUL: an Accept value before it, an
 * Origin value after (the whole input for both if there is none).
 * Oracles: a loopback origin starts with http:// or https://, its host is
 * one of the three loopback names, and what follows is empty or ':' and
 * 1-5 digits; an Accept value that takes a type takes it in any letter
 * case, and one that lists a media type and is then extended with more
 * entries still takes it.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz.h"
#include "mcp/headers.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static int loopback_ref(const char *o)
{
	const char *h = !strncasecmp(o, "http://", 7) ? o + 7 : !strncasecmp(o, "https://", 8) ? o + 8 : NULL;
	if (!h)
		return 0;
	const char *names[] = { "localhost", "127.0.0.1", "[::1]" };
	for (int i = 0; i < 3; i++) {
		size_t n = strlen(names[i]);
		if (strncasecmp(h, names[i], n) != 0)
			continue;
		const char *rest = h + n;
		if (!*rest)
			return 1;
		if (*rest != ':')
			return 0;
		size_t d = 0;
		while (isdigit((unsigned char)rest[1 + d]))
			d++;
		return d >= 1 && d <= 5 && rest[1 + d] == '\0';
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1);
	check(buf != NULL);
	memcpy(buf, data, size);
	buf[size] = '\0';
	const char *accept = buf;
	const char *nul = memchr(buf, '\0', size);
	const char *origin = nul ? nul + 1 : buf;

	check(mcp_origin_loopback(origin) == loopback_ref(origin));

	static const char *const types[] = { "application/json", "text/event-stream" };
	for (int i = 0; i < 2; i++) {
		int takes = mcp_accepts(accept, types[i]);
		char *upper = strdup(accept);
		check(upper != NULL);
		for (char *p = upper; *p; p++)
			*p = (char)toupper((unsigned char)*p);
		check(mcp_accepts(upper, types[i]) == takes || strstr(accept, "*/*") != NULL);
		free(upper);
		if (takes && strlen(accept) < 4096) {
			char more[4200];
			snprintf(more, sizeof(more), "%s, image/png;q=0.1", accept);
			check(mcp_accepts(more, types[i]));
		}
	}
	check(mcp_accepts(NULL, types[0]));
	free(buf);
	return 0;
}
