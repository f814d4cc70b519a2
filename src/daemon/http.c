/* sandlotd's HTTP layer (contract in http.h): libmicrohttpd in
 * thread-per-connection mode under a small route table.
 *
 * Life of a request, as libmicrohttpd drives it:
 *
 *   uri_log()      request line read: allocate our struct req (the raw,
 *                  still percent-encoded URI is kept: libmicrohttpd decodes
 *                  the path it hands to the access handler, which would turn
 *                  "%2F" inside a segment into a separator).
 *   access() #1    headers read: limits, auth, route match, Content-Length
 *                  check, RAW begin().  An error decided here is kept
 *                  pending and the body (if any) is read and dropped, so the
 *                  client can finish sending and then read the answer.
 *   access() #2..  body pieces: accumulated (JSON), handed on (RAW) or
 *                  dropped.
 *   access() last  body complete: the handler runs (it may block for as
 *                  long as it needs: this is the connection's own thread)
 *                  and answers; or the pending answer is sent.
 *   completed()    the response is done or the client went away: RAW
 *                  abort() if the body never completed, one log line,
 *                  metrics, free.
 *
 * libmicrohttpd accepts a response only before the body is read or after it
 * is complete, which is why answers given from begin()/chunk() are queued at
 * the end.  Its own answers to requests it cannot parse at all (header
 * section larger than the connection memory, broken request line) are not
 * JSON; everything that reaches us is.
 */
#include "daemon/http.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/percent.h"
#include "common/util.h"
#include "daemon/daemon.h"

/* Per-connection memory of libmicrohttpd: holds the request line and
 * headers being read and the buffers of the response being sent. */
#define CONN_MEMORY (256u * 1024)
#define MAX_CONNECTIONS 4096
#define CONN_IDLE_TIMEOUT_S 600
#define THREAD_STACK (1u << 20)
/* A request answered before its body was read: read and drop at most this
 * much of the body so the client can read the answer; past it the
 * connection is closed. */
#define DISCARD_MAX (64ull << 20)

struct http_server {
	struct daemon *d;
	struct MHD_Daemon *mhd;
	const struct http_route *routes;
	char *token;            /* expected "Bearer TOKEN", NULL = no auth */
	char *unix_path;        /* to unlink at stop */
	dev_t unix_dev;
	ino_t unix_ino;
	int listen_fd;
	int quiesced;
	int active;             /* requests between access #1 and completed() */
	char *name;             /* "unix:PATH" or "tcp:HOST:PORT" for logs */
};

struct req {
	struct http_req pub;    /* first: handlers get &r->pub */
	struct http_server *srv;
	char *raw_uri;
	const struct http_route *rt;
	int stage;              /* 0 before access #1, 1 reading body, 2 final */
	int can_queue;          /* responses may be queued right away */
	struct MHD_Response *pending;
	unsigned pending_status;
	int discard;            /* drop the rest of the body */
	uint64_t discarded;
	char *body;
	size_t body_len, body_cap;
	int raw_begun, raw_ended, raw_stopped;
	char *param_buf[4];
	char *path;             /* pub->path */
	struct upgrade_ctx *upgrade; /* an upgrade response was sent */
};

struct upgrade_ctx {
	http_upgrade_fn upgraded;
	void (*dropped)(void *ud);
	void *ud;
	int ran;
};

static const char *status_code_name(int status)
{
	switch (status) {
	case 400: return "bad_request";
	case 401: return "unauthorized";
	case 403: return "forbidden";
	case 404: return "not_found";
	case 405: return "method_not_allowed";
	case 409: return "conflict";
	case 410: return "sandbox_ended";
	case 413: return "payload_too_large";
	case 414: return "uri_too_long";
	case 429: return "too_many_sandboxes";
	case 502: return "bad_gateway";
	case 503: return "shutting_down";
	case 504: return "gateway_timeout";
	case 507: return "insufficient_storage";
	default: return status >= 500 ? "internal" : "bad_request";
	}
}

/* ---- answering ----------------------------------------------------------- */

