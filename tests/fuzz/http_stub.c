/* sandlotd's HTTP layer (src/daemon/http.h) without libmicrohttpd, for
 * fuzz_requests.c: a request is a struct fuzz_req whose query parameters
 * and headers the target sets, and an answer is recorded in it (status and
 * JSON body) instead of being sent.  Mirrors http.c's contract: one answer
 * per request (a second one is counted, and is a bug), JSON bodies are
 * stolen, streams are freed at once as if the client had gone, and a
 * parked request is resumed with HTTP_WAKE_GONE. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fuzz_requests.h"

static struct fuzz_req *priv(struct http_req *req)
{
	return (struct fuzz_req *)req;
}

static const char *lookup(const char *const (*kv)[2], size_t n, const char *name, int nocase)
{
	for (size_t i = 0; i < n; i++)
		if (nocase ? !strcasecmp(kv[i][0], name) : !strcmp(kv[i][0], name))
			return kv[i][1];
	return NULL;
}

const char *http_query(struct http_req *req, const char *name)
{
	struct fuzz_req *r = priv(req);
	return lookup((const char *const (*)[2])r->query, r->nquery, name, 0);
}

const char *http_header(struct http_req *req, const char *name)
{
	struct fuzz_req *r = priv(req);
	return lookup((const char *const (*)[2])r->header, r->nheader, name, 1);
}

size_t http_query_all(struct http_req *req, const char *name, const char **out, size_t max)
{
	struct fuzz_req *r = priv(req);
	size_t n = 0;
	for (size_t i = 0; i < r->nquery; i++)
		if (!strcmp(r->query[i][0], name)) {
			if (n < max)
				out[n] = r->query[i][1];
			n++;
		}
	return n;
}

/* No form parser without libmicrohttpd: uploads answer as for a body
 * that is not a form. */
struct http_form *http_form_new(struct http_req *req, http_form_fn fn, void *ud)
{
	(void)req;
	(void)fn;
	(void)ud;
	return NULL;
}

int http_form_feed(struct http_form *f, const char *data, size_t len)
{
	(void)f;
	(void)data;
	(void)len;
	return -1;
}

int http_form_free(struct http_form *f)
{
	(void)f;
	return -1;
}

int http_wants_ndjson(struct http_req *req)
{
	const char *a = http_header(req, "Accept");
	return a && strstr(a, "application/x-ndjson") != NULL;
}

void http_set_header(struct http_req *req, const char *name, const char *value)
{
	req->extra_header[0] = name;
	req->extra_header[1] = value;
}

static int answer(struct http_req *req, int status, json_t *body)
{
	struct fuzz_req *r = priv(req);
	r->answers++;
	if (!req->answered) {
		req->answered = 1;
		req->status = status;
		r->body = body;
	} else {
		json_decref(body);
	}
	return 0;
}

int http_json(struct http_req *req, int status, json_t *body)
{
	return answer(req, status, body ? body : json_object());
}

int http_error(struct http_req *req, int status, const char *code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* A sandbox's host, and under /e2b: E2B's shape, as http.c gives it (e2b.h). */
	if (req->host_routed)
		return answer(req, status, json_pack("{s:i,s:s,s:s%}", "code", status, "error",
						     code ? code : "", "message", msg, strlen(msg)));
	if (req->path && strncmp(req->path, "/e2b", 4) == 0 && (!req->path[4] || req->path[4] == '/'))
		return answer(req, status, json_pack("{s:i,s:s%}", "code", status, "message", msg,
						     strlen(msg)));
	return answer(req, status, json_pack("{s:{s:s,s:s%}}", "error", "code", code ? code : "",
					     "message", msg, strlen(msg)));
}

int http_empty(struct http_req *req, int status)
{
	return answer(req, status, NULL);
}

int http_text(struct http_req *req, int status, const char *content_type, const char *text)
{
	return answer(req, status, NULL);
}

int http_stream(struct http_req *req, int status, const char *content_type,
		http_stream_read_fn read, http_stream_free_fn free_fn, void *ud)
{
	answer(req, status, NULL);
	if (free_fn)
		free_fn(ud, 0);
	return 0;
}

/* Parked: recorded, and resumed by fuzz_requests.c once the handler
 * returns, as though the client had gone. */
int http_park(struct http_req *req, int fd, int timeout_ms, http_resume_fn fn)
{
	(void)fd;
	(void)timeout_ms;
	priv(req)->park_fn = fn;
	return 0;
}

void http_long_wait(struct http_req *req)
{
	(void)req; /* one thread here: nothing to move */
}

char *http_metrics(struct http_server *s)
{
	(void)s;
	return NULL;
}

void http_headers_each(struct http_req *req, int (*fn)(void *ud, const char *name,
						      const char *value), void *ud)
{
	struct fuzz_req *r = priv(req);
	for (size_t i = 0; i < r->nheader; i++)
		if (fn(ud, r->header[i][0], r->header[i][1]))
			return;
}

/* Built responses (the port proxy): sent as an answer without a body; the
 * body's source is freed at once, as if the client had gone. */
struct http_resp {
	http_stream_free_fn free_fn;
	void (*dropped)(void *ud);
	void *ud;
};

struct http_resp *http_resp_stream(uint64_t size, http_stream_read_fn read,
				   http_stream_free_fn free_fn, void *ud)
{
	(void)size;
	(void)read;
	struct http_resp *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->free_fn = free_fn;
	r->ud = ud;
	return r;
}

int http_resp_header(struct http_resp *r, const char *name, const char *value)
{
	(void)r;
	return name && value ? 0 : -1;
}

void http_resp_free(struct http_resp *r)
{
	if (!r)
		return;
	if (r->free_fn)
		r->free_fn(r->ud, 0);
	if (r->dropped)
		r->dropped(r->ud);
	free(r);
}

int http_resp_send(struct http_req *req, int status, struct http_resp *r)
{
	answer(req, status, NULL);
	http_resp_free(r);
	return 0;
}

struct http_resp *http_resp_upgrade(http_upgrade_fn upgraded, void (*dropped)(void *ud),
				    void *ud)
{
	(void)upgraded; /* never: the client is gone before the upgrade */
	struct http_resp *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->dropped = dropped;
	r->ud = ud;
	return r;
}

void http_upgrade_close(void *handle)
{
	(void)handle; /* no upgrade is ever handed out */
}
