/* Checks of MCP requests' HTTP headers: see headers.h. */
#include "mcp/headers.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

int mcp_accepts(const char *accept, const char *type)
{
	if (!accept)
		return 1;
	size_t n = strlen(type);
	for (const char *p = accept; *p;) {
		p += strspn(p, " \t,");
		size_t len = strcspn(p, ",;");
		size_t end = len;
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if ((len == n && !strncasecmp(p, type, n)) || (len == 3 && !strncmp(p, "*/*", 3)))
			return 1;
		p += end;
		p += strcspn(p, ",");   /* past the parameters */
	}
	return 0;
}

int mcp_origin_loopback(const char *origin)
{
	const char *h = NULL;
	if (!strncasecmp(origin, "http://", 7))
		h = origin + 7;
	else if (!strncasecmp(origin, "https://", 8))
		h = origin + 8;
	if (!h)
		return 0;
	static const char *const loopback[] = { "localhost", "127.0.0.1", "[::1]" };
	for (size_t i = 0; i < sizeof(loopback) / sizeof(loopback[0]); i++) {
		size_t n = strlen(loopback[i]);
		if (strncasecmp(h, loopback[i], n) != 0 || (h[n] != '\0' && h[n] != ':'))
			continue;
		const char *port = h[n] == ':' ? h + n + 1 : "";
		size_t digits = strspn(port, "0123456789");
		return port[digits] == '\0' && digits <= 5 && (h[n] == '\0' || digits > 0);
	}
	return 0;
}
