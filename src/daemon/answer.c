/* A proxied server's answer, parsed (contract in answer.h). */
#include "daemon/answer.h"

#include <stdlib.h>
#include <string.h>

static int grow(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap : 1024;
	while (c < need)
		c *= 2;
	char *n = realloc(*buf, c);
	if (!n)
		return -1;
	*buf = n;
	*cap = c;
	return 0;
}

static int add_hbuf(struct answer *a, const char *at, size_t len)
{
	if (a->hlen + len + 1 > ANSWER_HEAD_MAX || grow(&a->hbuf, &a->hcap, a->hlen + len + 1) < 0) {
		a->too_big = 1;
		return -1;
	}
	memcpy(a->hbuf + a->hlen, at, len);
	a->hlen += len;
	a->hbuf[a->hlen] = '\0';
	return 0;
}

static int on_header_field(http_parser *hp, const char *at, size_t len)
{
	struct answer *a = hp->data;
	if (a->in_value || a->nhdrs == 0) {
		if (a->nhdrs == ANSWER_MAX_HEADERS) {
			a->too_big = 1;
			return -1;
		}
		/* A NUL ends the previous value, then a new name starts. */
		if (a->nhdrs && add_hbuf(a, "", 1) < 0)
			return -1;
		a->hdrs[a->nhdrs].name = a->hlen;
		a->hdrs[a->nhdrs].value = 0;
		a->nhdrs++;
		a->in_value = 0;
	}
	return add_hbuf(a, at, len);
}

static int on_header_value(http_parser *hp, const char *at, size_t len)
{
	struct answer *a = hp->data;
	if (!a->nhdrs)
		return -1;
	if (!a->in_value) {
		if (add_hbuf(a, "", 1) < 0)
			return -1;
		a->hdrs[a->nhdrs - 1].value = a->hlen;
		a->in_value = 1;
	}
	return add_hbuf(a, at, len);
}

static int on_headers_complete(http_parser *hp)
{
	struct answer *a = hp->data;
	if (a->nhdrs && add_hbuf(a, "", 1) < 0)
		return -1;
	if (hp->status_code >= 100 && hp->status_code < 200 && hp->status_code != 101) {
		/* 100 Continue, 103 Early Hints: not passed on; the final
		 * answer follows. */
		a->nhdrs = 0;
		a->hlen = 0;
		a->in_value = 0;
		return 0;
	}
	a->head_done = 1;
	a->status = hp->status_code;
	a->length = (hp->flags & F_CONTENTLENGTH) && !(hp->flags & F_CHUNKED) ? hp->content_length
									       : ANSWER_NO_LENGTH;
	/* An answer to HEAD, a 101, a 204 and a 304 have no body (RFC 9112
	 * 6.3), whatever length they announce: after a 101 the bytes are the
	 * new protocol's (taken as a body, they were lost to it or not,
	 * depending on how the reads fell). */
	int no_body = a->head_req || a->status == 101 || a->status == 204 || a->status == 304;
	if (a->status == 204 || a->status == 304)
		a->length = 0;
	if (a->status != 101)
		http_parser_pause(hp, 1);
	return no_body ? 1 : 0;
}

static int on_body(http_parser *hp, const char *at, size_t len)
{
	struct answer *a = hp->data;
	if (a->out && a->out_len + len <= a->out_cap) {
		memcpy(a->out + a->out_len, at, len);
		a->out_len += len;
		return 0;
	}
	if (grow(&a->body, &a->body_cap, a->body_len + len) < 0)
		return -1;
	memcpy(a->body + a->body_len, at, len);
	a->body_len += len;
	return 0;
}

static int on_message_complete(http_parser *hp)
{
	struct answer *a = hp->data;
	if (a->head_done) {
		/* One answer was asked for: whatever follows is not parsed
		 * (it would be taken for a second answer's head). */
		a->msg_done = 1;
		http_parser_pause(hp, 1);
	}
	return 0;
}

static const http_parser_settings settings = {
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

void answer_init(struct answer *a, int head_req)
{
	memset(a, 0, sizeof(*a));
	a->head_req = head_req;
	a->length = ANSWER_NO_LENGTH;
	http_parser_init(&a->parser, HTTP_RESPONSE);
	a->parser.data = a;
}

void answer_free(struct answer *a)
{
	free(a->hbuf);
	free(a->raw);
	free(a->body);
	a->hbuf = a->raw = a->body = NULL;
}

int answer_feed(struct answer *a, const char *data, size_t len)
{
	size_t n = http_parser_execute(&a->parser, &settings, data, len);
	enum http_errno e = HTTP_PARSER_ERRNO(&a->parser);
	if (e != HPE_OK && e != HPE_PAUSED)
		return -1;
	if (n < len) {
		if (e != HPE_PAUSED && !a->parser.upgrade && !a->msg_done)
			return -1;
		/* After the head (paused), an upgrade, or the end of the one
		 * answer asked for (what follows is not ours to read).  The
		 * rest goes before what raw still holds: data may have come
		 * from raw's front. */
		size_t rest = len - n;
		size_t keep = a->raw_len;
		char *r = malloc(keep + rest);
		if (!r)
			return -1;
		memcpy(r, data + n, rest);
		if (keep)
			memcpy(r + rest, a->raw + a->raw_off, keep);
		free(a->raw);
		a->raw = r;
		a->raw_off = 0;
		a->raw_len = keep + rest;
	}
	return 0;
}

void answer_resume(struct answer *a)
{
	http_parser_pause(&a->parser, 0);
}

int answer_upgraded(const struct answer *a)
{
	return a->status == 101 && a->parser.upgrade;
}

const char *answer_header_name(const struct answer *a, unsigned i)
{
	return a->hbuf + a->hdrs[i].name;
}

const char *answer_header_value(const struct answer *a, unsigned i)
{
	return a->hdrs[i].value ? a->hbuf + a->hdrs[i].value : "";
}
