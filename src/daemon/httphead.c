/* Request head check of the front door (contract in httphead.h).
 *
 * The head is parsed by http-parser (the library the port proxy reads
 * answers with), paused when the headers are complete; its callbacks count
 * the headers whose repetition or combination would make libmicrohttpd
 * and a client (or a proxy in front) disagree about the request, and keep
 * the Authorization value (and E2B's X-API-KEY, X-Access-Token,
 * E2B-Traffic-Access-Token and E2b-Sandbox-Id) and the target.  http-parser itself refuses a
 * Content-Length that is not decimal digits, two of them, one with
 * Transfer-Encoding, control bytes in the head and a CR without LF. */
#include "daemon/httphead.h"

#include <http_parser.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

enum hdr { H_OTHER, H_LENGTH, H_TE, H_HOST, H_AUTH, H_APIKEY, H_ACCESS, H_SBID, H_TRAFFIC };

struct scan {
	struct httphead *h;
	const char *buf;
	int error;                 /* a refusal of ours, message in h */
	const char *name;          /* the last header name */
	size_t name_len;
	enum hdr cur;              /* what it names, once its value starts */
	int values;                /* on_header_value calls for it */
	const char *value;         /* its value, judged once complete */
	size_t value_len;
	int pending;
	int seen[9];
};

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

static struct scan *scan_of(http_parser *p)
{
	return p->data;
}

static int on_url(http_parser *p, const char *at, size_t n)
{
	struct scan *sc = scan_of(p);
	if (!sc->h->target)
		sc->h->target = at;
	sc->h->target_len += n;
	return 0;
}

/* The value of the header before, now complete: -1 if refused. */
static int judge_value(struct scan *sc)
{
	if (!sc->pending)
		return 0;
	sc->pending = 0;
	struct httphead *h = sc->h;
	const char *at = sc->value;
	size_t n = sc->value_len;
	while (n > 0 && (at[n - 1] == ' ' || at[n - 1] == '\t'))
		n--;
	if (sc->cur == H_TE && !(n == 7 && strncasecmp(at, "chunked", 7) == 0)) {
		char show[32];
		shown(show, sizeof(show), at, n);
		fail(h, 400, "bad_request", "Transfer-Encoding \"%s\" is not supported (only chunked)",
		     show);
		return -1;
	}
	if (sc->cur == H_AUTH) {
		h->auth = at;
		h->auth_len = n;
	} else if (sc->cur == H_APIKEY) {
		h->api_key = at;
		h->api_key_len = n;
	} else if (sc->cur == H_ACCESS) {
		h->access_token = at;
		h->access_token_len = n;
	} else if (sc->cur == H_SBID) {
		h->sandbox_id = at;
		h->sandbox_id_len = n;
	} else if (sc->cur == H_TRAFFIC) {
		h->traffic_token = at;
		h->traffic_token_len = n;
	} else if (sc->cur == H_HOST) {
		h->host = at;
		h->host_len = n;
	}
	return 0;
}

/* The parser hands over a name or value in one piece unless the buffer
 * ends inside it: so a name is judged once its value starts (the colon was
 * seen), and a value once the next header or the end of the head comes.
 * A head cut inside either is incomplete, never refused for the part seen
 * (a "Transfer-Encoding: chunk" that may become "chunked"). */
static int on_header_field(http_parser *p, const char *at, size_t n)
{
	struct scan *sc = scan_of(p);
	if (judge_value(sc) < 0)
		return sc->error = 1;
	for (size_t i = 0; i < n; i++)
		if (at[i] == ' ' || at[i] == '\t') {
			fail(sc->h, 400, "bad_request", "whitespace in a header name (before its colon)");
			return sc->error = 1;
		}
	sc->name = at;
	sc->name_len = n;
	sc->values = 0;
	return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t n)
{
	struct scan *sc = scan_of(p);
	struct httphead *h = sc->h;
	if (sc->values++) {
		/* A second piece of one value: a folded line (the buffer is
		 * whole up to here, so the parser never splits a value
		 * otherwise). */
		fail(h, 400, "bad_request", "folded header lines are not accepted");
		return sc->error = 1;
	}
	const char *name = sc->name;
	size_t nl = sc->name_len;
	sc->cur = name_is(name, nl, "Content-Length") ? H_LENGTH
		: name_is(name, nl, "Transfer-Encoding") ? H_TE
		: name_is(name, nl, "Host") ? H_HOST
		: name_is(name, nl, "Authorization") ? H_AUTH
		: name_is(name, nl, "X-API-KEY") ? H_APIKEY
		: name_is(name, nl, "X-Access-Token") ? H_ACCESS
		: name_is(name, nl, "E2b-Sandbox-Id") ? H_SBID
		: name_is(name, nl, "E2B-Traffic-Access-Token") ? H_TRAFFIC : H_OTHER;
	static const char *const names[] = { NULL, "Content-Length", "Transfer-Encoding", "Host",
					     "Authorization", "X-API-KEY", "X-Access-Token",
					     "E2b-Sandbox-Id", "E2B-Traffic-Access-Token" };
	if (sc->cur != H_OTHER && sc->seen[sc->cur]++) {
		fail(h, 400, "bad_request", "duplicated header %s", names[sc->cur]);
		return sc->error = 1;
	}
	sc->value = at;
	sc->value_len = n;
	sc->pending = 1;
	return 0;
}