static int deliver(struct http_req *pub, unsigned status, struct MHD_Response *resp)
{
	struct req *r = (struct req *)pub;
	if (!resp) {
		daemon_log("http_error", "level=error msg=\"cannot allocate a response\" path=%s",
			   pub->path ? pub->path : "-");
		pub->answered = 1;
		pub->status = 500;
		return 0;
	}
	if (pub->answered) {
		/* A handler bug; keep the first answer. */
		daemon_log("http_error", "level=error msg=\"answered twice\" route=%s status=%u",
			   pub->route ? pub->route : "-", status);
		MHD_destroy_response(resp);
		return 0;
	}
	pub->answered = 1;
	pub->status = (int)status;
	if (pub->extra_header[0] && pub->extra_header[1])
		MHD_add_response_header(resp, pub->extra_header[0], pub->extra_header[1]);
	if (r->can_queue) {
		if (MHD_queue_response(pub->conn, status, resp) != MHD_YES)
			daemon_log("http_error", "level=error msg=\"queue response failed\" status=%u",
				   status);
		MHD_destroy_response(resp);
	} else {
		r->pending = resp;
		r->pending_status = status;
	}
	return 0;
}

void http_set_header(struct http_req *req, const char *name, const char *value)
{
	req->extra_header[0] = name;
	req->extra_header[1] = value;
}

int http_json(struct http_req *req, int status, json_t *body)
{
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (!text)
		text = strdup("{}");
	size_t n = text ? strlen(text) : 0;
	/* A trailing newline makes curl and shells friendlier. */
	char *full = text ? realloc(text, n + 2) : NULL;
	if (!full) {
		free(text);
		return deliver(req, 500, NULL);
	}
	full[n] = '\n';
	full[n + 1] = '\0';
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(n + 1, full, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(full);
		return deliver(req, 500, NULL);
	}
	MHD_add_response_header(resp, "Content-Type", "application/json");
	return deliver(req, (unsigned)status, resp);
}

static int error_va(struct http_req *req, int status, const char *code, const char *fmt,
		    va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	json_t *e = json_object();
	json_object_set_new(e, "code", json_string(code ? code : status_code_name(status)));
	json_object_set_new(e, "message", json_text(msg, strlen(msg)));
	json_t *o = json_object();
	json_object_set_new(o, "error", e);
	return http_json(req, status, o);
}

int http_error(struct http_req *req, int status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_va(req, status, code, fmt, ap);
	va_end(ap);
	return 0;
}

int http_error_from(struct http_req *req, const sandlot_error_t *err)
{
	int st = err ? sandlot_error_status(err) : EIO;
	const char *msg = err ? sandlot_error_message(err) : "unknown error";
	switch (st) {
	case ENOENT:
		return http_error(req, 404, "not_found", "%s", msg);
	case EEXIST:
		return http_error(req, 409, "conflict", "%s", msg);
	case EISDIR:
	case ENOTDIR:
	case EINVAL:
	case ENAMETOOLONG:
	case ELOOP:
		return http_error(req, 400, "bad_request", "%s", msg);
	case ENOSPC:
	case EDQUOT:
		return http_error(req, 507, "insufficient_storage", "%s", msg);
	case EPIPE:
		return http_error(req, 410, "sandbox_gone", "%s", msg);
	case EACCES:
	case EPERM:
	case EROFS:
		return http_error(req, 403, "forbidden", "%s", msg);
	case ENOTEMPTY:
	case EBUSY:
		return http_error(req, 409, "conflict", "%s", msg);
	case EXDEV:
		return http_error(req, 400, "bad_request", "%s", msg);
	case EFBIG:
		return http_error(req, 507, "insufficient_storage", "%s", msg);
	default:
		return http_error(req, 500, "internal", "%s", msg);
	}
}

int http_empty(struct http_req *req, int status)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	return deliver(req, (unsigned)status, resp);
}

int http_text(struct http_req *req, int status, const char *content_type, const char *text)
{
	struct MHD_Response *resp = MHD_create_response_from_buffer(
		strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
	if (resp)
		MHD_add_response_header(resp, "Content-Type",
					content_type ? content_type : "text/plain; charset=utf-8");
	return deliver(req, (unsigned)status, resp);
}

struct stream_ctx {
	http_stream_read_fn read;
	http_stream_free_fn free_fn;
	void *ud;
	int completed;
};

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct stream_ctx *sc = cls;
	ssize_t n = sc->read(sc->ud, buf, max);
	if (n > 0)
		return n;
	if (n == 0) {
		sc->completed = 1;
		return MHD_CONTENT_READER_END_OF_STREAM;
	}
	return MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls)
{
	struct stream_ctx *sc = cls;
	if (sc->free_fn)
		sc->free_fn(sc->ud, sc->completed);
	free(sc);
}

