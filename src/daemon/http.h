/* sandlotd's HTTP layer: a front door (gate.h) and libmicrohttpd underneath,
 * a route table above.
 *
 * Threads.  Connections cost no thread: the door's thread holds those
 * that have not sent a complete request head yet, libmicrohttpd's few
 * threads (internal epoll, a thread pool) read and write the rest.  No
 * handler code runs on either: every handler call is a job on the worker
 * pool (workq.h) while its connection is suspended, so a handler may block
 * for a sandbox call (a creation, a file operation, a scan).  It must not
 * block for as long as a user's command runs: it parks instead
 * (http_park(), or HTTP_STREAM_WAIT from a stream's read function), which
 * costs no thread until there is news.
 *
 * A route is matched on method and path pattern ("/v1/sandboxes/{}/exec":
 * each {} captures one non-empty segment without '/').  Three kinds:
 *
 *   JSON      the body (at most HTTP_MAX_JSON_BODY bytes, else 413) is read
 *             whole and parsed; malformed JSON gets 400 before the handler
 *             runs.  Handler: `handle(req)`, req->json set (NULL if no body).
 *   RAW       body streamed to the handler: `begin(req)` (may answer early,
 *             e.g. 404, by calling http_error() or http_json() and returning -1),
 *             `chunk(req, data, len)` for each piece (return -1 after
 *             answering to stop), `end(req)` once the body is complete.
 *             `abort(req)` if the client went away mid-body (free state).
 *             After begin() or chunk() returned -1 (having answered) no
 *             further call is made for the request — neither chunk, end
 *             nor abort — so free the state before returning -1.  An
 *             answer given by begin()/chunk() is sent once the rest of
 *             the body has been read and dropped (libmicrohttpd cannot
 *             answer mid-body); bodies over 64 MiB are not drained: the
 *             connection is closed after the answer instead.  The calls
 *             of one request never overlap; the connection reads on while
 *             chunk() works (up to 128 KiB ahead), then waits for it.
 *   NOBODY    GET/DELETE style; a body, if sent, is ignored.
 *
 * A route's method "*" matches every method, and a pattern ending in "*"
 * matches any rest of the path (the proxy: "/v1/sandboxes/{}/ports/{}/" then
 * a star).  A request whose Host names a sandbox's port (PORT-ID.DOMAIN,
 * http_config.sandbox_domain; e2b.h) is matched to no route: it goes to
 * proxy_host_route (proxy.c), with host_routed set.
 *
 * Every handler answers exactly once with one of the http_* response
 * functions, or parks and answers from its continuation.  Answers are JSON
 * (application/json) except raw file bytes, tar archives, NDJSON streams
 * and /metrics.
 */
#ifndef SANDLOT_DAEMON_HTTP_H
#define SANDLOT_DAEMON_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandlot.h"

struct daemon;

#define HTTP_MAX_JSON_BODY (1u << 20)   /* JSON request bodies */
#define HTTP_MAX_URI 8192               /* request line + query */

struct http_req;

typedef int (*http_handler_fn)(struct http_req *req);
typedef int (*http_chunk_fn)(struct http_req *req, const char *data, size_t len);

enum http_body { HTTP_NOBODY, HTTP_JSON, HTTP_RAW };

struct http_route {
	const char *method;          /* "GET", "POST", "PUT", "DELETE" */
	const char *pattern;         /* "/v1/sandboxes/{}" */
	enum http_body body;
	http_handler_fn handle;      /* NOBODY, JSON: the handler; RAW: begin */
	http_chunk_fn chunk;         /* RAW only */
	http_handler_fn end;         /* RAW only */
	http_handler_fn abort;       /* RAW only, may be NULL */
};

struct http_req {
	const char *method;
	const char *path;
	const char *params[4];       /* captured {} segments, URL-decoded */
	int nparams;
	json_t *json;                /* JSON routes: parsed body or NULL */
	void *state;                 /* handler's own state (RAW routes, parked requests) */
	void *conn;                  /* struct MHD_Connection * */
	int client_fd;               /* the client's socket (the HTTP layer's) */
	const char *route;           /* the matched pattern, for logs/metrics */
	int status;                  /* set when answered */
	int answered;
	uint64_t start_ns;
	struct daemon *d;
	char log_sandbox[32];        /* sandbox id for the request's log line,
	                              * when not the first {} capture (create) */
	const char *extra_header[2]; /* name, value: see http_set_header() */
	const char *uri;             /* the request target as sent: raw path
	                              * (percent-encoded) and query */
	int token_auth;              /* it carried the server's bearer token */
	int host_routed;             /* its Host named a sandbox's port (e2b.h):
	                              * params[0] the sandbox, params[1] the port */
};

