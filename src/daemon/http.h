/* sandlotd's HTTP layer: libmicrohttpd underneath, a route table above.
 *
 * Threads: libmicrohttpd runs one thread per connection
 * (MHD_USE_THREAD_PER_CONNECTION), so a handler may block — on a sandbox
 * call, or while streaming a response.  An idle sandbox costs no thread.
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
 *             connection is closed after the answer instead.
 *   NOBODY    GET/DELETE style; a body, if sent, is ignored.
 *
 * A route's method "*" matches every method, and a pattern ending in "*"
 * matches any rest of the path (the proxy: "/v1/sandboxes/{}/ports/{}/" then
 * a star).
 *
 * Every handler answers exactly once with one of the http_* response
 * functions.  Answers are JSON (application/json) except raw file bytes,
 * tar archives, NDJSON streams and /metrics.
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
	void *state;                 /* RAW routes: handler's own state */
	void *conn;                  /* struct MHD_Connection * */
	int client_fd;               /* the client's socket (disconnect checks) */
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
/* Map a sandlot error to a status: ENOENT 404 not_found, EEXIST 409,
 * EISDIR/ENOTDIR/EINVAL/ENAMETOOLONG/ELOOP 400, ENOSPC/EDQUOT 507
 * insufficient_storage, EPIPE 410 sandbox_gone, EACCES/EPERM 403, else 500. */
int http_error_from(struct http_req *req, const sandlot_error_t *err);
int http_empty(struct http_req *req, int status);              /* e.g. 204 */
int http_text(struct http_req *req, int status, const char *content_type, const char *text);

/* A streamed body of unknown length (chunked).  `read` is called from the
 * connection's thread whenever libmicrohttpd can send: it returns bytes
 * written into buf (> 0), 0 at the end of the body, or -1 to abort the
 * connection (e.g. the client went away: see http_client_gone).  It may
 * block.  `free` is called once when the response is done, whatever the
 * outcome, with `completed` = 1 if the body ended normally. */
typedef ssize_t (*http_stream_read_fn)(void *ud, char *buf, size_t max);
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
 * `upgraded` is called once with the client's socket (non-blocking use is
 * fine; never close it), the bytes the server had already read past the
 * request, and a handle that http_upgrade_close() takes when the handler is
 * done with the socket (exactly once, from any thread).  If the upgrade
 * never happens (the client went away first), `dropped` is called instead,
 * once, when the request ends. */
typedef void (*http_upgrade_fn)(void *ud, int sock, const char *extra, size_t extra_len,
				void *handle);
struct http_resp *http_resp_upgrade(http_upgrade_fn upgraded, void (*dropped)(void *ud),
				    void *ud);
void http_upgrade_close(void *handle);

/* While streaming: wait up to timeout_ms for `wake_fd` (an eventfd or pipe,
 * may be -1) to become readable or for the client to hang up.  Returns 1 if
 * wake_fd is readable, 0 on timeout, -1 if the client is gone. */
int http_wait(int client_fd, int wake_fd, int timeout_ms);

/* ---- server ------------------------------------------------------------- */

struct http_server;

/* Listen on "unix:PATH" (mode 0660, stale socket replaced) or
 * "tcp:HOST:PORT" (bearer token required when token != NULL).  Routes are
 * served from `routes` (terminated by a zero entry). */
struct http_server *http_start(struct daemon *d, const char *listen, const char *token,
			       const struct http_route *routes, sandlot_error_t **err);
/* Stop accepting new connections (and remove the unix socket file); the
 * requests in progress continue.  Idempotent. */
void http_quiesce(struct http_server *s);
/* Stop accepting and wait for running requests (bounded by timeout_ms,
 * after which connections are closed). */
void http_stop(struct http_server *s, unsigned timeout_ms);

#endif