int http_stream(struct http_req *req, int status, const char *content_type,
		http_stream_read_fn read, http_stream_free_fn free_fn, void *ud)
{
	struct stream_ctx *sc = calloc(1, sizeof(*sc));
	if (!sc) {
		if (free_fn)
			free_fn(ud, 0);
		return deliver(req, 500, NULL);
	}
	sc->read = read;
	sc->free_fn = free_fn;
	sc->ud = ud;
	struct MHD_Response *resp = MHD_create_response_from_callback(
		MHD_SIZE_UNKNOWN, 64 * 1024, stream_reader, sc, stream_free);
	if (!resp) {
		stream_free(sc);
		return deliver(req, 500, NULL);
	}
	if (content_type)
		MHD_add_response_header(resp, "Content-Type", content_type);
	/* Tell proxies not to buffer a live stream. */
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	return deliver(req, (unsigned)status, resp);
}

/* What http_resp_* hand around: the libmicrohttpd response, and for an
 * upgrade its context. */
struct http_resp {
	struct MHD_Response *resp;
	struct upgrade_ctx *upgrade;
};

struct http_resp *http_resp_stream(uint64_t size, http_stream_read_fn read,
				   http_stream_free_fn free_fn, void *ud)
{
	struct http_resp *r = calloc(1, sizeof(*r));
	struct stream_ctx *sc = r ? calloc(1, sizeof(*sc)) : NULL;
	if (!sc) {
		free(r);
		if (free_fn)
			free_fn(ud, 0);
		return NULL;
	}
	sc->read = read;
	sc->free_fn = free_fn;
	sc->ud = ud;
	r->resp = MHD_create_response_from_callback(
		size == HTTP_SIZE_UNKNOWN ? MHD_SIZE_UNKNOWN : size, 64 * 1024, stream_reader, sc,
		stream_free);
	if (!r->resp) {
		stream_free(sc);
		free(r);
		return NULL;
	}
	return r;
}

static void upgrade_cb(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra,
		       size_t extra_len, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct upgrade_ctx *u = cls;
	u->ran = 1;
	u->upgraded(u->ud, sock, extra, extra_len, urh);
}

struct http_resp *http_resp_upgrade(http_upgrade_fn upgraded, void (*dropped)(void *ud),
				    void *ud)
{
	struct http_resp *r = calloc(1, sizeof(*r));
	struct upgrade_ctx *u = r ? calloc(1, sizeof(*u)) : NULL;
	if (u) {
		u->upgraded = upgraded;
		u->dropped = dropped;
		u->ud = ud;
		r->upgrade = u;
		r->resp = MHD_create_response_for_upgrade(upgrade_cb, u);
	}
	if (!u || !r->resp) {
		free(u);
		free(r);
		dropped(ud);
		return NULL;
	}
	return r;
}

void http_upgrade_close(void *handle)
{
	MHD_upgrade_action(handle, MHD_UPGRADE_ACTION_CLOSE);
}

int http_resp_header(struct http_resp *r, const char *name, const char *value)
{
	return MHD_add_response_header(r->resp, name, value) == MHD_YES ? 0 : -1;
}

int http_resp_send(struct http_req *req, int status, struct http_resp *r)
{
	struct req *rq = (struct req *)req;
	struct MHD_Response *resp = r->resp;
	r->resp = NULL; /* deliver() takes it */
	if (r->upgrade && !req->answered) {
		/* completed() tells the handler if the upgrade never happened. */
		rq->upgrade = r->upgrade;
		r->upgrade = NULL;
	}
	http_resp_free(r); /* an upgrade context not taken: dropped now */
	return deliver(req, (unsigned)status, resp);
}

void http_resp_free(struct http_resp *r)
{
	if (!r)
		return;
	if (r->resp)
		MHD_destroy_response(r->resp);
	if (r->upgrade) {
		r->upgrade->dropped(r->upgrade->ud);
		free(r->upgrade);
	}
	free(r);
}

