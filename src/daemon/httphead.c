/* Request head check of the front door (contract in httphead.h). */
#include "daemon/httphead.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int is_tchar(unsigned char c)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return 1;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int all_tchar(const char *s, size_t n)
{
	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!is_tchar((unsigned char)s[i]))
			return 0;
	return 1;
}

static int fail(struct httphead *h, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int fail(struct httphead *h, int status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(h->message, sizeof(h->message), fmt, ap);
	va_end(ap);
	h->status = status;
	h->code = code;
	return HTTPHEAD_ERROR;
}

/* A client's bytes shown in a message: printable ASCII, at most 24. */
static void shown(char *out, size_t outlen, const char *s, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 4 < outlen; i++) {
		if (o >= 24) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		unsigned char c = (unsigned char)s[i];
		out[o++] = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? (char)c : '?';
	}
	out[o] = '\0';
}

static int name_is(const char *s, size_t n, const char *name)
{
	return strlen(name) == n && strncasecmp(s, name, n) == 0;
}

static int request_line(const char *s, size_t n, size_t max_target, struct httphead *h)
{
	const char *sp1 = memchr(s, ' ', n);
	if (!sp1 || !all_tchar(s, (size_t)(sp1 - s)))
		return fail(h, 400, "bad_request", "malformed request line (expected METHOD TARGET HTTP/1.1)");
	const char *t = sp1 + 1;
	const char *sp2 = memchr(t, ' ', (size_t)(s + n - t));
	if (!sp2 || sp2 == t || memchr(sp2 + 1, ' ', (size_t)(s + n - sp2 - 1)))
		return fail(h, 400, "bad_request", "malformed request line (expected METHOD TARGET HTTP/1.1)");
	if ((size_t)(sp2 - t) > max_target)
		return fail(h, 414, "uri_too_long", "request URI longer than %zu bytes", max_target);
	const char *v = sp2 + 1;
	size_t vn = (size_t)(s + n - v);
	if (vn == 8 && memcmp(v, "HTTP/1.1", 8) == 0) {
		h->target = t;
		h->target_len = (size_t)(sp2 - t);
		return 0;
	}
	if (vn == 8 && memcmp(v, "HTTP/", 5) == 0 && v[5] >= '0' && v[5] <= '9' && v[6] == '.' &&
	    v[7] >= '0' && v[7] <= '9')
		return fail(h, 505, "http_version_not_supported",
			    "sandlotd speaks HTTP/1.1 only (streamed answers are chunked, so that a "
			    "cut one cannot pass for a whole one), not %.8s", v);
	return fail(h, 400, "bad_request", "malformed request line (expected METHOD TARGET HTTP/1.1)");
}

struct seen {
	int length, te, host, auth;
};

static int header_line(const char *s, size_t n, struct httphead *h, struct seen *seen)
{
	if (s[0] == ' ' || s[0] == '\t')
		return fail(h, 400, "bad_request", "folded header lines are not accepted");
	const char *colon = memchr(s, ':', n);
	if (!colon || !all_tchar(s, (size_t)(colon - s)))
		return fail(h, 400, "bad_request", "malformed header line (expected NAME: VALUE)");
	size_t nn = (size_t)(colon - s);
	const char *v = colon + 1, *end = s + n;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	size_t vn = (size_t)(end - v);
	char show[32];
	if (name_is(s, nn, "Content-Length")) {
		if (seen->length++)
			return fail(h, 400, "bad_request", "duplicated header Content-Length");
		if (vn == 0 || vn > 19)
			goto bad_length;
		uint64_t x = 0;
		for (size_t i = 0; i < vn; i++) {
			if (v[i] < '0' || v[i] > '9')
				goto bad_length;
			x = x * 10 + (uint64_t)(v[i] - '0');
		}
		h->has_length = 1;
		h->content_length = x;
		return 0;
bad_length:
		shown(show, sizeof(show), v, vn);
		return fail(h, 400, "bad_request",
			    "Content-Length \"%s\" is not a number of bytes (decimal digits only)", show);
	}
	if (name_is(s, nn, "Transfer-Encoding")) {
		if (seen->te++)
			return fail(h, 400, "bad_request", "duplicated header Transfer-Encoding");
		if (!(vn == 7 && strncasecmp(v, "chunked", 7) == 0)) {
			shown(show, sizeof(show), v, vn);
			return fail(h, 400, "bad_request",
				    "Transfer-Encoding \"%s\" is not supported (only chunked)", show);
		}
		h->chunked = 1;
		return 0;
	}
	if (name_is(s, nn, "Host")) {
		if (seen->host++)
			return fail(h, 400, "bad_request", "duplicated header Host");
		return 0;
	}
	if (name_is(s, nn, "Authorization")) {
		if (seen->auth++)
			return fail(h, 400, "bad_request", "duplicated header Authorization");
		h->auth = v;
		h->auth_len = vn;
		return 0;
	}
	return 0;
}

int httphead_check(const char *buf, size_t len, size_t max_head, size_t max_target,
		   struct httphead *h)
{
	memset(h, 0, sizeof(*h));
	struct seen seen = { 0 };
	size_t i = 0;
	/* Empty lines before the request line are skipped. */
	while (i < len && (buf[i] == '\n' || buf[i] == '\r')) {
		if (buf[i] == '\r') {
			if (i + 1 == len)
				break;
			if (buf[i + 1] != '\n')
				return fail(h, 400, "bad_request", "a CR not followed by LF in the request head");
			i++;
		}
		i++;
		if (i > max_head)
			return fail(h, 431, "headers_too_large",
				    "request line and headers longer than %zu bytes", max_head);
	}
	for (int line = 0;; line++) {
		size_t j = i;
		for (; j < len && buf[j] != '\n'; j++) {
			unsigned char c = (unsigned char)buf[j];
			if (c == '\r') {
				if (j + 1 < len && buf[j + 1] != '\n')
					return fail(h, 400, "bad_request",
						    "a CR not followed by LF in the request head");
				continue;
			}
			if (c == 0)
				return fail(h, 400, "bad_request", "a NUL byte in the request head");
			if ((c < 0x20 && c != '\t') || c == 0x7f)
				return fail(h, 400, "bad_request",
					    "control character 0x%02x in the request head", c);
		}
		if (j >= len) {
			/* No end of line yet: a request line already too long for
			 * any URI we take is refused now, not when it ends. */
			if (line == 0 && j - i > max_target + 64)
				return fail(h, 414, "uri_too_long", "request URI longer than %zu bytes",
					    max_target);
			if (len >= max_head)
				return fail(h, 431, "headers_too_large",
					    "request line and headers longer than %zu bytes", max_head);
			return HTTPHEAD_INCOMPLETE;
		}
		if (j + 1 > max_head)
			return fail(h, 431, "headers_too_large",
				    "request line and headers longer than %zu bytes", max_head);
		size_t le = j;
		if (le > i && buf[le - 1] == '\r')
			le--;
		if (line == 0) {
			if (request_line(buf + i, le - i, max_target, h) < 0)
				return HTTPHEAD_ERROR;
		} else if (le == i) {
			if (seen.length && seen.te)
				return fail(h, 400, "bad_request",
					    "both Content-Length and Transfer-Encoding (send one of them)");
			h->head_len = j + 1;
			return HTTPHEAD_OK;
		} else if (header_line(buf + i, le - i, h, &seen) < 0) {
			return HTTPHEAD_ERROR;
		}
		i = j + 1;
	}
}
