/* Checks of the HTTP headers of MCP requests (Streamable HTTP), libc only:
 * they read bytes a client sent, so tests/fuzz/fuzz_mcp_headers.c fuzzes
 * them. */
#ifndef SANDLOT_MCP_HEADERS_H
#define SANDLOT_MCP_HEADERS_H

/* Whether an Accept header value (NULL: none sent) takes the media type
 * `type` ("text/event-stream"): listed (parameters such as ;q= ignored,
 * case-insensitive) or the wildcard "*" "/" "*" listed, or no header at
 * all. */
int mcp_accepts(const char *accept, const char *type);

/* Whether an Origin header value is a loopback origin: http or https,
 * host localhost, 127.0.0.1 or [::1], an optional numeric port, nothing
 * else ("http://localhost.evil.example" is not). */
int mcp_origin_loopback(const char *origin);

#endif