int http_wait(int client_fd, int wake_fd, int timeout_ms)
{
	struct pollfd p[2] = {
		/* POLLIN is not asked for on the client: a pipelined request
		 * must not look like activity; hang-ups are always reported. */
		{ .fd = client_fd, .events = POLLRDHUP },
		{ .fd = wake_fd, .events = POLLIN },
	};
	uint64_t deadline = timeout_ms >= 0 ? sandlot__now_ms() + (uint64_t)timeout_ms : 0;
	for (;;) {
		int left = -1;
		if (timeout_ms >= 0) {
			uint64_t now = sandlot__now_ms();
			left = now >= deadline ? 0 : (int)(deadline - now);
		}
		int n = poll(p, wake_fd >= 0 ? 2 : 1, left);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (client_fd >= 0 && (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)))
			return -1;
		if (wake_fd >= 0 && p[1].revents)
			return 1;
		if (n == 0)
			return 0;
	}
}

/* ---- request data ---------------------------------------------------------- */

const char *http_query(struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *http_header(struct http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

struct query_all {
	const char *name;
	const char **out;
	size_t max, n;
};

static enum MHD_Result query_all_it(void *cls, enum MHD_ValueKind kind, const char *key,
				    const char *value)
{
	struct query_all *q = cls;
	if (key && strcmp(key, q->name) == 0) {
		if (q->n < q->max)
			q->out[q->n] = value ? value : "";
		q->n++;
	}
	return MHD_YES;
}

size_t http_query_all(struct http_req *req, const char *name, const char **out, size_t max)
{
	struct query_all q = { name, out, max, 0 };
	MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, query_all_it, &q);
	return q.n;
}

struct headers_each {
	int (*fn)(void *ud, const char *name, const char *value);
	void *ud;
};

static enum MHD_Result headers_each_it(void *cls, enum MHD_ValueKind kind, const char *key,
				       const char *value)
{
	struct headers_each *h = cls;
	return h->fn(h->ud, key, value ? value : "") ? MHD_NO : MHD_YES;
}

void http_headers_each(struct http_req *req, int (*fn)(void *ud, const char *name,
						      const char *value), void *ud)
{
	struct headers_each h = { fn, ud };
	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, headers_each_it, &h);
}

int http_wants_ndjson(struct http_req *req)
{
	const char *a = http_header(req, "Accept");
	return a && strstr(a, "application/x-ndjson") != NULL;
}

/* ---- routing ------------------------------------------------------------ */

/* Match the raw path against a pattern.  Returns 1 on a match (captures
 * stored as [start, len) pairs), 0 otherwise.  A final '*' matches any
 * rest, empty included. */
static int match(const char *pattern, const char *path, size_t path_len, size_t cap[][2],
		 int *ncap)
{
	const char *p = pattern;
	size_t i = 0;
	*ncap = 0;
	while (*p) {
		if (p[0] == '*' && p[1] == '\0')
			return 1; /* any rest of the path */
		if (p[0] == '{' && p[1] == '}') {
			size_t start = i;
			while (i < path_len && path[i] != '/')
				i++;
			if (i == start || *ncap >= 4)
				return 0;
			cap[*ncap][0] = start;
			cap[*ncap][1] = i - start;
			(*ncap)++;
			p += 2;
		} else {
			if (i >= path_len || path[i] != *p)
				return 0;
			i++;
			p++;
		}
	}
	return i == path_len;
}

/* ---- libmicrohttpd callbacks --------------------------------------------- */

static void *uri_log(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct http_server *srv = cls;
	struct req *r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->srv = srv;
	r->raw_uri = strdup(uri ? uri : "");
	r->pub.conn = conn;
	r->pub.d = srv->d;
	r->pub.client_fd = -1;
	r->pub.start_ns = sandlot__now_ns();
	return r;
}

static int early_error(struct req *r, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int early_error(struct req *r, int status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_va(&r->pub, status, code, fmt, ap);
	va_end(ap);
	return 0;
}

/* Constant-time comparison of the Authorization header with the expected
 * value: the time taken depends only on the lengths. */
static int auth_ok(const char *got, const char *want)
{
	if (!got)
		return 0;
	size_t gl = strlen(got), wl = strlen(want);
	unsigned char diff = gl != wl;
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)(want[i] ^ (i < gl ? got[i] : 0));
	return diff == 0;
}

