/* sandlotd's front door: the listening sockets, and every connection until
 * its first request head is complete and checked.
 *
 * Why a door in front of libmicrohttpd.  A connection that has not sent a
 * complete request head is untrusted and must be cheap: here it is a file
 * descriptor in one epoll set and ~200 bytes, no thread and no
 * libmicrohttpd state, and its head is only looked at (MSG_PEEK), never
 * copied into a buffer of its own.  It gets an absolute deadline
 * (--header-timeout from the accept: a client that trickles bytes cannot
 * extend it), and the head is checked (httphead.h: framing headers, NUL
 * bytes, sizes) and, on TCP, the bearer token compared before the
 * connection is handed to libmicrohttpd (MHD_add_connection), which then
 * reads the same bytes and serves the request.  Errors found here are
 * answered here (JSON, "Connection: close"), and the connection closed
 * after a short lingering read so that the client sees the answer.
 *
 * Limits, counted over every connection of the daemon (waiting here or
 * served by libmicrohttpd): at most max_connections in all and
 * max_per_peer per client address (an IPv4 address, an IPv6 /64; unix
 * socket clients are not limited per peer).  A connection over a limit
 * first evicts the oldest one that is waiting here for its head (of the
 * same peer for the per-peer limit), then the oldest idle kept-alive one;
 * only if neither exists is the new connection closed.  So hostile
 * connections can never lock out a client that sends a whole request: the
 * hostile ones are the oldest waiting.
 *
 * After the first request, libmicrohttpd reads the following ones of a
 * kept-alive connection itself; http.c reports each request's start and
 * end (gate_conn_request(), gate_conn_done()) so that an idle kept-alive
 * connection gets an absolute deadline too (keepalive_s from the end of the
 * last answer until the next head is complete) and can be evicted.
 *
 * Threads: one, the door's own.  The gate_conn_* calls come from
 * libmicrohttpd's threads; one mutex guards the connection table.
 */
#ifndef SANDLOT_DAEMON_GATE_H
#define SANDLOT_DAEMON_GATE_H

#include <stddef.h>

#include "sandlot.h"

struct MHD_Daemon;
struct daemon;
struct gate;
struct gate_conn;

struct gate_config {
	unsigned max_connections;   /* in all */
	unsigned max_per_peer;      /* per client address (TCP) */
	unsigned header_timeout_s;  /* accept → complete request head */
	unsigned keepalive_s;       /* end of an answer → next complete head */
	size_t max_head;            /* request line + headers */
	size_t max_target;          /* request URI */
	const char *token;          /* bearer token for TCP listeners, NULL: none */
	/* Sandbox hosts (e2b.h): a request whose Host is PORT-ID.domain is let
	 * in by the token in any of E2B's headers or by sandbox ID's access
	 * token, or with none when sandbox_public(public_ud, ID) says so.
	 * domain NULL: no sandbox hosts. */
	const char *sandbox_domain;
	int (*sandbox_public)(void *ud, const char *id);
	void *public_ud;
};

/* A door with no listener yet.  NULL with err on failure. */
struct gate *gate_new(const struct gate_config *cfg, sandlot_error_t **err);
/* Listen on "unix:PATH" (mode 0660, a stale socket replaced, a live one
 * refused) or "tcp:HOST:PORT".  0, or -1 with err. */
int gate_listen(struct gate *g, const char *addr, sandlot_error_t **err);
/* Start serving: connections are handed to mhd. */
int gate_start(struct gate *g, struct MHD_Daemon *mhd, sandlot_error_t **err);
/* Stop accepting: listeners closed (our unix socket file removed) and the
 * connections still waiting for a head closed.  Connections libmicrohttpd
 * serves are left alone.  Idempotent. */
void gate_quiesce(struct gate *g);
/* After MHD_stop_daemon(): stop the thread, free everything. */
void gate_free(struct gate *g);

/* libmicrohttpd's side (its threads).  started: the connection on fd was
 * taken over (returns the record to keep as its socket context, or NULL if
 * the door does not know it); closed: it is gone (before its fd is
 * closed); request: a request head was read on it (no deadline while it is
 * served); done: its answer was sent and it is kept alive. */
struct gate_conn *gate_conn_started(struct gate *g, int fd);
void gate_conn_closed(struct gate *g, struct gate_conn *c);
void gate_conn_request(struct gate *g, struct gate_conn *c);
void gate_conn_done(struct gate *g, struct gate_conn *c);

/* The door's Prometheus lines (sandlot_http_connections{state},
 * sandlot_http_connections_dropped_total{reason}): a new string, or NULL
 * without memory. */
char *gate_metrics(struct gate *g);

#endif
