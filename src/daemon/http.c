/* sandlotd's HTTP layer (contract in http.h): libmicrohttpd in its internal
 * epoll mode with a small thread pool, fed by the front door (gate.c), under
 * a route table; handlers on the worker pool (workq.c).
 *
 * Life of a request, as libmicrohttpd drives it (its threads, "MHD"):
 *
 *   uri_log()      request line read: allocate our struct req (the raw,
 *                  still percent-encoded URI is kept: libmicrohttpd decodes
 *                  the path it hands to the access handler, which would turn
 *                  "%2F" inside a segment into a separator).
 *   access() #1    headers read: framing, version, token, limits, NUL
 *                  bytes, route match, Content-Length check — all cheap,
 *                  on MHD.  An error decided here is kept pending and the
 *                  body (if any) is read and dropped, so the client can
 *                  finish sending and then read the answer (401: answered at
 *                  once, connection closed).  RAW routes: the connection is
 *                  suspended and begin() runs on a worker; the next call
 *                  comes after it.
 *   access() #2..  body pieces: accumulated (JSON), handed to chunk() on a
 *                  worker (RAW, at most 128 KiB read ahead while it works)
 *                  or dropped.
 *   access() last  body complete: the connection is suspended and the
 *                  handler (or end()) runs on a worker; it answers, parks
 *                  (the waits of workq.h, then a continuation on a worker)
 *                  or streams.  The worker resumes the connection and the
 *                  call after that queues the answer.
 *   completed()    the response is done or the client went away: RAW
 *                  abort() if the body never completed (on a worker), one
 *                  log line, metrics, free.
 *
 * A streamed answer's content reader (MHD) never blocks: it hands out what
 * a worker read ahead; when that is used up it suspends the connection and
 * a worker calls the stream's read function, which returns data, the end,
 * or HTTP_STREAM_WAIT — then the stream is parked until its descriptor or
 * timeout fires or the client hangs up, and the connection resumed when
 * there is data (or an error, which ends the chunked body without its
 * terminating chunk).
 *
 * Who touches a request: MHD while no job owns it (r->busy == 0), a worker
 * while one does; the RAW read-ahead buffer is handed between them under
 * r->lock.  The connection is suspended whenever a job owns the request,
 * except while chunk() works on a body piece (MHD reads ahead meanwhile);
 * so libmicrohttpd never completes a request under a running job — except a
 * client leaving mid-body during chunk(), which completed() leaves to that
 * job to finish (r->orphaned).
 */
#include "daemon/http.h"

#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/percent.h"
#include "common/util.h"
#include "daemon/daemon.h"
#include "daemon/e2b.h"
#include "daemon/gate.h"
#include "daemon/workq.h"

/* Per-connection memory of libmicrohttpd: holds the request line and
 * headers being read and the buffers of the response being sent.  The
 * first head of a connection is bounded by the door (MAX_HEAD); later ones
 * by this. */
#define CONN_MEMORY (64u * 1024)
#define MAX_HEAD (32u * 1024)
/* libmicrohttpd's own timeout: a connection it serves on which nothing
 * moved either way (a kept-alive one has the door's deadline too). */
#define CONN_IDLE_TIMEOUT_S 600
#define KEEPALIVE_S 600
/* A request answered before its body was read: read and drop at most this
 * much of the body so the client can read the answer; past it the
 * connection is closed. */
#define DISCARD_MAX (64ull << 20)
#define RAW_AHEAD (128u << 10)     /* RAW body read while chunk() works */
#define STREAM_BUF (128u << 10)    /* a stream's read-ahead */
#define STREAM_FILL (64u << 10)    /* read at least this much per job, when there is */
#define MHD_THREADS_MAX 4

struct http_server {
	struct daemon *d;
	struct MHD_Daemon *mhd;
	struct gate *gate;
	const struct http_route *routes;
	char *bearer;                /* "Bearer TOKEN" for TCP clients, or NULL */
	const char *sandbox_domain;  /* http_config's */
	pthread_mutex_t lock;
	pthread_cond_t idle;         /* active went to 0 */
	int active;                  /* requests between access #1 and completed() */
	int stopped;
};

enum stage { S_NEW, S_BEGIN, S_BODY, S_FINAL };

struct req {
	struct http_req pub;         /* first: handlers get &r->pub */
	struct http_server *srv;
	struct gate_conn *gc;
	char *raw_uri;
	const struct http_route *rt;
	enum stage stage;
	int counted;                 /* in srv->active */
	struct MHD_Response *pending;
	unsigned pending_status;
	int close_after;             /* answer with Connection: close */
	uint64_t discarded;
	/* JSON body */
	char *body;
	size_t body_len, body_cap;
	/* jobs */
	pthread_mutex_t lock;        /* busy, suspended, orphaned, the read-ahead */
	int busy;                    /* a job owns the request */
	int suspended;               /* we suspended the connection */
	int orphaned;                /* completed() came during a job */
	enum MHD_RequestTerminationCode toe;
	struct workq_job job;
	struct park park;
	http_resume_fn cont, park_fn;
	int park_fd, park_ms, why;
	/* RAW */
	char *ahead, *work;          /* read ahead (MHD) / being given to chunk() */
	size_t ahead_len, work_len;
	int want_end;
	int long_wait;               /* http_long_wait(): chunk() on WORKQ_LONG */
	int raw_begun, raw_ended, raw_stopped;
	char *param_buf[4];
	char *path;                  /* pub->path */
	char method[16];             /* pub->method: the request may outlive the
	                              * connection that holds libmicrohttpd's */
	struct upgrade_ctx *upgrade; /* an upgrade response was sent */
};

struct upgrade_ctx {
	http_upgrade_fn upgraded;
	void (*dropped)(void *ud);
	void *ud;
	int ran;
};

static struct req *job_req(struct workq_job *j)
{
	return (struct req *)((char *)j - offsetof(struct req, job));
}

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
	case 505: return "http_version_not_supported";
	case 507: return "insufficient_storage";
	default: return status >= 500 ? "internal" : "bad_request";
	}
}

/* ---- answering ----------------------------------------------------------- */

/* Keep the answer for libmicrohttpd: it is queued from the access
 * handler (the only place it can be) after the handler's job. */