static int declared_length(struct req *r, uint64_t *out)
{
	const char *cl = MHD_lookup_connection_value(r->pub.conn, MHD_HEADER_KIND,
						     "Content-Length");
	if (!cl)
		return 0;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(cl, &end, 10);
	if (errno || end == cl)
		return 0;
	*out = v;
	return 1;
}

/* Headers are in: decide what to do with the request. */
static void first_call(struct req *r, const char *method)
{
	struct http_server *srv = r->srv;
	struct http_req *pub = &r->pub;
	pub->method = method;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(pub->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	pub->client_fd = ci ? ci->connect_fd : -1;

	const char *q = strchr(r->raw_uri, '?');
	size_t plen = q ? (size_t)(q - r->raw_uri) : strlen(r->raw_uri);
	r->path = strndup(r->raw_uri, plen);
	pub->path = r->path ? r->path : "";
	pub->uri = r->raw_uri;

	if (strlen(r->raw_uri) > HTTP_MAX_URI) {
		early_error(r, 414, "uri_too_long", "request URI longer than %u bytes", HTTP_MAX_URI);
		return;
	}
	if (srv->token &&
	    !auth_ok(MHD_lookup_connection_value(pub->conn, MHD_HEADER_KIND, "Authorization"),
		     srv->token)) {
		early_error(r, 401, "unauthorized",
			    "missing or wrong bearer token (send \"Authorization: Bearer TOKEN\")");
		if (r->pending)
			MHD_add_response_header(r->pending, "WWW-Authenticate", "Bearer");
		return;
	}
	pub->token_auth = srv->token != NULL;

	const struct http_route *found = NULL;
	int path_known = 0;
	size_t cap[4][2];
	int ncap = 0;
	char allow[128] = "";
	for (const struct http_route *rt = srv->routes; rt->method; rt++) {
		size_t c[4][2];
		int n;
		if (!match(rt->pattern, pub->path, plen, c, &n))
			continue;
		path_known = 1;
		if (strcmp(rt->method, method) == 0 || strcmp(rt->method, "*") == 0) {
			found = rt;
			memcpy(cap, c, sizeof(cap));
			ncap = n;
			break;
		}
		if (strlen(allow) + strlen(rt->method) + 3 < sizeof(allow)) {
			if (allow[0])
				strcat(allow, ", ");
			strcat(allow, rt->method);
		}
	}
	if (!found) {
		if (path_known) {
			early_error(r, 405, "method_not_allowed", "%s is not allowed on %s (allowed: %s)",
				    method, pub->path, allow);
			if (r->pending)
				MHD_add_response_header(r->pending, "Allow", allow);
		} else {
			early_error(r, 404, "unknown_route", "no route %s %s", method, pub->path);
		}
		return;
	}
	pub->route = found->pattern;
	r->rt = found;
	for (int i = 0; i < ncap; i++) {
		char *v = sandlot__percent_decode(pub->path + cap[i][0], cap[i][1]);
		if (!v) {
			early_error(r, 400, "bad_request", "bad percent-encoding in the request path");
			return;
		}
		r->param_buf[i] = v;
		pub->params[i] = v;
	}
	pub->nparams = ncap;

	if (srv->d->stopping) {
		early_error(r, 503, "shutting_down", "sandlotd is shutting down");
		return;
	}
	uint64_t len;
	if (found->body == HTTP_JSON && declared_length(r, &len) && len > HTTP_MAX_JSON_BODY) {
		early_error(r, 413, "payload_too_large",
			    "request body of %llu bytes is larger than the limit of %u bytes",
			    (unsigned long long)len, HTTP_MAX_JSON_BODY);
		return;
	}
	if (found->body == HTTP_RAW) {
		int rc = found->handle(pub);
		if (rc < 0 || pub->answered) {
			r->raw_stopped = 1;
			if (!pub->answered)
				early_error(r, 500, "internal", "request handler failed");
			return;
		}
		r->raw_begun = 1;
	}
}

static void body_piece(struct req *r, const char *data, size_t len)
{
	struct http_req *pub = &r->pub;
	if (pub->answered || r->discard) {
		r->discarded += len;
		return;
	}
	switch (r->rt->body) {
	case HTTP_NOBODY:
		return;
	case HTTP_JSON:
		if (r->body_len + len > HTTP_MAX_JSON_BODY) {
			early_error(r, 413, "payload_too_large",
				    "request body is larger than the limit of %u bytes",
				    HTTP_MAX_JSON_BODY);
			free(r->body);
			r->body = NULL;
			r->body_len = r->body_cap = 0;
			return;
		}
		if (r->body_len + len > r->body_cap) {
			size_t cap = r->body_cap ? r->body_cap : 4096;
			while (cap < r->body_len + len)
				cap *= 2;
			char *nb = realloc(r->body, cap);
			if (!nb) {
				early_error(r, 500, "internal", "out of memory");
				return;
			}
			r->body = nb;
			r->body_cap = cap;
		}
		memcpy(r->body + r->body_len, data, len);
		r->body_len += len;
		return;
	case HTTP_RAW:
		if (r->rt->chunk(pub, data, len) < 0 || pub->answered) {
			r->raw_stopped = 1;
			if (!pub->answered)
				early_error(r, 500, "internal", "request handler failed");
		}
		return;
	}
}

static void final_call(struct req *r)
{
	struct http_req *pub = &r->pub;
	r->can_queue = 1;
	if (pub->answered) {
		if (r->pending) {
			if (MHD_queue_response(pub->conn, r->pending_status, r->pending) != MHD_YES)
				daemon_log("http_error", "level=error msg=\"queue response failed\"");
			MHD_destroy_response(r->pending);
			r->pending = NULL;
		}
		return;
	}
	switch (r->rt->body) {
	case HTTP_JSON:
		if (r->body_len > 0) {
			json_error_t jerr;
			pub->json = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &jerr);
			if (!pub->json) {
				http_error(pub, 400, "invalid_json", "invalid JSON at line %d, column %d: %s",
					   jerr.line, jerr.column, jerr.text);
				return;
			}
		}
		r->rt->handle(pub);
		break;
	case HTTP_NOBODY:
		r->rt->handle(pub);
		break;
	case HTTP_RAW:
		r->raw_ended = 1;
		r->rt->end(pub);
		break;
	}
	if (!pub->answered)
		http_error(pub, 500, "internal", "the handler of %s %s did not answer", pub->method,
			   pub->route);
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version, const char *upload_data,
				 size_t *upload_data_size, void **con_cls)
{
	struct http_server *srv = cls;
	struct req *r = *con_cls;
	if (!r)
		return MHD_NO; /* out of memory in uri_log */
	if (r->stage == 0) {
		r->stage = 1;
		__atomic_add_fetch(&srv->active, 1, __ATOMIC_SEQ_CST);
		first_call(r, method);
		if (r->pub.answered) {
			uint64_t len = 0;
			int has_len = declared_length(r, &len);
			const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
								     "Transfer-Encoding");
			if ((has_len && len > DISCARD_MAX) || (!has_len && !te) ||
			    (has_len && len == 0)) {
				/* No body to drain, or too much: answer now. */
				r->can_queue = 1;
				r->stage = 2;
				MHD_queue_response(conn, r->pending_status, r->pending);
				MHD_destroy_response(r->pending);
				r->pending = NULL;
			}
		}
		return MHD_YES;
	}
	if (r->stage == 2)
		return MHD_YES; /* answered early; libmicrohttpd sends it */
	if (*upload_data_size > 0) {
		body_piece(r, upload_data, *upload_data_size);
		*upload_data_size = 0;
		if (r->discarded > DISCARD_MAX)
			return MHD_NO;
		return MHD_YES;
	}
	r->stage = 2;
	final_call(r);
	return MHD_YES;
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_server *srv = cls;
	struct req *r = *con_cls;
	*con_cls = NULL;
	if (!r)
		return;
	struct http_req *pub = &r->pub;
	if (r->raw_begun && !r->raw_ended && !r->raw_stopped && r->rt->abort)
		r->rt->abort(pub);
	if (r->stage > 0) {
		__atomic_sub_fetch(&srv->active, 1, __ATOMIC_SEQ_CST);
		struct daemon *d = srv->d;
		__atomic_add_fetch(&d->m.requests, 1, __ATOMIC_RELAXED);
		if (pub->status >= 500 || !pub->answered)
			__atomic_add_fetch(&d->m.request_errors, 1, __ATOMIC_RELAXED);
		double ms = (double)(sandlot__now_ns() - pub->start_ns) / 1e6;
		const char *sid = pub->log_sandbox[0] ? pub->log_sandbox : pub->nparams > 0 && strncmp(pub->params[0], "sb-", 3) == 0 &&
					  strlen(pub->params[0]) < 40 ? pub->params[0] : NULL;
		/* The raw path is percent-encoded: no spaces or quotes in it
		 * unless a client sent them raw; quote it to be safe. */
		char path[256];
		size_t o = 0;
		for (const char *p = pub->path ? pub->path : ""; *p && o < sizeof(path) - 4; p++)
			path[o++] = (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) ? '?' : *p;
		path[o] = '\0';
		daemon_log("request", "method=%s path=\"%s\" status=%d ms=%.1f%s%s%s",
			   pub->method ? pub->method : "-", path, pub->answered ? pub->status : 0, ms,
			   sid ? " sandbox=" : "", sid ? sid : "",
			   toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted=1");
	}
	if (r->upgrade) {
		if (!r->upgrade->ran)
			r->upgrade->dropped(r->upgrade->ud);
		free(r->upgrade);
	}
	if (r->pending)
		MHD_destroy_response(r->pending);
	json_decref(pub->json);
	free(r->path);
	for (int i = 0; i < 4; i++)
		free(r->param_buf[i]);
	free(r->body);
	free(r->raw_uri);
	free(r);
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	for (char *p = msg; *p; p++)
		if (*p == '"' || (unsigned char)*p < 0x20)
			*p = '\'';
	daemon_log("http_library", "level=warn msg=\"%s\"", msg);
}