/* Query parameter or request header (NULL if absent). */
const char *http_query(struct http_req *req, const char *name);
const char *http_header(struct http_req *req, const char *name);
/* Every value of a repeatable query parameter (?label=a&label=b): stores
 * up to max pointers (owned by the request) in out and returns how many
 * there are in all (which may exceed max). */
size_t http_query_all(struct http_req *req, const char *name, const char **out, size_t max);
/* Call fn for every request header, in the order received; stops early when
 * fn returns nonzero. */
void http_headers_each(struct http_req *req, int (*fn)(void *ud, const char *name,
						      const char *value), void *ud);
/* Whether the client asked for NDJSON (Accept: application/x-ndjson). */
int http_wants_ndjson(struct http_req *req);

/* A multipart/form-data request body, parsed by libmicrohttpd's post
 * processor (for E2B's file uploads): feed it the body as a RAW route's
 * chunk() gets it; `fn` is called for each piece of each part's content in
 * order, with the part's field name, its filename (NULL if none) and the
 * offset of the piece in the part (0: a new part begins).  fn returns 0,
 * or -1 to stop (http_form_feed() then fails).  http_form_new() is NULL
 * when the request's Content-Type is not multipart/form-data (or out of
 * memory); http_form_free() returns 0 if the body ended where a form
 * ends, -1 if it was cut short or malformed. */
struct http_form;
typedef int (*http_form_fn)(void *ud, const char *field, const char *filename, const char *data,
			    size_t len, uint64_t off);
struct http_form *http_form_new(struct http_req *req, http_form_fn fn, void *ud);
int http_form_feed(struct http_form *f, const char *data, size_t len);
int http_form_free(struct http_form *f);

/* From a RAW route's begin(): its chunk() and end() may wait for a
 * command (feeding a stdin it does not read): they run on a pool of
 * workers of their own, so that such waits never hold up other requests. */
void http_long_wait(struct http_req *req);

/* One extra header for whatever answer the request gets (set it before
 * answering; a second call replaces the first).  name and value are not
 * copied: pass strings that outlive the request (literals). */
void http_set_header(struct http_req *req, const char *name, const char *value);

/* ---- answering (each returns 0; call exactly one per request) ---------- */

