#include "percent.h"

#include <errno.h>
#include <stdlib.h>

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

char *sandlot__percent_decode(const char *s, size_t n)
{
	char *out = malloc(n + 1);
	if (!out) {
		errno = ENOMEM;
		return NULL;
	}
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];
		if (c == '%') {
			int a = n - i > 2 ? hexval(s[i + 1]) : -1;
			int b = a >= 0 ? hexval(s[i + 2]) : -1;
			if (b < 0)
				goto bad;
			c = a * 16 + b;
			i += 2;
		}
		if (c == 0)
			goto bad;
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return out;
bad:
	free(out);
	errno = EINVAL;
	return NULL;
}