/* ---- listening sockets ------------------------------------------------------- */

static int listen_unix(const char *path, struct http_server *srv, sandlot_error_t **err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sa.sun_path))
		return sandlot__error(err, ENAMETOOLONG, "socket path %s is too long (max %zu bytes)",
				      path, sizeof(sa.sun_path) - 1);
	strcpy(sa.sun_path, path);

	char *dir = strdup(path);
	if (!dir)
		return sandlot__error(err, ENOMEM, "out of memory");
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (sandlot__mkdir_p(dir, 0755) < 0) {
			int e = errno;
			free(dir);
			return sandlot__error_errno(err, e, "create socket directory for %s", path);
		}
	}
	free(dir);

	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return sandlot__error(err, EEXIST, "%s exists and is not a socket; not replacing it",
					      path);
		/* A live daemon answers connect(); a stale socket refuses it. */
		cleanup_close int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe < 0)
			return sandlot__error_errno(err, errno, "socket");
		if (connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return sandlot__error(err, EADDRINUSE,
					      "another sandlotd is already listening on %s", path);
		if (errno != ECONNREFUSED && errno != ENOENT)
			return sandlot__error_errno(err, errno, "probe existing socket %s", path);
		if (unlink(path) < 0 && errno != ENOENT)
			return sandlot__error_errno(err, errno, "remove stale socket %s", path);
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return sandlot__error_errno(err, errno, "socket");
	/* Bind with the final mode already (no window where it is 0777). */
	mode_t old = umask(0117);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	int e = errno;
	umask(old);
	if (rc < 0) {
		close(fd);
		return sandlot__error_errno(err, e, "bind %s", path);
	}
	chmod(path, 0660);
	if (listen(fd, 1024) < 0) {
		e = errno;
		close(fd);
		unlink(path);
		return sandlot__error_errno(err, e, "listen on %s", path);
	}
	if (stat(path, &st) == 0) {
		srv->unix_dev = st.st_dev;
		srv->unix_ino = st.st_ino;
	}
	srv->unix_path = strdup(path);
	return fd;
}