/* JSON body; steals the reference to body. */
int http_json(struct http_req *req, int status, json_t *body);
/* {"error": {"code": code, "message": ...}} */
int http_error(struct http_req *req, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Answer an error of the domain layer or libsandlot: the one mapping of
 * statuses to HTTP (errmap.c; the table is in domain.h's header comment),
 * with the error's details as fields of the error object.  err is not
 * freed. */
int http_error_from(struct http_req *req, const sandlot_error_t *err);
/* The HTTP status (and *code, if not NULL) http_error_from() answers for
 * err: for surfaces with an error shape of their own. */
int http_status_of(const sandlot_error_t *err, const char **code);
int http_empty(struct http_req *req, int status);              /* e.g. 204 */
int http_text(struct http_req *req, int status, const char *content_type, const char *text);

/* ---- waiting without a thread ----------------------------------------- */

/* Why a parked request or stream was woken (workq.h). */
enum { HTTP_WAKE_READY = 1, HTTP_WAKE_TIMEOUT = 2, HTTP_WAKE_GONE = 3, HTTP_WAKE_STOP = 4 };

/* Instead of answering, park the request: once the handler (or
 * continuation) returns, `fn(req, why)` is called on a worker thread when
 * fd becomes readable (HTTP_WAKE_READY), timeout_ms passes (timeout, <0:
 * none), the client hangs up (HTTP_WAKE_GONE) or sandlotd stops
 * (HTTP_WAKE_STOP).  fd may be -1, and must stay open until fn runs.  fn
 * answers, or parks again; keep what it needs in req->state.  Returns 0. */
typedef void (*http_resume_fn)(struct http_req *req, int why);
int http_park(struct http_req *req, int fd, int timeout_ms, http_resume_fn fn);

/* ---- streamed answers --------------------------------------------------- */

/* A streamed body of unknown length (chunked: a stream cut by an error
 * ends without the terminating chunk, so that no client takes a part for
 * the whole).
 *
 * `read` runs on a worker thread and fills buf with up to max bytes.  It
 * returns the bytes written (> 0), 0 at the end of the body,
 * HTTP_STREAM_ERROR to cut the body short, or HTTP_STREAM_WAIT when it has
 * nothing now: then it sets w->fd (readable when there may be news, or -1)
 * and w->timeout_ms (when to look again anyway, or -1), and is called
 * again after that — or the stream ends there if the client went away.  It
 * may block as long as a sandbox call takes, not for a command.
 *
 * `free` is called once, on a worker thread, when the answer is done
 * whatever the outcome, with `completed` = 1 if the body ended normally (0:
 * cut, or the client went away).  It may block (to kill a command). */
#define HTTP_STREAM_ERROR (-1)
#define HTTP_STREAM_WAIT (-2)
struct http_wait {
	int fd;
	int timeout_ms;
};
typedef ssize_t (*http_stream_read_fn)(void *ud, char *buf, size_t max, struct http_wait *w);
typedef void (*http_stream_free_fn)(void *ud, int completed);
int http_stream(struct http_req *req, int status, const char *content_type,
		http_stream_read_fn read, http_stream_free_fn free_fn, void *ud);

/* A streamed response put together piecewise (the proxy): its body comes
 * from `read` as for http_stream(), `size` bytes long, or of unknown length
 * (HTTP_SIZE_UNKNOWN: chunked).  Add headers, then send it with
 * http_resp_send(), which answers the request (and frees r); on any
 * failure before that, http_resp_free().  free_fn runs once either way. */
#define HTTP_SIZE_UNKNOWN UINT64_MAX
struct http_resp;
struct http_resp *http_resp_stream(uint64_t size, http_stream_read_fn read,
				   http_stream_free_fn free_fn, void *ud);
/* 0, or -1 if libmicrohttpd refuses the header (it sets Content-Length,
 * Transfer-Encoding, Connection and Date itself). */
int http_resp_header(struct http_resp *r, const char *name, const char *value);
int http_resp_send(struct http_req *req, int status, struct http_resp *r);
void http_resp_free(struct http_resp *r);

/* Switching protocols (101, a WebSocket): send the response r made with
 * http_resp_upgrade(), after which the connection is the handler's:
 * `upgraded` is called once, on a libmicrohttpd thread (so it must not
 * block), with the client's socket (non-blocking use is fine; never close
 * it), the bytes the server had already read past the
 * request, and a handle that http_upgrade_close() takes when the handler is
 * done with the socket (exactly once, from any thread).  If the upgrade
 * never happens (the client went away first), `dropped` is called instead,
 * once, when the request ends. */
typedef void (*http_upgrade_fn)(void *ud, int sock, const char *extra, size_t extra_len,
				void *handle);
struct http_resp *http_resp_upgrade(http_upgrade_fn upgraded, void (*dropped)(void *ud),
				    void *ud);
void http_upgrade_close(void *handle);

/* ---- server ------------------------------------------------------------- */

struct http_server;

struct http_config {
	const char *const *listens;   /* "unix:PATH" (mode 0660, stale socket
	                               * replaced) or "tcp:HOST:PORT" */
	int nlisten;
	const char *token;            /* required on TCP listeners */
	unsigned max_connections;     /* see gate.h */
	unsigned max_per_peer;
	unsigned header_timeout_s;
	/* Requests whose Host is PORT-ID.sandbox_domain go to that port of
	 * that sandbox (e2b.h, proxy.c) instead of a route; NULL: none do. */
	const char *sandbox_domain;
};

/* Listen and serve routes (terminated by a zero entry). */
struct http_server *http_start(struct daemon *d, const struct http_config *cfg,
			       const struct http_route *routes, sandlot_error_t **err);
/* Stop accepting new connections (and remove the unix socket files); the
 * requests in progress continue.  Idempotent. */
void http_quiesce(struct http_server *s);
/* Stop accepting and wait for running requests (bounded by timeout_ms,
 * after which connections are closed). */
void http_stop(struct http_server *s, unsigned timeout_ms);
/* Prometheus lines of the HTTP layer (connections, workers); a new
 * string or NULL. */
char *http_metrics(struct http_server *s);

#endif
