#include "lines.h"

#include <stdlib.h>
#include <string.h>

/* Make room for `need` bytes in l->buf (doubling from 64 KiB). */
static int reserve(struct sl_lines *l, size_t need)
{
	if (need <= l->cap)
		return 0;
	size_t cap = l->cap ? l->cap : 65536;
	while (cap < need) {
		if (cap > (size_t)-1 / 2)
			return -1;
		cap *= 2;
	}
	char *nb = realloc(l->buf, cap);
	if (!nb)
		return -1;
	l->buf = nb;
	l->cap = cap;
	return 0;
}

int sl_lines_feed(struct sl_lines *l, const char *data, size_t len, size_t max,
		  sl_line_fn on_line, void *ud)
{
	while (len > 0) {
		const char *nl = memchr(data, '\n', len);
		size_t take = nl ? (size_t)(nl - data) : len;
		if (l->len == 0 && nl) {
			if (take > max)
				return -2;
			if (on_line(ud, data, take) < 0)
				return -1;
		} else {
			if (take > max - l->len)
				return -2;
			if (reserve(l, l->len + take + 1) < 0)
				return -1;
			memcpy(l->buf + l->len, data, take);
			l->len += take;
			if (nl) {
				size_t n = l->len;
				l->len = 0;
				if (on_line(ud, l->buf, n) < 0)
					return -1;
			}
		}
		if (!nl)
			break;
		data += take + 1;
		len -= take + 1;
	}
	return 0;
}

int sl_lines_flush(struct sl_lines *l, sl_line_fn on_line, void *ud)
{
	size_t n = l->len;
	l->len = 0;
	return n ? on_line(ud, l->buf, n) : 0;
}

void sl_lines_free(struct sl_lines *l)
{
	free(l->buf);
	*l = (struct sl_lines){ 0 };
}