static int listen_tcp(const char *hostport, sandlot_error_t **err)
{
	char host[256];
	const char *port;
	if (hostport[0] == '[') {
		const char *end = strchr(hostport, ']');
		if (!end || end[1] != ':' || (size_t)(end - hostport - 1) >= sizeof(host))
			return sandlot__error(err, EINVAL, "invalid TCP address \"%s\": expected HOST:PORT",
					      hostport);
		memcpy(host, hostport + 1, (size_t)(end - hostport - 1));
		host[end - hostport - 1] = '\0';
		port = end + 2;
	} else {
		const char *colon = strrchr(hostport, ':');
		if (!colon || (size_t)(colon - hostport) >= sizeof(host))
			return sandlot__error(err, EINVAL, "invalid TCP address \"%s\": expected HOST:PORT",
					      hostport);
		memcpy(host, hostport, (size_t)(colon - hostport));
		host[colon - hostport] = '\0';
		port = colon + 1;
	}
	if (!*port)
		return sandlot__error(err, EINVAL, "invalid TCP address \"%s\": no port", hostport);
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (gai != 0)
		return sandlot__error(err, EINVAL, "invalid TCP address \"%s\": %s", hostport,
				      gai_strerror(gai));
	int fd = -1, e = 0;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0) {
			e = errno;
			continue;
		}
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 1024) == 0)
			break;
		e = errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return sandlot__error_errno(err, e ? e : EADDRNOTAVAIL, "listen on tcp:%s", hostport);
	return fd;
}

