/* The CLI's HTTP client for sandlotd (libcurl underneath).
 *
 * One `struct client` per CLI invocation talks to one daemon, chosen by
 * --host / SANDLOT_HOST:
 *
 *   unix:PATH             a unix socket (default unix:/run/sandlot/sandlot.sock)
 *   tcp:HOST:PORT         TCP; HOST may be a name, an IPv4 or a [IPv6] address
 *   http://HOST:PORT      the same as tcp:HOST:PORT (https:// for a TLS proxy)
 *   /PATH                 short for unix:/PATH
 *
 * A bearer token (SANDLOT_TOKEN, or the first line of --token-file /
 * SANDLOT_TOKEN_FILE) is sent as `Authorization: Bearer TOKEN` when set.
 *
 * Requests run on a curl multi handle so that several can be in flight at
 * once (a followed exec, its stdin, a kill) and so that a caller can wait on
 * its own file descriptors (a signalfd, stdin) together with the transfers:
 * client_start() + client_poll() + client_done().  client_perform() is the
 * blocking shortcut for one request.  Bodies stream in both directions
 * through callbacks; nothing is held whole in memory except JSON answers
 * (capped at CLIENT_MAX_JSON) and error bodies (capped at 64 KiB).
 *
 * Error reporting: a transport failure (daemon not running, connection
 * lost) and a daemon error answer ({"error": {"code", "message"}}) are kept
 * in the request; client_report() prints the one line the user sees and
 * returns the exit status for it.
 */
#ifndef SANDLOT_CLI_CLIENT_H
#define SANDLOT_CLI_CLIENT_H

#include <curl/curl.h>
#include <jansson.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cli.h"

#define CLIENT_DEFAULT_HOST "unix:/run/sandlot/sandlot.sock"
#define CLIENT_MAX_JSON (64u << 20)   /* largest JSON answer we accept */

/* Receives a 2xx response body as it arrives.  Return 0 to go on, 1 to
 * pause (see client_unpause), -1 to abort the transfer (req->aborted is
 * then set; the sink prints its own message, if any).  Error answers never
 * reach the sink: they are collected for client_report(). */
typedef int (*client_sink_fn)(void *ud, const char *data, size_t len);
/* Produces a streamed request body: bytes placed in buf (> 0), 0 at the
 * end, -1 to abort (after printing why). */
typedef ssize_t (*client_source_fn)(void *ud, char *buf, size_t max);

struct client {
	const char *verb;      /* for messages: "sandlot VERB: ..." */
	char *host;            /* as the user gave it, for messages */
	char *unix_path;       /* NULL for TCP */
	char *base_url;        /* "http://localhost", "http://HOST:PORT" */
	char *auth;            /* "Authorization: Bearer ..." or NULL */
	CURLM *multi;
	unsigned active;       /* requests started and not finished */
};

struct client_req {
	/* --- the request, filled by the caller ------------------------------ */
	const char *method;            /* "GET", "POST", "PUT", "DELETE" */
	const char *path;              /* escaped path and query: "/v1/sandboxes?state=all" */
	json_t *json;                  /* JSON body (borrowed), or */
	const char *body;              /* a raw body in memory (borrowed), or */
	size_t body_len;
	client_source_fn source;       /* a raw body streamed from source */
	void *source_ud;
	int64_t source_len;            /* Content-Length, or -1 (chunked) */
	const char *content_type;      /* for raw bodies (default octet-stream) */
	const char *accept;            /* Accept header, or NULL */
	client_sink_fn sink;           /* where a 2xx body goes; NULL: parsed as JSON */
	void *sink_ud;

	/* --- the outcome, after client_done() -------------------------------- */
	long status;                   /* HTTP status; 0 if no answer came */
	json_t *reply;                 /* 2xx JSON answer (no sink), owned here */
	char *err_code;                /* daemon error code ("not_found") */
	char *err_msg;                 /* daemon error message, or transport error */
	int transport;                 /* 1: no usable answer (err_msg says why) */
	int unreachable;               /* 1: could not connect at all */
	int aborted;                   /* 1: a sink or source returned -1 */

