/* The in-sandbox half of sandlotd's E2B-compatible API (docs/e2b.md):
 * what E2B's SDKs send to envd (port 49983) and to the code interpreter
 * (port 49999) of a sandbox, answered by sandlotd itself over libsandlot.
 *
 *   e2b_envd.c          routes, the sandbox of a call, Connect calls,
 *                       filesystem.Filesystem and envd's /files, /health
 *   e2b_envd_process.c  process.Process: commands as sandlot execs
 *   e2b_interp.c        the code interpreter's /execute and /contexts
 *   e2b_connect.c       Connect's wire format (e2b_connect.h)
 *
 * The SDKs reach these with sandboxUrl set (E2B_SANDBOX_URL, the /e2b
 * prefix of sandlotd's TCP listener): every call carries the headers
 * E2b-Sandbox-Id and E2b-Sandbox-Port.  The paths of envd and the
 * interpreter do not overlap, so the route table dispatches on the path;
 * a handler then checks that the port is the one its service listens on.
 */
#ifndef SANDLOT_DAEMON_E2B_ENVD_H
#define SANDLOT_DAEMON_E2B_ENVD_H

#include <jansson.h>

#include "daemon/daemon.h"
#include "daemon/e2b_connect.h"

#define E2B_ENVD_PORT 49983
#define E2B_INTERP_PORT 49999
/* The home of E2B's default user, and where relative paths start. */
#define E2B_HOME "/home/user"

/* sandlotd's routes for both services (terminated by a zero entry). */
extern const struct http_route e2b_envd_routes[];

/* ---- shared by the e2b_envd*.c modules ----------------------------------- */

/* How an error is answered: a Connect unary call, a Connect server stream
 * (200 and an end-of-stream envelope) or plain JSON {"code": status,
 * "message"} (envd's HTTP routes, the interpreter). */
enum e2b_style { E2B_UNARY, E2B_STREAM, E2B_PLAIN };

/* Answer an error in the given style; code is a Connect code (for
 * E2B_PLAIN the HTTP status is taken from it).  Returns 0. */
int e2b_answer_error(struct http_req *req, enum e2b_style style, const char *code,
		     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The same from a sandlot error (freed), its message prefixed with what
 * (may be NULL). */
int e2b_answer_sandlot(struct http_req *req, enum e2b_style style, sandlot_error_t *err,
		       const char *what);
/* Answer 200 with a whole binary body (e.g. envelopes); buf is taken. */
int e2b_answer_bytes(struct http_req *req, const char *content_type, char *buf, size_t len);
/* The same as a sized (not chunked) answer, with one more header (header
 * NULL: none). */
int e2b_answer_bytes_with(struct http_req *req, const char *content_type, char *buf, size_t len,
			  const char *header, const char *value);

/* The sandbox named by E2b-Sandbox-Id when the call is for `port`: a
 * dsb_get() reference (release with dsb_put()) and its live handle in *sb;
 * else the request is answered (502 as E2B's proxy does for a sandbox it
 * does not know, or not running) and NULL returned. */
struct dsb *e2b_sandbox(struct http_req *req, enum e2b_style style, unsigned port,
			sandlot_t **sb);

/* A path of a call made absolute (relative ones under E2B_HOME) and
 * cleaned of "." and ".." segments and repeated slashes: a new string, or
 * NULL (out of memory). */
char *e2b_abs_path(const char *path);

/* Record what a call changed in the sandbox's changes log (source "api"). */
void e2b_scan_changes(struct daemon *d, struct dsb *s);

/* A Connect call, once its request message is read. */
struct e2b_call {
	int stream;               /* a server-streaming call */
	json_t *msg;              /* the request message */
	const char *method;       /* "Start", "Stat", ... */
	int keepalive_ms;         /* from Keepalive-Ping-Interval, 0: none */
	int64_t timeout_ms;       /* from Connect-Timeout-Ms, 0: none */
};

/* e2b_envd_process.c: process.Process.  Answers the call; 0. */
int e2b_process_call(struct http_req *req, struct e2b_call *c);
/* e2b_envd_watch.c: filesystem.Filesystem's watch methods; 0, or 1 when
 * the method is not one of them (nothing answered). */
int e2b_watch_call(struct http_req *req, struct e2b_call *c);

/* e2b_interp.c: the code interpreter's routes. */
extern const struct http_route e2b_interp_routes[];

#endif
