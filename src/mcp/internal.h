/* Between the files of the MCP module: session.c (the session, JSON-RPC,
 * the sandbox's keepalive and end) and tools.c (the tools, their
 * arguments and results, the sandbox's creation and replacement). */
#ifndef SANDLOT_MCP_INTERNAL_H
#define SANDLOT_MCP_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>

#include "cli/client.h"
#include "mcp/mcp.h"

#define MCP_TIMEOUT_MAX_S 86400
#define MCP_PROGRESS_MS 1000           /* between two progress notifications */

struct mcp {
	struct client *c;              /* sandlotd's API (borrowed) */
	struct mcp_io io;
	json_t *create_body;           /* POST /v1/sandboxes */
	uint64_t timeout_ms;           /* default of run_command / run_code */
	uint64_t keepalive_ms;         /* 0: none */
	char *server_title;

	/* protocol */
	const char *version;           /* negotiated, or NULL */
	int input_errors_as_results;   /* negotiated 2025-11-25 or later */

	/* the sandbox */
	char *sandbox;                 /* id, or NULL before the first call */
	json_int_t baseline;           /* changes cursor when it was created */
	json_int_t gen_cursor;         /* ... at the last generated_files */
	int64_t last_active_ms;
	json_t *contexts;              /* run_code context name -> daemon context id */

	/* the tools/call in progress */
	pthread_mutex_t lock;          /* cur_id, against mcp_handle_now() */
	json_t *cur_id;
	const char *cur_tool;
	json_t *progress_token;        /* its params._meta.progressToken, or NULL */
	int64_t call_start_ms, progress_ms;
	json_int_t progress;
	int cancelled;                 /* atomic */
	int stop;                      /* atomic: mcp_stop() */
	int hold;                      /* http() finishes the request whatever happens */
};

/* A tool call being answered. */
struct call {
	struct mcp *m;
	json_t *args;
	json_t *content;   /* the result's content array */
	int is_error;
	char *note;        /* said first: "the previous sandbox had ended ..." */
};

void mcp__log(struct mcp *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int64_t mcp__now_ms(void);
int mcp__cancelled(struct mcp *m);
void mcp__set_cancelled(struct mcp *m, int v);

/* A request to sandlotd, run while the transport is served (io.wait),
 * stopped by a cancellation or mcp_stop() unless m->hold (req->aborted is
 * then set).  Returns req->status. */
long mcp__http(struct mcp *m, struct client_req *r);
/* Why a request failed, in one line (malloc'd). */
char *mcp__req_error(struct mcp *m, const struct client_req *r);
void mcp__forget_sandbox(struct mcp *m);

json_t *mcp__rpc_result(json_t *id, json_t *result);

/* tools.c */
json_t *mcp__tools_list(struct mcp *m);
json_t *mcp__tools_call(struct mcp *m, json_t *id, json_t *params);
/* The server's instructions, with what the sandbox's network reaches. */
json_t *mcp__instructions(struct mcp *m);

#endif