struct http_server *http_start(struct daemon *d, const char *listen, const char *token,
			       const struct http_route *routes, sandlot_error_t **err)
{
	struct http_server *srv = calloc(1, sizeof(*srv));
	if (!srv)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	srv->d = d;
	srv->routes = routes;
	srv->name = strdup(listen);
	int fd;
	if (strncmp(listen, "unix:", 5) == 0) {
		fd = listen_unix(listen + 5, srv, err);
	} else if (strncmp(listen, "tcp:", 4) == 0) {
		if (!token || !*token) {
			sandlot__error(err, EINVAL, "listening on TCP requires a token (--token-file)");
			fd = -1;
		} else {
			fd = listen_tcp(listen + 4, err);
		}
		if (fd >= 0) {
			size_t n = strlen(token) + 8;
			srv->token = malloc(n);
			if (srv->token)
				snprintf(srv->token, n, "Bearer %s", token);
		}
	} else {
		sandlot__error(err, EINVAL, "invalid listen address \"%s\": expected unix:PATH or "
			       "tcp:HOST:PORT", listen);
		fd = -1;
	}
	if (fd < 0)
		goto fail;
	srv->listen_fd = fd;
	/* MHD_ALLOW_UPGRADE: WebSockets through the port proxy (proxy.c). */
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC |
			 MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE;
	srv->mhd = MHD_start_daemon(
		flags, 0, NULL, NULL, access_cb, srv,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, srv,
		MHD_OPTION_LISTEN_SOCKET, fd,
		MHD_OPTION_URI_LOG_CALLBACK, uri_log, srv,
		MHD_OPTION_NOTIFY_COMPLETED, completed_cb, srv,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_IDLE_TIMEOUT_S,
		MHD_OPTION_THREAD_STACK_SIZE, (size_t)THREAD_STACK,
		MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,
		MHD_OPTION_END);
	if (!srv->mhd) {
		sandlot__error(err, EIO, "start the HTTP server on %s", listen);
		close(fd);
		if (srv->unix_path)
			unlink(srv->unix_path);
		goto fail;
	}
	return srv;
fail:
	free(srv->token);
	free(srv->unix_path);
	free(srv->name);
	free(srv);
	return NULL;
}

void http_quiesce(struct http_server *s)
{
	if (!s || s->quiesced)
		return;
	s->quiesced = 1;
	MHD_socket fd = MHD_quiesce_daemon(s->mhd);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	/* Remove our socket file, unless someone replaced it meanwhile. */
	struct stat st;
	if (s->unix_path && stat(s->unix_path, &st) == 0 && st.st_dev == s->unix_dev &&
	    st.st_ino == s->unix_ino)
		unlink(s->unix_path);
}

void http_stop(struct http_server *s, unsigned timeout_ms)
{
	if (!s)
		return;
	http_quiesce(s);
	uint64_t deadline = sandlot__now_ms() + timeout_ms;
	while (__atomic_load_n(&s->active, __ATOMIC_SEQ_CST) > 0 && sandlot__now_ms() < deadline)
		usleep(10000);
	/* Closes the remaining (idle or stuck) connections and joins their
	 * threads. */
	MHD_stop_daemon(s->mhd);
	free(s->token);
	free(s->unix_path);
	free(s->name);
	free(s);
}
