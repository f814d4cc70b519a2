/* The Model Context Protocol server of sandlot, apart from its transports.
 *
 * An MCP session (struct mcp) takes JSON-RPC 2.0 messages and answers them:
 * initialize, ping, tools/list and tools/call of the tools run_command,
 * run_code, read_file, write_file, list_files, generated_files and
 * expose_port (docs/mcp.md).  The tools work in ONE sandbox per session,
 * created by the first tool call that needs it and deleted by mcp_end().
 *
 * Below: the tools reach the sandbox through sandlotd's HTTP API (a
 * `struct client` of src/cli/client.h), whoever serves the session.  Two
 * transports use this module:
 *   - stdio (`sandlot mcp`, src/cli/mcp.c): lines on stdin and stdout, the
 *     API of the daemon at --host;
 *   - Streamable HTTP (sandlotd's /mcp, src/daemon/mcp_http.c): POSTed
 *     messages, answers as JSON or SSE, the API of the same sandlotd over
 *     its own socket.
 *
 * Above: the transport gives the session a `struct mcp_io`.  While a tool
 * call waits for sandlotd, the session calls io.wait() again and again;
 * the transport drives the client's transfers there (client_poll) and
 * watches its own inputs, and may apply what arrives at once with
 * mcp_handle_now() (a ping, a cancellation) or end the session with
 * mcp_stop().  A call with a progressToken sends notifications/progress
 * through io.notify() about once a second while it runs.
 *
 * Threads: one thread at a time handles messages of a session (mcp_handle,
 * mcp_keepalive, mcp_end).  mcp_handle_now() and mcp_stop() may be called
 * from any thread meanwhile; the transport then wakes its io.wait().
 */
#ifndef SANDLOT_MCP_H
#define SANDLOT_MCP_H

#include <jansson.h>
#include <stdint.h>

struct client;
struct mcp;

struct mcp_io {
	/* Wait up to timeout_ms for the transfers of c (client_poll) and the
	 * transport's own events.  Must return early when mcp_stop() or a
	 * cancellation was applied meanwhile. */
	void (*wait)(void *ud, struct client *c, int timeout_ms);
	/* Send a message to the client while a request is handled (a
	 * notifications/progress); steals msg.  May be NULL: none sent. */
	void (*notify)(void *ud, json_t *msg);
	/* One line for the log (no newline). */
	void (*log)(void *ud, const char *line);
	void *ud;
};

struct mcp_options {
	json_t *create_body;        /* POST /v1/sandboxes body (copied) */
	uint64_t timeout_ms;        /* run_command / run_code without timeout_seconds */
	uint64_t keepalive_ms;      /* keepalive period of the sandbox; 0: none */
	const char *server_title;   /* serverInfo.title */
};

/* A new session that talks to sandlotd through c (borrowed: it must
 * outlive the session, and serve no one else meanwhile).  NULL without
 * memory. */
struct mcp *mcp_new(struct client *c, const struct mcp_options *o, const struct mcp_io *io);
/* Free the session (call mcp_end() first, or its sandbox is left to its
 * idle timeout). */
void mcp_free(struct mcp *m);

/* Handle one message or a batch (a JSON array) and return the answer: an
 * object, an array for a batch, or NULL when there is none
 * (notifications, responses, a cancelled call, a stopped session). */
json_t *mcp_handle(struct mcp *m, json_t *msg);
/* The same from text: what is not JSON gets -32700. */
json_t *mcp_handle_text(struct mcp *m, const char *data, size_t len);
/* What can be handled at once, even while a tool call runs: a ping
 * (*answer set) and notifications/cancelled (the call it names stops, and
 * gets no answer).  Returns 1 if msg was one of those, else 0 (*answer
 * NULL): the message waits its turn.  Any thread. */
int mcp_handle_now(struct mcp *m, json_t *msg, json_t **answer);

/* End the session's work now: the call in progress is abandoned (its
 * command killed) and no other starts.  Any thread. */
void mcp_stop(struct mcp *m);
int mcp_stopped(struct mcp *m);

/* Milliseconds until the sandbox's keepalive is due (0: now), or -1 when
 * none is (no sandbox, or no keepalives). */
int mcp_keepalive_due(struct mcp *m);
/* Send the keepalive if it is due.  A sandbox that ended is forgotten. */
void mcp_keepalive(struct mcp *m);
/* Delete the session's sandbox, if any (waits at most ~20 s). */
void mcp_end(struct mcp *m);
/* The id of the session's sandbox, or NULL. */
const char *mcp_sandbox(struct mcp *m);
/* The protocol version initialize settled on, or NULL before it. */
const char *mcp_protocol_version(struct mcp *m);

/* {"jsonrpc": "2.0", "id": id or null, "error": {"code", "message"}} */
json_t *mcp_rpc_error(json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Whether msg (an object) is a request: a method and an id. */
int mcp_is_request(json_t *msg);

#endif