static int on_headers_complete(http_parser *p)
{
	struct scan *sc = scan_of(p);
	if (judge_value(sc) < 0) {
		sc->error = 1;
		return -1;
	}
	http_parser_pause(p, 1);
	return 0;
}

/* Why http-parser refused the head, for the client. */
static int parser_error(struct httphead *h, enum http_errno e)
{
	switch (e) {
	case HPE_INVALID_CONTENT_LENGTH:
		return fail(h, 400, "bad_request",
			    "Content-Length is not a number of bytes (decimal digits only)");
	case HPE_UNEXPECTED_CONTENT_LENGTH:
		return fail(h, 400, "bad_request",
			    "Content-Length given twice, or with Transfer-Encoding (send one of them)");
	case HPE_INVALID_TRANSFER_ENCODING:
		return fail(h, 400, "bad_request",
			    "Transfer-Encoding is not supported (only chunked)");
	case HPE_INVALID_METHOD:
		return fail(h, 400, "bad_request", "malformed request line (unknown method)");
	case HPE_INVALID_URL:
		return fail(h, 400, "bad_request", "malformed request line (invalid request target)");
	case HPE_INVALID_VERSION:
		return fail(h, 400, "bad_request", "malformed request line (expected HTTP/1.1)");
	case HPE_HEADER_OVERFLOW:
		return fail(h, 431, "headers_too_large", "request line and headers too long");
	default:
		return fail(h, 400, "bad_request", "malformed request head (%s)",
			    http_errno_description(e));
	}
}

/* Bytes that no head may hold, named: a NUL, a CR not followed by LF, another
 * control character than HTAB. */
static int bad_byte(struct httphead *h, const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (c == 0)
			return fail(h, 400, "bad_request", "a NUL byte in the request head");
		if (c == '\r' && i + 1 < len && buf[i + 1] != '\n')
			return fail(h, 400, "bad_request", "a CR not followed by LF in the request head");
		if ((c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f)
			return fail(h, 400, "bad_request", "control character 0x%02x in the request head",
				    c);
	}
	return 0;
}

int httphead_check(const char *buf, size_t len, size_t max_head, size_t max_target,
		   struct httphead *h)
{
	memset(h, 0, sizeof(*h));
	struct scan sc = { .h = h, .buf = buf };
	http_parser_settings st;
	memset(&st, 0, sizeof(st));
	st.on_url = on_url;
	st.on_header_field = on_header_field;
	st.on_header_value = on_header_value;
	st.on_headers_complete = on_headers_complete;
	http_parser p;
	http_parser_init(&p, HTTP_REQUEST);
	p.data = &sc;
	size_t n = len < max_head ? len : max_head;
	size_t done = http_parser_execute(&p, &st, buf, n);
	enum http_errno e = HTTP_PARSER_ERRNO(&p);
	if (sc.error)
		return HTTPHEAD_ERROR;
	if (e != HPE_OK && e != HPE_PAUSED) {
		/* Name the bytes at fault if that is what it is. */
		if (bad_byte(h, buf, done + 1 < n ? done + 1 : n) < 0)
			return HTTPHEAD_ERROR;
		return parser_error(h, e);
	}
	if (h->target_len > max_target)
		return fail(h, 414, "uri_too_long", "request URI longer than %zu bytes", max_target);
	if (e == HPE_OK) {
		/* No end of the head yet. */
		if (bad_byte(h, buf, n) < 0)
			return HTTPHEAD_ERROR;
		if (n >= max_head)
			return fail(h, 431, "headers_too_large",
				    "request line and headers longer than %zu bytes", max_head);
		return HTTPHEAD_INCOMPLETE;
	}
	/* Paused at the head's last LF, which is not counted yet. */
	h->head_len = done + 1;
	if (bad_byte(h, buf, h->head_len) < 0)
		return HTTPHEAD_ERROR;
	if (p.http_major != 1 || p.http_minor != 1)
		return fail(h, 505, "http_version_not_supported",
			    "sandlotd speaks HTTP/1.1 only (streamed answers are chunked, so that a "
			    "cut one cannot pass for a whole one), not HTTP/%u.%u", p.http_major,
			    p.http_minor);
	h->chunked = (p.flags & F_CHUNKED) != 0;
	if (sc.seen[H_LENGTH]) {
		h->has_length = 1;
		h->content_length = p.content_length;
	}
	return HTTPHEAD_OK;
}