static int deliver(struct http_req *pub, unsigned status, struct MHD_Response *resp)
{
	struct req *r = (struct req *)pub;
	if (!resp) {
		daemon_log("http_error", "level=error msg=\"cannot allocate a response\" path=%s",
			   pub->path ? pub->path : "-");
		resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
		status = 500;
		if (!resp) {
			pub->answered = 1;
			pub->status = 500;
			return 0;
		}
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
	if (r->close_after)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	r->pending = resp;
	r->pending_status = status;
	return 0;
}

/* MHD, inside the access handler: hand the kept answer over. */
static void queue_pending(struct req *r)
{
	if (!r->pending)
		return;
	if (MHD_queue_response(r->pub.conn, r->pending_status, r->pending) != MHD_YES)
		daemon_log("http_error", "level=error msg=\"queue response failed\" status=%u",
			   r->pending_status);
	MHD_destroy_response(r->pending);
	r->pending = NULL;
}

void http_long_wait(struct http_req *req)
{
	((struct req *)req)->long_wait = 1;
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
	json_t *o = json_object();
	if (req->host_routed) {
		/* A sandbox's host: E2B's shape, with our code named. */
		json_object_set_new(o, "code", json_integer(status));
		json_object_set_new(o, "error", json_string(code ? code : status_code_name(status)));
		json_object_set_new(o, "message", json_text(msg, strlen(msg)));
		return http_json(req, status, o);
	}
	if (req->path && e2b_path(req->path, strlen(req->path))) {
		/* E2B's shape, which its SDKs read (e2b.h). */
		json_object_set_new(o, "code", json_integer(status));
		json_object_set_new(o, "message", json_text(msg, strlen(msg)));
		return http_json(req, status, o);
	}
	json_t *e = json_object();
	json_object_set_new(e, "code", json_string(code ? code : status_code_name(status)));
	json_object_set_new(e, "message", json_text(msg, strlen(msg)));
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

/* ---- suspending and resuming --------------------------------------------------- */

/* r->lock held.  Suspend before handing to a job, so that the job's
 * resume always comes after. */
static void suspend_locked(struct req *r)
{
	if (!r->suspended) {
		r->suspended = 1;
		MHD_suspend_connection(r->pub.conn);
	}
}

/* A job is done with r: release it and resume the connection if it was
 * suspended.  Returns 0, or 1 when completed() came meanwhile (the caller
 * finishes the request). */
static int release(struct req *r)
{
	pthread_mutex_lock(&r->lock);
	r->busy = 0;
	int orphaned = r->orphaned;
	int was = r->suspended;
	r->suspended = 0;
	pthread_mutex_unlock(&r->lock);
	if (orphaned)
		return 1;
	if (was)
		MHD_resume_connection(r->pub.conn);
	return 0;
}

static void finish_request(struct req *r);

/* ---- handler jobs --------------------------------------------------------------- */

int http_park(struct http_req *req, int fd, int timeout_ms, http_resume_fn fn)
{
	struct req *r = (struct req *)req;
	r->park_fn = fn;
	r->park_fd = fd;
	r->park_ms = timeout_ms;
	return 0;
}

static void handler_job(struct workq_job *j);

static void park_fired(struct park *p, int why)
{
	struct req *r = (struct req *)((char *)p - offsetof(struct req, park));
	r->why = why;
	handler_job(&r->job);
}

/* After a handler, continuation or end(): park, or resume with the answer. */
static void job_done(struct req *r)
{
	struct http_req *pub = &r->pub;
	if (r->park_fn && !pub->answered) {
		r->cont = r->park_fn;
		r->park_fn = NULL;
		park_start(&r->park, r->park_fd, pub->client_fd, r->park_ms, park_fired);
		return;
	}
	r->park_fn = NULL;
	if (!pub->answered)
		http_error(pub, 500, "internal", "the handler of %s %s did not answer", pub->method,
			   pub->route);
	if (release(r))
		finish_request(r);
}

/* Whether fd is readable right now. */
static int fd_ready(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* At most this many times in a row a job runs a continuation itself when
 * its wait is already over, instead of parking (the round trip through the
 * parking thread and the queue costs ~0.1 ms on a busy host). */
#define INLINE_WAKES 8

static void handler_job(struct workq_job *j)
{
	struct req *r = job_req(j);
	struct http_req *pub = &r->pub;
	for (int inline_wakes = 0;; inline_wakes++) {
		if (r->cont) {
			http_resume_fn fn = r->cont;
			r->cont = NULL;
			fn(pub, r->why);
		} else {
			r->rt->handle(pub);
		}
		if (!r->park_fn || pub->answered || inline_wakes == INLINE_WAKES ||
		    !fd_ready(r->park_fd))
			break;
		r->cont = r->park_fn;
		r->park_fn = NULL;
		r->why = HTTP_WAKE_READY;
	}
	job_done(r);
}

static void raw_begin_job(struct workq_job *j)
{
	struct req *r = job_req(j);
	struct http_req *pub = &r->pub;
	int rc = r->rt->handle(pub);
	if (rc < 0 || pub->answered) {
		r->raw_stopped = 1;
		if (!pub->answered)
			http_error(pub, 500, "internal", "request handler failed");
	} else {
		r->raw_begun = 1;
	}
	if (release(r))
		finish_request(r);
}

/* Give chunk() what was read, again while MHD read more meanwhile; then
 * end() if the body is complete.  The last look at the read-ahead and
 * giving the request back (busy = 0) are one step under r->lock: else
 * body_piece() could add to the read-ahead in between, and the next job
 * would hand its piece to chunk() before that one. */
static void raw_chunk_job(struct workq_job *j)
{
	struct req *r = job_req(j);
	struct http_req *pub = &r->pub;
	for (;;) {
		int stop = 0;
		if (r->work_len > 0 && !r->raw_stopped && !pub->answered) {
			if (r->rt->chunk(pub, r->work, r->work_len) < 0 || pub->answered) {
				stop = 1;
				if (!pub->answered)
					http_error(pub, 500, "internal", "request handler failed");
			}
		}
		pthread_mutex_lock(&r->lock);
		r->work_len = 0;
		if (stop)
			r->raw_stopped = 1; /* (body_piece() reads it under the lock) */
		if (r->orphaned) {
			/* The client left mid-body: completed() came and went. */
			r->busy = 0;
			pthread_mutex_unlock(&r->lock);
			finish_request(r);
			return;
		}
		if (r->ahead_len > 0) {
			char *t = r->work;
			r->work = r->ahead;
			r->work_len = r->ahead_len;
			r->ahead = t;
			r->ahead_len = 0;
			/* MHD may have stopped for room: let it read on. */
			int was = r->suspended && !r->want_end;
			if (was)
				r->suspended = 0;
			pthread_mutex_unlock(&r->lock);
			if (was)
				MHD_resume_connection(pub->conn);
			continue;
		}
		if (r->want_end) {
			/* The body is complete and the connection suspended: nothing
			 * else touches r until job_done() gives it back. */
			pthread_mutex_unlock(&r->lock);
			if (!r->raw_stopped && !pub->answered) {
				r->raw_ended = 1;
				r->rt->end(pub);
			}
			job_done(r);
			return;
		}
		r->busy = 0;
		int was = r->suspended;
		r->suspended = 0;
		pthread_mutex_unlock(&r->lock);
		if (was)
			MHD_resume_connection(pub->conn);
		return;
	}
}

/* ---- streams --------------------------------------------------------------------- */

struct hstream {
	struct MHD_Connection *conn;
	int client_fd;
	http_stream_read_fn read;
	http_stream_free_fn free_fn;
	void *ud;
	pthread_mutex_t lock;       /* everything below */
	char *buf;
	size_t len, off;
	int eof, error, completed;
	int sized;                  /* of a known size: its end before that is a cut */
	int busy;                   /* a read job runs or is parked */
	int suspended;
	int refs;                   /* the response, and a busy job */
	struct workq_job job;
	struct park park;
};

static void stream_free_job(struct workq_job *j)
{
	struct hstream *hs = (struct hstream *)((char *)j - offsetof(struct hstream, job));
	hs->free_fn(hs->ud, hs->completed);
	pthread_mutex_destroy(&hs->lock);
	free(hs->buf);
	free(hs);
}

static void stream_unref(struct hstream *hs)
{
	pthread_mutex_lock(&hs->lock);
	int last = --hs->refs == 0;
	pthread_mutex_unlock(&hs->lock);
	if (last) /* free_fn may block: never on MHD */
		workq_submit(&hs->job, stream_free_job);
}

/* A read job is over: publish, resume, drop its reference. */
static void stream_done(struct hstream *hs, size_t len, int eof, int error)
{
	pthread_mutex_lock(&hs->lock);
	hs->len = len;
	hs->off = 0;
	hs->eof |= eof;
	hs->error |= error;
	hs->busy = 0;
	int was = hs->suspended;
	hs->suspended = 0;
	pthread_mutex_unlock(&hs->lock);
	if (was)
		MHD_resume_connection(hs->conn);
	stream_unref(hs);
}

static void stream_park_fired(struct park *p, int why);

static void stream_read_job(struct workq_job *j)
{
	struct hstream *hs = (struct hstream *)((char *)j - offsetof(struct hstream, job));
	if (!hs->buf && !(hs->buf = malloc(STREAM_BUF))) {
		stream_done(hs, 0, 0, 1);
		return;
	}
	size_t len = 0;
	int inline_wakes = 0;
	while (len < STREAM_FILL) {
		struct http_wait w = { .fd = -1, .timeout_ms = -1 };
		ssize_t n = hs->read(hs->ud, hs->buf + len, STREAM_BUF - len, &w);
		if (n > 0) {
			len += (size_t)n;
			continue;
		}
		if (n == 0) {
			stream_done(hs, len, 1, 0);
			return;
		}
		if (n == HTTP_STREAM_WAIT) {
			if (len > 0)
				break; /* send what there is; the wait comes next time */
			if (inline_wakes++ < INLINE_WAKES && fd_ready(w.fd))
				continue; /* news already: no round trip through parking */
			park_start(&hs->park, w.fd, hs->client_fd, w.timeout_ms, stream_park_fired);
			return;
		}
		stream_done(hs, len, 0, 1);
		return;
	}
	stream_done(hs, len, 0, 0);
}

static void stream_park_fired(struct park *p, int why)
{
	struct hstream *hs = (struct hstream *)((char *)p - offsetof(struct hstream, park));
	if (why == PARK_GONE || why == PARK_STOP) {
		/* The client left (or sandlotd stops): end the stream; its free
		 * function learns it was not completed. */
		stream_done(hs, 0, 0, 1);
		return;
	}
	stream_read_job(&hs->job);
}

/* The reader below is about to end the response in a way that makes
 * libmicrohttpd close the connection: an error, or the end of a response
 * of known size before that size.  libmicrohttpd (0.9.75) closes it from
 * inside its state machine, and such a connection is freed (its socket
 * closed) only by a later pass of its thread over the connection's
 * timeout list — a pass that walks that list from the oldest connection
 * and stops at the first one still open.  A connection resumed from a
 * park to learn that its client left is neither in the thread's epoll set
 * nor on its ready list then, so nothing but that pass reaches it: behind
 * an older open connection (a kept-alive client) on the same thread, or
 * with nothing else for that thread to do, it stayed closed but not freed
 * for up to CONN_IDLE_TIMEOUT_S, with its socket and its place in the
 * door's count.  A timeout of its own moves it to
 * the list of connections with their own timeouts, which every pass walks
 * in full and whose earliest deadline bounds the thread's wait: it is
 * freed within a second. */
static void closing_from_reader(struct MHD_Connection *conn)
{
	MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 1u);
}

/* MHD's content reader: never blocks. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *out, size_t max)
{
	(void)pos;
	struct hstream *hs = cls;
	pthread_mutex_lock(&hs->lock);
	if (hs->off < hs->len) {
		size_t n = hs->len - hs->off;
		if (n > max)
			n = max;
		memcpy(out, hs->buf + hs->off, n);
		hs->off += n;
		pthread_mutex_unlock(&hs->lock);
		return (ssize_t)n;
	}
	if (hs->error) {
		pthread_mutex_unlock(&hs->lock);
		closing_from_reader(hs->conn);
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	if (hs->eof) {
		hs->completed = 1;
		int cut = hs->sized;
		pthread_mutex_unlock(&hs->lock);
		if (cut)
			closing_from_reader(hs->conn);
		return MHD_CONTENT_READER_END_OF_STREAM;
	}
	int start = !hs->busy;
	if (start) {
		hs->busy = 1;
		hs->refs++;
	}
	if (!hs->suspended) {
		hs->suspended = 1;
		MHD_suspend_connection(hs->conn);
	}
	pthread_mutex_unlock(&hs->lock);
	if (start)
		workq_submit(&hs->job, stream_read_job);
	return 0;
}

static void stream_response_gone(void *cls)
{
	stream_unref(cls);
}

/* A streamed response of `size` bytes (MHD_SIZE_UNKNOWN: chunked) over a
 * new hstream; NULL (free_fn called) on failure. */
static struct MHD_Response *stream_response(struct http_req *req, uint64_t size,
					    http_stream_read_fn read, http_stream_free_fn free_fn,
					    void *ud)
{
	struct hstream *hs = calloc(1, sizeof(*hs));
	if (!hs) {
		if (free_fn)
			free_fn(ud, 0);
		return NULL;
	}
	hs->conn = req->conn;
	hs->client_fd = req->client_fd;
	hs->read = read;
	hs->free_fn = free_fn;
	hs->ud = ud;
	hs->refs = 1;
	hs->sized = size != MHD_SIZE_UNKNOWN;
	pthread_mutex_init(&hs->lock, NULL);
	struct MHD_Response *resp = MHD_create_response_from_callback(
		size, 64 * 1024, stream_reader, hs, stream_response_gone);
	if (!resp) {
		pthread_mutex_destroy(&hs->lock);
		free(hs);
		if (free_fn)
			free_fn(ud, 0);
	}
	return resp;
}

int http_stream(struct http_req *req, int status, const char *content_type,
		http_stream_read_fn read, http_stream_free_fn free_fn, void *ud)
{
	struct MHD_Response *resp = stream_response(req, MHD_SIZE_UNKNOWN, read, free_fn, ud);
	if (!resp)
		return deliver(req, 500, NULL);
	if (content_type)
		MHD_add_response_header(resp, "Content-Type", content_type);
	/* Tell proxies not to buffer a live stream. */
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	return deliver(req, (unsigned)status, resp);
}

/* What http_resp_* hand around: the libmicrohttpd response, and for an
 * upgrade its context.  A stream's hstream is made when the response is
 * sent (it needs the request's connection). */
struct http_resp {
	struct MHD_Response *resp;
	struct upgrade_ctx *upgrade;
	uint64_t size;
	http_stream_read_fn read;
	http_stream_free_fn free_fn;
	void *ud;
	struct http_hdr {
		char *name, *value;
	} *hdrs;
	size_t nhdrs;
};

struct http_resp *http_resp_stream(uint64_t size, http_stream_read_fn read,
				   http_stream_free_fn free_fn, void *ud)
{
	struct http_resp *r = calloc(1, sizeof(*r));
	if (!r) {
		if (free_fn)
			free_fn(ud, 0);
		return NULL;
	}
	r->size = size == HTTP_SIZE_UNKNOWN ? MHD_SIZE_UNKNOWN : size;
	r->read = read;
	r->free_fn = free_fn;
	r->ud = ud;
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
	if (r->resp)
		return MHD_add_response_header(r->resp, name, value) == MHD_YES ? 0 : -1;
	/* A stream's: kept until it is made.  libmicrohttpd sets these itself. */
	if (strcasecmp(name, "Content-Length") == 0 || strcasecmp(name, "Transfer-Encoding") == 0 ||
	    strcasecmp(name, "Connection") == 0 || strcasecmp(name, "Date") == 0)
		return -1;
	struct http_hdr *h = realloc(r->hdrs, (r->nhdrs + 1) * sizeof(*h));
	if (!h)
		return -1;
	r->hdrs = h;
	h[r->nhdrs].name = strdup(name);
	h[r->nhdrs].value = strdup(value);
	if (!h[r->nhdrs].name || !h[r->nhdrs].value) {
		free(h[r->nhdrs].name);
		free(h[r->nhdrs].value);
		return -1;
	}
	r->nhdrs++;
	return 0;
}

static void resp_headers_free(struct http_resp *r)
{
	for (size_t i = 0; i < r->nhdrs; i++) {
		free(r->hdrs[i].name);
		free(r->hdrs[i].value);
	}
	free(r->hdrs);
	r->hdrs = NULL;
	r->nhdrs = 0;
}

int http_resp_send(struct http_req *req, int status, struct http_resp *r)
{
	struct req *rq = (struct req *)req;
	struct MHD_Response *resp = r->resp;
	r->resp = NULL; /* deliver() takes it */
	if (!resp && r->read) {
		resp = stream_response(req, r->size, r->read, r->free_fn, r->ud);
		r->read = NULL; /* free_fn is the stream's (or was called) */
		for (size_t i = 0; resp && i < r->nhdrs; i++)
			MHD_add_response_header(resp, r->hdrs[i].name, r->hdrs[i].value);
	}
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
	if (r->read && r->free_fn)
		r->free_fn(r->ud, 0);
	if (r->upgrade) {
		r->upgrade->dropped(r->upgrade->ud);
		free(r->upgrade);
	}
	resp_headers_free(r);
	free(r);
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

/* ---- multipart/form-data bodies (http.h) ---------------------------------- */

struct http_form {
	struct MHD_PostProcessor *pp;
	http_form_fn fn;
	void *ud;
	int failed;
};

static enum MHD_Result form_it(void *cls, enum MHD_ValueKind kind, const char *key,
			       const char *filename, const char *content_type,
			       const char *transfer_encoding, const char *data, uint64_t off,
			       size_t size)
{
	(void)kind;
	(void)content_type;
	(void)transfer_encoding;
	struct http_form *f = cls;
	if (f->fn(f->ud, key ? key : "", filename, data, size, off) < 0) {
		f->failed = 1;
		return MHD_NO;
	}
	return MHD_YES;
}

struct http_form *http_form_new(struct http_req *req, http_form_fn fn, void *ud)
{
	const char *ct = http_header(req, "Content-Type");
	if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0)
		return NULL;
	struct http_form *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->fn = fn;
	f->ud = ud;
	f->pp = MHD_create_post_processor(req->conn, 64 * 1024, form_it, f);
	if (!f->pp) {
		free(f);
		return NULL;
	}
	return f;
}

int http_form_feed(struct http_form *f, const char *data, size_t len)
{
	if (f->failed)
		return -1;
	if (len > 0 && MHD_post_process(f->pp, data, len) != MHD_YES)
		f->failed = 1;
	return f->failed ? -1 : 0;
}

int http_form_free(struct http_form *f)
{
	if (!f)
		return -1;
	int ok = MHD_destroy_post_processor(f->pp) == MHD_YES && !f->failed;
	free(f);
	return ok ? 0 : -1;
}

/* ---- routing ------------------------------------------------------------ */

/* Where the raw URI encodes a NUL byte ("%00"): 0 if nowhere; else 1 and
 * `what` names the part ("the request path", "the query parameter \"x\""). */
static int find_nul(const char *uri, char *what, size_t n)
{
	const char *q = strchr(uri, '?');
	for (const char *p = uri; (p = strchr(p, '%')); p++) {
		if (p[1] != '0' || p[2] != '0')
			continue;
		if (!q || p < q) {
			snprintf(what, n, "the request path");
			return 1;
		}
		/* The parameter holding it: from the '&' (or '?') before it. */
		const char *start = p;
		while (start > q + 1 && start[-1] != '&')
			start--;
		size_t klen = strcspn(start, "=&");
		char key[64];
		size_t k = 0;
		for (size_t i = 0; i < klen && k < sizeof(key) - 1; i++) {
			unsigned char c = (unsigned char)start[i];
			key[k++] = c > 0x20 && c < 0x7f && c != '"' && c != '\\' ? (char)c : '?';
		}
		key[k] = '\0';
		snprintf(what, n, "the query parameter \"%s\"", key);
		return 1;
	}
	return 0;
}

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
	pthread_mutex_init(&r->lock, NULL);
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

/* Under /e2b: whether E2B's key headers let the request in (e2b.h). */
static int e2b_key_header_ok(struct http_req *pub, const char *token)
{
	struct MHD_Connection *conn = pub->conn;
	const char *k = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-API-KEY");
	const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Access-Token");
	const char *id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "E2b-Sandbox-Id");
	const char *t = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
						    "E2B-Traffic-Access-Token");
	struct e2b_keys keys = { k, k ? strlen(k) : 0, a, a ? strlen(a) : 0, id,
				 id ? strlen(id) : 0, pub->uri, strlen(pub->uri), t,
				 t ? strlen(t) : 0 };
	return e2b_key_ok(token, &keys);
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

struct framing {
	unsigned length, te, host, auth;
	const char *te_value;
};

static enum MHD_Result count_headers(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct framing *f = cls;
	if (!key)
		return MHD_YES;
	if (strcasecmp(key, "Content-Length") == 0)
		f->length++;
	else if (strcasecmp(key, "Transfer-Encoding") == 0) {
		f->te++;
		f->te_value = value;
	} else if (strcasecmp(key, "Host") == 0)
		f->host++;
	else if (strcasecmp(key, "Authorization") == 0)
		f->auth++;
	return MHD_YES;
}

/* The door checked the first head of the connection (httphead.h); later
 * ones of a kept-alive connection only libmicrohttpd read: the same
 * framing rules, on what it parsed.  (A Content-Length it could not parse
 * it answers itself.)  0, or -1 having answered. */
static int check_framing(struct req *r, const char *version)
{
	struct framing f = { 0 };
	MHD_get_connection_values(r->pub.conn, MHD_HEADER_KIND, count_headers, &f);
	static const char *const names[] = { "Content-Length", "Transfer-Encoding", "Host",
					     "Authorization" };
	unsigned counts[] = { f.length, f.te, f.host, f.auth };
	for (int i = 0; i < 4; i++)
		if (counts[i] > 1)
			return early_error(r, 400, "bad_request", "duplicated header %s", names[i]), -1;
	if (f.length && f.te)
		return early_error(r, 400, "bad_request",
				   "both Content-Length and Transfer-Encoding (send one of them)"), -1;
	if (f.te && strcasecmp(f.te_value ? f.te_value : "", "chunked") != 0)
		return early_error(r, 400, "bad_request",
				   "Transfer-Encoding \"%.24s\" is not supported (only chunked)",
				   f.te_value ? f.te_value : ""), -1;
	if (!version || strcmp(version, MHD_HTTP_VERSION_1_1) != 0)
		return early_error(r, 505, "http_version_not_supported",
				   "sandlotd speaks HTTP/1.1 only (streamed answers are chunked, "
				   "so that a cut one cannot pass for a whole one), not %.8s",
				   version ? version : "?"), -1;
	return 0;
}

/* A request to a sandbox's host (e2b.h): checked as the door checks it,
 * then given to the proxy (proxy_host_route) with the sandbox and the port
 * as its params.  MHD, cheap. */
static void host_request(struct req *r, const struct e2b_host *eh, int tcp)
{
	struct http_server *srv = r->srv;
	struct http_req *pub = &r->pub;
	struct MHD_Connection *conn = pub->conn;
	pub->host_routed = 1;
	pub->route = proxy_host_route.pattern;
	if (eh->id[0])
		snprintf(pub->log_sandbox, sizeof(pub->log_sandbox), "%.31s", eh->id);
	const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
	if (tcp && srv->bearer) {
		const char *k = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-API-KEY");
		const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Access-Token");
		const char *t = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							    "E2B-Traffic-Access-Token");
		struct e2b_keys keys = { k, k ? strlen(k) : 0, a, a ? strlen(a) : 0, NULL, 0,
					 pub->uri, strlen(pub->uri), t, t ? strlen(t) : 0 };
		int ok = e2b_host_key_ok(srv->bearer + strlen("Bearer "), auth,
					 auth ? strlen(auth) : 0, &keys, eh->id);
		if (!ok && eh->id[0])
			ok = e2b_sandbox_public(srv->d, eh->id);
		if (!ok) {
			r->close_after = 1;
			early_error(r, 401, "unauthorized",
				    "missing or wrong token for this sandbox's host (send the sandbox's "
				    "trafficAccessToken as E2B-Traffic-Access-Token, or the daemon's "
				    "token)");
			return;
		}
		/* Only the daemon's own bearer token is the API's to drop
		 * (proxy.c): any other Authorization is the application's. */
		pub->token_auth = auth_ok(auth, srv->bearer);
	}
	if (strlen(r->raw_uri) > HTTP_MAX_URI) {
		early_error(r, 414, "uri_too_long", "request URI longer than %u bytes", HTTP_MAX_URI);
		return;
	}
	char where[96];
	if (find_nul(r->raw_uri, where, sizeof(where))) {
		early_error(r, 400, "bad_request",
			    "%s holds a NUL byte (%%00), which no path or value may contain", where);
		return;
	}
	if (eh->bad) {
		early_error(r, 400, "bad_request", "Host \"%.120s\": %s",
			    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host"), eh->bad);
		return;
	}
	if (r->raw_uri[0] != '/') {
		early_error(r, 400, "bad_request",
			    "a request to a sandbox's host must have a path starting with /");
		return;
	}
	char port[8];
	snprintf(port, sizeof(port), "%u", eh->port);
	r->param_buf[0] = strdup(eh->id);
	r->param_buf[1] = strdup(port);
	if (!r->param_buf[0] || !r->param_buf[1]) {
		early_error(r, 500, "internal", "out of memory");
		return;
	}
	pub->params[0] = r->param_buf[0];
	pub->params[1] = r->param_buf[1];
	pub->nparams = 2;
	r->rt = &proxy_host_route;
	if (__atomic_load_n(&srv->d->stopping, __ATOMIC_RELAXED))
		early_error(r, 503, "shutting_down", "sandlotd is shutting down");
}

/* Headers are in: decide what to do with the request (MHD, cheap). */
static void first_call(struct req *r, const char *method, const char *version)
{
	struct http_server *srv = r->srv;
	struct http_req *pub = &r->pub;
	snprintf(r->method, sizeof(r->method), "%s", method);
	pub->method = r->method;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(pub->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	pub->client_fd = ci ? ci->connect_fd : -1;
	ci = MHD_get_connection_info(pub->conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	r->gc = ci ? ci->socket_context : NULL;
	gate_conn_request(srv->gate, r->gc);

	const char *q = strchr(r->raw_uri, '?');
	size_t plen = q ? (size_t)(q - r->raw_uri) : strlen(r->raw_uri);
	r->path = strndup(r->raw_uri, plen);
	pub->path = r->path ? r->path : "";
	pub->uri = r->raw_uri;

	if (check_framing(r, version) < 0)
		return;
	ci = MHD_get_connection_info(pub->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	int tcp = ci && ci->client_addr && ci->client_addr->sa_family != AF_UNIX;
	const char *host = MHD_lookup_connection_value(pub->conn, MHD_HEADER_KIND, "Host");
	struct e2b_host eh;
	if (host && e2b_host_parse(host, strlen(host), srv->sandbox_domain, &eh)) {
		host_request(r, &eh, tcp);
		return;
	}
	int e2b = e2b_path(pub->path, strlen(pub->path));
	if (tcp && srv->bearer &&
	    !auth_ok(MHD_lookup_connection_value(pub->conn, MHD_HEADER_KIND, "Authorization"),
		     srv->bearer) &&
	    !(e2b && e2b_key_header_ok(pub, srv->bearer + strlen("Bearer ")))) {
		r->close_after = 1;
		early_error(r, 401, "unauthorized", "%s",
			    e2b ? "missing or wrong API key (send the daemon's token as X-API-KEY, "
				  "X-Access-Token or \"Authorization: Bearer TOKEN\")"
				: "missing or wrong bearer token (send \"Authorization: Bearer TOKEN\")");
		if (r->pending)
			MHD_add_response_header(r->pending, "WWW-Authenticate", "Bearer");
		return;
	}
	pub->token_auth = tcp && srv->bearer;
	if (strlen(r->raw_uri) > HTTP_MAX_URI) {
		early_error(r, 414, "uri_too_long", "request URI longer than %u bytes", HTTP_MAX_URI);
		return;
	}
	char where[96];
	if (find_nul(r->raw_uri, where, sizeof(where))) {
		early_error(r, 400, "bad_request",
			    "%s holds a NUL byte (%%00), which no path or value may contain", where);
		return;
	}

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
		if (strcmp(rt->method, pub->method) == 0 || strcmp(rt->method, "*") == 0) {
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
				    pub->method, pub->path, allow);
			if (r->pending)
				MHD_add_response_header(r->pending, "Allow", allow);
		} else {
			early_error(r, 404, "unknown_route", "no route %s %s", pub->method, pub->path);
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

	if (__atomic_load_n(&srv->d->stopping, __ATOMIC_RELAXED)) {
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
}

/* An answer decided before the body: send it now if there is no body to
 * drain (or too much, or the client waits for "100 Continue", or is not
 * authenticated: then the connection closes after it), else after the body
 * was read and dropped.
 * MHD, in the access handler. */
static void answer_early(struct req *r)
{
	uint64_t len = 0;
	int has_len = declared_length(r, &len);
	const char *te = MHD_lookup_connection_value(r->pub.conn, MHD_HEADER_KIND,
						     "Transfer-Encoding");
	const char *expect = MHD_lookup_connection_value(r->pub.conn, MHD_HEADER_KIND, "Expect");
	/* A client waiting for "100 Continue" sends no body: answer instead
	 * of asking for it (the connection then closes). */
	int waits = expect && strcasecmp(expect, "100-continue") == 0;
	if (r->close_after || waits || (has_len && len > DISCARD_MAX) || (!has_len && !te) ||
	    (has_len && len == 0)) {
		r->stage = S_FINAL;
		queue_pending(r);
	}
}

/* MHD: a piece of the body. */
static enum MHD_Result body_piece(struct req *r, const char *data, size_t *size)
{
	struct http_req *pub = &r->pub;
	size_t len = *size;
	if (!r->rt || (r->rt->body != HTTP_RAW && pub->answered)) {
		/* answered early (no route, a 413, ...): drop the body */
		r->discarded += len;
		*size = 0;
		return r->discarded > DISCARD_MAX ? MHD_NO : MHD_YES;
	}
	switch (r->rt->body) {
	case HTTP_NOBODY:
		*size = 0;
		return MHD_YES;
	case HTTP_JSON:
		*size = 0;
		if (r->body_len + len > HTTP_MAX_JSON_BODY) {
			early_error(r, 413, "payload_too_large",
				    "request body is larger than the limit of %u bytes",
				    HTTP_MAX_JSON_BODY);
			free(r->body);
			r->body = NULL;
			r->body_len = r->body_cap = 0;
			return MHD_YES;
		}
		if (r->body_len + len > r->body_cap) {
			size_t cap = r->body_cap ? r->body_cap : 4096;
			while (cap < r->body_len + len)
				cap *= 2;
			char *nb = realloc(r->body, cap);
			if (!nb) {
				early_error(r, 500, "internal", "out of memory");
				return MHD_YES;
			}
			r->body = nb;
			r->body_cap = cap;
		}
		memcpy(r->body + r->body_len, data, len);
		r->body_len += len;
		return MHD_YES;
	case HTTP_RAW:
		break;
	}
	pthread_mutex_lock(&r->lock); /* the worker swaps ahead and work under it */
	if ((!r->ahead && !(r->ahead = malloc(RAW_AHEAD))) ||
	    (!r->work && !(r->work = malloc(RAW_AHEAD)))) {
		pthread_mutex_unlock(&r->lock);
		return MHD_NO;
	}
	if (r->raw_stopped) {
		/* begin() or chunk() answered: drop the rest */
		pthread_mutex_unlock(&r->lock);
		r->discarded += len;
		*size = 0;
		return r->discarded > DISCARD_MAX ? MHD_NO : MHD_YES;
	}
	if (r->busy) {
		/* chunk() works: read ahead while there is room, then wait */
		size_t n = RAW_AHEAD - r->ahead_len < len ? RAW_AHEAD - r->ahead_len : len;
		memcpy(r->ahead + r->ahead_len, data, n);
		r->ahead_len += n;
		*size = len - n;
		if (*size > 0)
			suspend_locked(r);
		pthread_mutex_unlock(&r->lock);
		return MHD_YES;
	}
	size_t n = len < RAW_AHEAD ? len : RAW_AHEAD;
	memcpy(r->work, data, n);
	r->work_len = n;
	*size = len - n;
	r->busy = 1;
	if (*size > 0)
		suspend_locked(r); /* the job resumes it for the rest */
	pthread_mutex_unlock(&r->lock);
	workq_submit_to(r->long_wait ? WORKQ_LONG : WORKQ_SHORT, &r->job, raw_chunk_job);
	return MHD_YES;
}

/* MHD: the body is complete (or there was none). */
static void final_call(struct req *r)
{
	struct http_req *pub = &r->pub;
	r->stage = S_FINAL;
	pthread_mutex_lock(&r->lock);
	int busy = r->busy; /* (when 0, every write of the last job is seen) */
	pthread_mutex_unlock(&r->lock);
	if ((!busy && pub->answered) || !r->rt) {
		queue_pending(r);
		return;
	}
	switch (r->rt->body) {
	case HTTP_JSON:
		if (r->body_len > 0) {
			json_error_t jerr;
			pub->json = json_loadb(r->body, r->body_len, JSON_REJECT_DUPLICATES, &jerr);
			if (!pub->json) {
				if (strstr(jerr.text, "\\u0000"))
					http_error(pub, 400, "invalid_json",
						   "invalid JSON at line %d, column %d: a string holds a NUL "
						   "character (\\u0000), which no path, command or value "
						   "may contain", jerr.line, jerr.column);
				else
					http_error(pub, 400, "invalid_json",
						   "invalid JSON at line %d, column %d: %s", jerr.line,
						   jerr.column, jerr.text);
				queue_pending(r);
				return;
			}
		}
		/* fall through */
	case HTTP_NOBODY:
		pthread_mutex_lock(&r->lock);
		r->busy = 1;
		suspend_locked(r);
		pthread_mutex_unlock(&r->lock);
		workq_submit(&r->job, handler_job);
		return;
	case HTTP_RAW:
		pthread_mutex_lock(&r->lock);
		r->want_end = 1;
		suspend_locked(r);
		int start = !r->busy;
		r->busy = 1;
		pthread_mutex_unlock(&r->lock);
		if (start)
			workq_submit_to(r->long_wait ? WORKQ_LONG : WORKQ_SHORT, &r->job,
					raw_chunk_job);
		return;
	}
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version, const char *upload_data,
				 size_t *upload_data_size, void **con_cls)
{
	struct http_server *srv = cls;
	struct req *r = *con_cls;
	if (!r)
		return MHD_NO; /* out of memory in uri_log */
	switch (r->stage) {
	case S_NEW:
		pthread_mutex_lock(&srv->lock);
		srv->active++;
		pthread_mutex_unlock(&srv->lock);
		r->counted = 1;
		first_call(r, method, version);
		if (r->pub.answered) {
			r->stage = S_BODY;
			answer_early(r);
			return MHD_YES;
		}
		if (r->rt->body == HTTP_RAW) {
			r->stage = S_BEGIN;
			pthread_mutex_lock(&r->lock);
			r->busy = 1;
			suspend_locked(r);
			pthread_mutex_unlock(&r->lock);
			workq_submit(&r->job, raw_begin_job);
			return MHD_YES;
		}
		r->stage = S_BODY;
		return MHD_YES;
	case S_BEGIN:
		/* begin() ran; this is the head's call again */
		r->stage = S_BODY;
		if (r->pub.answered)
			answer_early(r);
		return MHD_YES;
	case S_BODY:
		if (*upload_data_size > 0)
			return body_piece(r, upload_data, upload_data_size);
		final_call(r);
		return MHD_YES;
	case S_FINAL:
		/* the job answered (or its stream starts) */
		queue_pending(r);
		return MHD_YES;
	}
	return MHD_YES;
}

static void free_req(struct req *r)
{
	struct http_req *pub = &r->pub;
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
	free(r->ahead);
	free(r->work);
	free(r->raw_uri);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

static void log_request(struct req *r)
{
	struct http_server *srv = r->srv;
	struct http_req *pub = &r->pub;
	struct daemon *d = srv->d;
	__atomic_add_fetch(&d->m.requests, 1, __ATOMIC_RELAXED);
	if (pub->status >= 500 || !pub->answered)
		__atomic_add_fetch(&d->m.request_errors, 1, __ATOMIC_RELAXED);
	double ms = (double)(sandlot__now_ns() - pub->start_ns) / 1e6;
	const char *sid = pub->log_sandbox[0] ? pub->log_sandbox
		: pub->nparams > 0 && strncmp(pub->params[0], "sb-", 3) == 0 &&
		  strlen(pub->params[0]) < 40 ? pub->params[0] : NULL;
	/* The raw path is percent-encoded: no spaces or quotes in it unless
	 * a client sent them raw; quote it to be safe. */
	char path[256];
	size_t o = 0;
	for (const char *p = pub->path ? pub->path : ""; *p && o < sizeof(path) - 4; p++)
		path[o++] = (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) ? '?' : *p;
	path[o] = '\0';
	daemon_log("request", "method=%s path=\"%s\" status=%d ms=%.1f%s%s%s",
		   pub->method ? pub->method : "-", path, pub->answered ? pub->status : 0, ms,
		   sid ? " sandbox=" : "", sid ? sid : "",
		   r->toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " aborted=1");
}

static void finish_job(struct workq_job *j)
{
	struct req *r = job_req(j);
	r->rt->abort(&r->pub);
	finish_request(r);
}

/* The request is over (completed(), or the job that owned it then):
 * abort() a body that never completed (it may block: on a worker), log,
 * count, free. */
static void finish_request(struct req *r)
{
	struct http_server *srv = r->srv;
	if (r->raw_begun && !r->raw_ended && !r->raw_stopped && r->rt->abort) {
		r->raw_stopped = 1;
		workq_submit(&r->job, finish_job);
		return;
	}
	if (r->counted) {
		log_request(r);
		pthread_mutex_lock(&srv->lock);
		if (--srv->active == 0)
			pthread_cond_broadcast(&srv->idle);
		pthread_mutex_unlock(&srv->lock);
	}
	free_req(r);
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_server *srv = cls;
	struct req *r = *con_cls;
	*con_cls = NULL;
	if (!r)
		return;
	if (r->gc && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
		gate_conn_done(srv->gate, r->gc);
	r->toe = toe;
	if (r->upgrade && r->upgrade->ran) {
		/* Upgraded: no job holds r (the last one released it before the
		 * 101 was queued), and libmicrohttpd calls this holding its
		 * cleanup mutex, which suspend_locked() takes under r->lock: so
		 * not r->lock here (a lock-order inversion for ThreadSanitizer,
		 * though both orders only ever run on the connection's own
		 * libmicrohttpd thread). */
		finish_request(r);
		return;
	}
	pthread_mutex_lock(&r->lock);
	if (r->busy) {
		/* A client gone mid-body while chunk() works: its job finishes. */
		r->orphaned = 1;
		pthread_mutex_unlock(&r->lock);
		return;
	}
	pthread_mutex_unlock(&r->lock);
	finish_request(r);
}

static void notify_conn(void *cls, struct MHD_Connection *conn, void **socket_context,
			enum MHD_ConnectionNotificationCode toe)
{
	struct http_server *srv = cls;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		*socket_context = ci ? gate_conn_started(srv->gate, ci->connect_fd) : NULL;
	} else {
		gate_conn_closed(srv->gate, *socket_context);
		*socket_context = NULL;
	}
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	/* Connections handed over by the door are of unknown kind to the
	 * library, which tries TCP options on unix sockets too. */
	if ((strncmp(msg, "Setting TCP_", 12) == 0 && strstr(msg, "not supported")) ||
	    strncmp(msg, "Failed to push the data from buffers", 36) == 0)
		return;
	for (char *p = msg; *p; p++)
		if (*p == '"' || (unsigned char)*p < 0x20)
			*p = '\'';
	daemon_log("http_library", "level=warn msg=\"%s\"", msg);
}

/* ---- the server ---------------------------------------------------------------------- */

/* The door's question (gate.h): whether sandbox id takes public traffic. */
static int door_sandbox_public(void *ud, const char *id)
{
	return e2b_sandbox_public(ud, id);
}

struct http_server *http_start(struct daemon *d, const struct http_config *cfg,
			       const struct http_route *routes, sandlot_error_t **err)
{
	struct http_server *srv = calloc(1, sizeof(*srv));
	if (!srv)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	srv->d = d;
	srv->routes = routes;
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->idle, NULL);
	if (cfg->token && asprintf(&srv->bearer, "Bearer %s", cfg->token) < 0) {
		srv->bearer = NULL;
		sandlot__error(err, ENOMEM, "out of memory");
		goto fail;
	}
	struct gate_config gc = {
		.max_connections = cfg->max_connections,
		.max_per_peer = cfg->max_per_peer,
		.header_timeout_s = cfg->header_timeout_s,
		.keepalive_s = KEEPALIVE_S,
		.max_head = MAX_HEAD,
		.max_target = HTTP_MAX_URI,
		.token = cfg->token,
		.sandbox_domain = cfg->sandbox_domain,
		.sandbox_public = door_sandbox_public,
		.public_ud = d,
	};
	srv->sandbox_domain = cfg->sandbox_domain;
	srv->gate = gate_new(&gc, err);
	if (!srv->gate)
		goto fail;
	for (int i = 0; i < cfg->nlisten; i++)
		if (gate_listen(srv->gate, cfg->listens[i], err) < 0)
			goto fail;
	if (workq_start() < 0) {
		sandlot__error_errno(err, errno, "start the worker threads");
		goto fail;
	}
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned threads = cpus < 2 ? 2 : cpus > MHD_THREADS_MAX ? MHD_THREADS_MAX : (unsigned)cpus;
	/* MHD_ALLOW_UPGRADE: WebSockets through the port proxy (proxy.c). */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
			 MHD_ALLOW_SUSPEND_RESUME | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG |
			 MHD_ALLOW_UPGRADE;
	srv->mhd = MHD_start_daemon(
		flags, 0, NULL, NULL, access_cb, srv,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, srv,
		MHD_OPTION_URI_LOG_CALLBACK, uri_log, srv,
		MHD_OPTION_NOTIFY_COMPLETED, completed_cb, srv,
		MHD_OPTION_NOTIFY_CONNECTION, notify_conn, srv,
		MHD_OPTION_THREAD_POOL_SIZE, threads,
		/* The door enforces the limit; libmicrohttpd must never refuse
		 * what it let in (a refusal there would not be counted). */
		MHD_OPTION_CONNECTION_LIMIT, 2 * cfg->max_connections + 64,
		MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_IDLE_TIMEOUT_S,
		MHD_OPTION_SIGPIPE_HANDLED_BY_APP, 1,
		MHD_OPTION_END);
	if (!srv->mhd) {
		sandlot__error(err, EIO, "start the HTTP server");
		goto fail;
	}
	if (gate_start(srv->gate, srv->mhd, err) < 0)
		goto fail;
	d->http = srv;
	return srv;
fail:
	if (srv->mhd)
		MHD_stop_daemon(srv->mhd);
	gate_quiesce(srv->gate);
	gate_free(srv->gate);
	free(srv->bearer);
	free(srv);
	return NULL;
}

void http_quiesce(struct http_server *s)
{
	if (s)
		gate_quiesce(s->gate);
}

void http_stop(struct http_server *s, unsigned timeout_ms)
{
	if (!s)
		return;
	http_quiesce(s);
	uint64_t deadline = sandlot__now_ms() + timeout_ms;
	pthread_mutex_lock(&s->lock);
	while (s->active > 0) {
		uint64_t now = sandlot__now_ms();
		if (now >= deadline)
			break;
		uint64_t left = deadline - now;
		struct timespec ts;
		sandlot__deadline_in(&ts, CLOCK_REALTIME, left);
		pthread_cond_timedwait(&s->idle, &s->lock, &ts);
	}
	pthread_mutex_unlock(&s->lock);
	/* Parked requests and streams are woken (PARK_STOP) and answer; then
	 * the jobs are waited for. */
	workq_stop(2000);
	pthread_mutex_lock(&s->lock);
	int stuck = s->active;
	pthread_mutex_unlock(&s->lock);
	if (stuck) {
		/* Jobs still hold suspended connections: libmicrohttpd cannot be
		 * stopped under them.  The process exits right after. */
		daemon_log("http_stop", "level=warn msg=\"%d requests still running\"", stuck);
		return;
	}
	/* Closes the remaining (idle) connections and joins the threads. */
	MHD_stop_daemon(s->mhd);
	s->d->http = NULL;
	gate_free(s->gate);
	free(s->bearer);
	free(s);
}

char *http_metrics(struct http_server *s)
{
	char *door = gate_metrics(s->gate);
	unsigned threads, busy, queued;
	workq_counts(&threads, &busy, &queued);
	char *out = NULL;
	if (asprintf(&out, "%s"
		     "# HELP sandlot_http_workers Threads running request handlers, and how many "
		     "of them are busy.\n# TYPE sandlot_http_workers gauge\n"
		     "sandlot_http_workers{state=\"all\"} %u\nsandlot_http_workers{state=\"busy\"} %u\n"
		     "# HELP sandlot_http_jobs_queued Handler jobs waiting for a worker.\n"
		     "# TYPE sandlot_http_jobs_queued gauge\nsandlot_http_jobs_queued %u\n"
		     "# HELP sandlot_http_parked Requests and streams waiting (for a command, "
		     "output, a timeout) without a thread.\n# TYPE sandlot_http_parked gauge\n"
		     "sandlot_http_parked %u\n",
		     door ? door : "", threads, busy, queued, park_count()) < 0)
		out = NULL;
	free(door);
	return out;
}
