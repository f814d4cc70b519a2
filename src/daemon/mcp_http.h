/* MCP over Streamable HTTP at /mcp (mcp_http.c): the MCP server of src/mcp
 * served by sandlotd itself, one session per Mcp-Session-Id.  The tools of
 * a session reach its sandbox through sandlotd's own HTTP API (api_host). */
#ifndef SANDLOT_DAEMON_MCP_HTTP_H
#define SANDLOT_DAEMON_MCP_HTTP_H

#include "daemon/http.h"

#define MCP_ORIGINS_MAX 16

struct mcp_http_config {
	const char *api_host;       /* "unix:PATH" or "tcp:HOST:PORT": this daemon */
	const char *api_token;      /* bearer token for a tcp api_host, or NULL */
	unsigned max_sessions;      /* sessions at once; more get 503 */
	unsigned idle_s;            /* a session without requests for this long ends */
	const char *origins[MCP_ORIGINS_MAX]; /* Origin values allowed besides loopback ones */
	int norigins;
};

/* Serve /mcp from now on (before this, /mcp answers 503).  Copies cfg.
 * Starts the thread that ends idle sessions.  0, or -1 with *err. */
int mcp_http_start(struct daemon *d, const struct mcp_http_config *cfg, sandlot_error_t **err);
/* End every session (deleting its sandbox, through the API: call it while
 * the HTTP server still serves) and stop.  Idempotent. */
void mcp_http_stop(void);

extern const struct http_route mcp_routes[];

#endif