	/* --- private ------------------------------------------------------- */
	CURL *h;
	struct curl_slist *headers;
	char *json_text;
	char *buf;                     /* collected JSON / error body */
	size_t len, cap;
	size_t body_off;
	int finished;
	int sink_started;
	struct client *c;
	char curl_err[CURL_ERROR_SIZE];
};

/* Set up a client for `verb` (used in messages).  host and token_file may
 * be NULL (then SANDLOT_HOST / SANDLOT_TOKEN / SANDLOT_TOKEN_FILE and the
 * defaults apply).  Returns 0, or an exit status after printing why (2 for
 * a malformed host, 125 for an unreadable token file). */
int client_init(struct client *c, const char *verb, const char *host, const char *token_file);
/* The same without the CLI's defaults, environment or messages (sandlotd
 * uses it to reach its own API): host as for --host, token the bearer
 * token or NULL.  Returns 0, or -1 with errno EINVAL (a malformed host),
 * EBADMSG (a line break in the token), ENOTSUP (libcurl failed to set up)
 * or ENOMEM.  Safe to call from several threads. */
int client_open(struct client *c, const char *verb, const char *host, const char *token);
/* Cancels requests still running (closing their connections). */
void client_free(struct client *c);

/* Start a request; it runs while client_poll() is called.  Returns 0, or
 * -1 with req->transport set (and err_msg) if it could not even start. */
int client_start(struct client *c, struct client_req *req);
/* Drive the transfers for at most timeout_ms (-1: until something
 * happens), also waking up when one of `fds` (may be NULL/0) is ready; their
 * revents are filled in.  Returns the number of fds with events, 0 if none,
 * -1 on a poll failure. */
int client_poll(struct client *c, struct pollfd *fds, unsigned nfds, int timeout_ms);
/* Whether req has finished (the outcome fields are then set). */
int client_done(struct client_req *req);
/* Stop a running request now and close its connection (for a stream that
 * the daemon must notice ending).  Safe on a finished or unstarted one. */
void client_cancel(struct client_req *req);
/* start + poll until done.  Returns req->status (0 on transport failure). */
long client_perform(struct client *c, struct client_req *req);
/* Free what the request holds (reply, messages, the curl handle). */
void client_req_free(struct client_req *req);

/* Flow control: a sink that cannot take more right now returns 1 instead
 * of 0; curl then holds that data back and delivers it again after
 * client_unpause(). */
void client_unpause(struct client_req *req);

/* Whether req got a 2xx answer whose body broke off before its end (the
 * daemon cut the stream, or the connection died): what the sink received
 * is a part only. */
int client_cut(const struct client_req *req);

/* Print the failure of req as the user should see it and return the exit
 * status: 125 for a transport failure ("sandlot: cannot reach sandlotd at
 * unix:/run/sandlot/sandlot.sock: No such file or directory (is it running?
 * start it with: sandlotd)"), 1 for a daemon error ("sandlot VERB:
 * message").  `what` (may be NULL) prefixes the daemon's message:
 * "sandlot rm: sb-...: no such sandbox". */
int client_report(struct client *c, const struct client_req *req, const char *what);

/* URL-escape s for a path segment or a query value (malloc'd; NULL on
 * allocation failure). */
char *client_escape(const char *s);

/* Helpers for the verbs. */
/* JSON value as a string ("" for NULL / non-strings). */
const char *client_str(json_t *o, const char *key);
/* Write all of buf to fd; 0 or -1 (errno). */
int client_write_all(int fd, const void *buf, size_t len);


/* SIGINT, SIGTERM and SIGHUP blocked and delivered through the returned
 * non-blocking signalfd (-1 with errno on failure), SIGPIPE ignored: for
 * verbs that end a transfer cleanly on a signal. */
int client_signalfd(void);
/* The number of the signal waiting on a client_signalfd(), or 0. */
int client_take_signal(int sigfd);

#endif
