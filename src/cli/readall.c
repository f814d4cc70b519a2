/* Reading a whole file or stdin (code for `run --lang` and `code`). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int cli_read_all(const char *verb, int fd, const char *what, size_t max, char **out, size_t *outlen)
{
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	if (!buf)
		return EXIT_SANDLOT;
	for (;;) {
		if (len == cap) {
			if (cap >= max) {
				free(buf);
				return cli_usage_error(verb, "%s: larger than %zu MiB", what, max >> 20);
			}
			char *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				return EXIT_SANDLOT;
			}
			buf = nb;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			free(buf);
			return cli_usage_error(verb, "cannot read %s: %s", what, strerror(e));
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	/* NUL-terminated: `run --lang` passes short code on as an argv string
	 * (without the terminator it went on into uninitialised memory, which
	 * ASan's malloc fill showed as bytes that are not UTF-8). */
	if (len == cap) {
		char *nb = realloc(buf, cap + 1);
		if (!nb) {
			free(buf);
			return EXIT_SANDLOT;
		}
		buf = nb;
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
}
