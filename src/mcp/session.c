/* An MCP session (contract in mcp.h): JSON-RPC 2.0 messages in, answers
 * out; the sandbox's keepalive and end.  The tools are in tools.c.
 *
 * Errors, as the MCP specification sorts them: a message that is not JSON
 * is -32700; not a JSON-RPC request, -32600; an unknown method, -32601;
 * malformed params or an unknown tool, -32602.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cleanup.h"
#include "common/json.h"
#include "mcp/internal.h"

/* Newest first; the first is what we answer a client asking for a version
 * we do not know. */
static const char *const protocol_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26",
						 "2024-11-05" };

void mcp__log(struct mcp *m, const char *fmt, ...)
{
	if (!m->io.log)
		return;
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	if (vasprintf(&s, fmt, ap) >= 0) {
		m->io.log(m->io.ud, s);
		free(s);
	}
	va_end(ap);
}

int64_t mcp__now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int mcp__cancelled(struct mcp *m)
{
	return __atomic_load_n(&m->cancelled, __ATOMIC_SEQ_CST);
}

void mcp__set_cancelled(struct mcp *m, int v)
{
	__atomic_store_n(&m->cancelled, v, __ATOMIC_SEQ_CST);
}

void mcp_stop(struct mcp *m)
{
	__atomic_store_n(&m->stop, 1, __ATOMIC_SEQ_CST);
}

int mcp_stopped(struct mcp *m)
{
	return __atomic_load_n(&m->stop, __ATOMIC_SEQ_CST);
}

/* ---- JSON-RPC helpers ----------------------------------------------------------- */

json_t *mcp__rpc_result(json_t *id, json_t *result)
{
	return json_pack("{s:s,s:O,s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

json_t *mcp_rpc_error(json_t *id, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = NULL;
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	va_end(ap);
	json_t *o = json_pack("{s:s,s:O,s:{s:i,s:o}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
			      "error", "code", code, "message",
			      json_text(msg ? msg : "error", strlen(msg ? msg : "error")));
	free(msg);
	return o;
}

int mcp_is_request(json_t *msg)
{
	return json_is_object(msg) && json_is_string(json_object_get(msg, "method")) &&
	       json_object_get(msg, "id") && !json_is_null(json_object_get(msg, "id"));
}

/* ---- talking to sandlotd ---------------------------------------------------- */

/* Say how the running call gets on, when the client asked (a progress
 * token) and a second has passed since the last word. */
static void progress(struct mcp *m)
{
	if (!m->io.notify)
		return;
	pthread_mutex_lock(&m->lock);
	json_t *msg = NULL;
	int64_t now = mcp__now_ms();
	if (m->progress_token && now - m->progress_ms >= MCP_PROGRESS_MS) {
		m->progress_ms = now;
		m->progress++;
		char text[128];
		snprintf(text, sizeof(text), "%s running for %lld s", m->cur_tool ? m->cur_tool : "call",
			 (long long)((now - m->call_start_ms) / 1000));
		/* No total: how long a command runs is not known. */
		msg = json_pack("{s:s,s:s,s:{s:O,s:I,s:s}}", "jsonrpc", "2.0", "method",
				"notifications/progress", "params", "progressToken", m->progress_token,
				"progress", m->progress, "message", text);
	}
	pthread_mutex_unlock(&m->lock);
	if (msg)
		m->io.notify(m->io.ud, msg);
}

long mcp__http(struct mcp *m, struct client_req *r)
{
	if (client_start(m->c, r) < 0)
		return 0;
	while (!client_done(r)) {
		if ((mcp_stopped(m) || mcp__cancelled(m)) && !m->hold) {
			client_cancel(r);
			break;
		}
		int wait = 1000;
		if (m->progress_token) {
			int64_t due = m->progress_ms + MCP_PROGRESS_MS - mcp__now_ms();
			wait = due < 0 ? 0 : due < wait ? (int)due : wait;
		}
		m->io.wait(m->io.ud, m->c, wait);
		progress(m);
	}
	return r->status;
}

char *mcp__req_error(struct mcp *m, const struct client_req *r)
{
	char *s = NULL;
	const char *msg = r->err_msg ? r->err_msg : "unknown error";
	int rc;
	if (r->transport && r->unreachable)
		rc = asprintf(&s, "cannot reach sandlotd at %s: %s (is it running? start it with: sandlotd)",
			      m->c->host, msg);
	else if (r->transport)
		rc = asprintf(&s, "talking to sandlotd at %s: %s", m->c->host, msg);
	else if (r->status == 401)
		rc = asprintf(&s, "sandlotd at %s refused the token (check SANDLOT_TOKEN, "
			      "SANDLOT_TOKEN_FILE or --token-file)", m->c->host);
	else
		rc = asprintf(&s, "%s", msg);
	return rc < 0 ? NULL : s;
}

static int is_2xx(long status)
{
	return status >= 200 && status < 300;
}

/* ---- the sandbox ------------------------------------------------------------- */

void mcp__forget_sandbox(struct mcp *m)
{
	free(m->sandbox);
	m->sandbox = NULL;
	json_object_clear(m->contexts);
}

const char *mcp_sandbox(struct mcp *m)
{
	return m->sandbox;
}

const char *mcp_protocol_version(struct mcp *m)
{
	return m->version;
}

int mcp_keepalive_due(struct mcp *m)
{
	if (!m->sandbox || !m->keepalive_ms)
		return -1;
	int64_t due = m->last_active_ms + (int64_t)m->keepalive_ms - mcp__now_ms();
	return due < 0 ? 0 : due > 3600000 ? 3600000 : (int)due;
}

/* Reset the sandbox's idle clock when it is due.  A sandbox that has ended
 * is forgotten (the next tool call starts a new one). */
void mcp_keepalive(struct mcp *m)
{
	if (!m->sandbox || !m->keepalive_ms || mcp__now_ms() - m->last_active_ms < (int64_t)m->keepalive_ms)
		return;
	cleanup_free char *path = NULL;
	if (asprintf(&path, "/v1/sandboxes/%s/keepalive", m->sandbox) < 0)
		return;
	struct client_req r = { .method = "POST", .path = path };
	mcp__http(m, &r);
	if (is_2xx(r.status)) {
		m->last_active_ms = mcp__now_ms();
	} else if (r.status == 410 || r.status == 404) {
		mcp__log(m, "sandbox %s has ended: %s", m->sandbox, r.err_msg ? r.err_msg : "gone");
		mcp__forget_sandbox(m);
	} else if (!r.aborted) {
		cleanup_free char *why = mcp__req_error(m, &r);
		mcp__log(m, "keepalive of %s failed: %s", m->sandbox, why ? why : "error");
		/* try again in a while, not at once */
		m->last_active_ms = mcp__now_ms() - (int64_t)m->keepalive_ms / 2;
	}
	client_req_free(&r);
}

/* DELETE the sandbox at the end of the session (at most ~20 s). */
void mcp_end(struct mcp *m)
{
	if (!m->sandbox)
		return;
	cleanup_free char *path = NULL;
	if (asprintf(&path, "/v1/sandboxes/%s", m->sandbox) < 0)
		return;
	struct client_req r = { .method = "DELETE", .path = path };
	int64_t deadline = mcp__now_ms() + 20000;
	if (client_start(m->c, &r) == 0) {
		while (!client_done(&r) && mcp__now_ms() < deadline)
			client_poll(m->c, NULL, 0, 500);
		client_cancel(&r);
	}
	if (is_2xx(r.status) || r.status == 410 || r.status == 404) {
		mcp__log(m, "removed sandbox %s", m->sandbox);
	} else {
		cleanup_free char *why = r.finished && !r.aborted ? mcp__req_error(m, &r)
								 : strdup("no answer within 20 s");
		mcp__log(m, "could not remove sandbox %s: %s (sandlotd removes it after its idle timeout)",
		     m->sandbox, why ? why : "error");
	}
	client_req_free(&r);
	mcp__forget_sandbox(m);
}


/* ---- JSON-RPC ------------------------------------------------------------------ */

static json_t *do_initialize(struct mcp *m, json_t *id, json_t *params)
{
	const char *asked = json_string_value(json_object_get(params, "protocolVersion"));
	if (!asked)
		return mcp_rpc_error(id, -32602, "initialize needs params.protocolVersion (a string)");
	const char *version = protocol_versions[0];
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(protocol_versions); i++)
		if (!strcmp(asked, protocol_versions[i]))
			version = protocol_versions[i];
	m->version = version;
	m->input_errors_as_results = strcmp(version, "2025-11-25") >= 0;
	json_t *info = json_object_get(params, "clientInfo");
	int other = strcmp(asked, version) != 0;
	mcp__log(m, "client %s %s, protocol %s%s%.40s%s",
		 *client_str(info, "name") ? client_str(info, "name") : "?", client_str(info, "version"),
		 version, other ? " (it asked for " : "", other ? asked : "", other ? ")" : "");
	return mcp__rpc_result(id, json_pack("{s:s,s:{s:{s:b}},s:{s:s,s:s,s:s},s:o}", "protocolVersion",
					     version, "capabilities", "tools", "listChanged", 0,
					     "serverInfo", "name", "sandlot", "title", m->server_title,
					     "version", "0.1.0", "instructions", mcp__instructions(m)));
}

/* One message (an element of a batch, or the whole of it): the answer, or
 * NULL for notifications and responses. */
static json_t *handle_message(struct mcp *m, json_t *msg)
{
	if (!json_is_object(msg))
		return mcp_rpc_error(NULL, -32600, "invalid request: a JSON-RPC message is an object");
	json_t *id = json_object_get(msg, "id");
	json_t *method = json_object_get(msg, "method");
	if (id && !json_is_string(id) && !json_is_integer(id))
		return mcp_rpc_error(NULL, -32600, "invalid request: \"id\" must be a string or an integer");
	if (strcmp(client_str(msg, "jsonrpc"), "2.0") != 0)
		return mcp_rpc_error(id, -32600, "invalid request: \"jsonrpc\" must be \"2.0\"");
	if (!method) {
		if (json_object_get(msg, "result") || json_object_get(msg, "error"))
			return NULL;   /* a response; we send no requests */
		return mcp_rpc_error(id, -32600, "invalid request: no \"method\"");
	}
	if (!json_is_string(method))
		return mcp_rpc_error(id, -32600, "invalid request: \"method\" must be a string");
	const char *name = json_string_value(method);
	json_t *params = json_object_get(msg, "params");
	if (!id) {
		/* notifications: initialized, cancelled (of nothing running now),
		 * roots/list_changed, ...: nothing to do */
		return NULL;
	}
	if (params && !json_is_object(params))
		return mcp_rpc_error(id, -32602, "invalid params: \"params\" must be an object");
	if (!strcmp(name, "initialize"))
		return do_initialize(m, id, params);
	if (!strcmp(name, "ping"))
		return mcp__rpc_result(id, json_object());
	if (!strcmp(name, "tools/list"))
		return mcp__rpc_result(id, mcp__tools_list(m));
	if (!strcmp(name, "tools/call"))
		return mcp__tools_call(m, id, params);
	return mcp_rpc_error(id, -32601, "method not found: %.100s", name);
}

json_t *mcp_handle(struct mcp *m, json_t *msg)
{
	if (!json_is_array(msg))
		return mcp_stopped(m) ? NULL : handle_message(m, msg);
	/* A batch (JSON-RPC 2.0; MCP 2025-03-26): answers in one array. */
	if (!json_array_size(msg))
		return mcp_rpc_error(NULL, -32600, "invalid request: an empty batch");
	json_t *answers = json_array(), *el;
	size_t i;
	json_array_foreach(msg, i, el) {
		if (mcp_stopped(m))
			break;
		json_t *a = handle_message(m, el);
		if (a)
			json_array_append_new(answers, a);
	}
	if (json_array_size(answers) && !mcp_stopped(m))
		return answers;
	json_decref(answers);
	return NULL;
}

json_t *mcp_handle_text(struct mcp *m, const char *data, size_t len)
{
	json_error_t je;
	json_t *msg = json_loadb(data, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
	if (!msg)
		return mcp_rpc_error(NULL, -32700, "parse error: %s (line %d, column %d)", je.text, je.line,
				     je.column);
	json_t *answer = mcp_handle(m, msg);
	json_decref(msg);
	return answer;
}

int mcp_handle_now(struct mcp *m, json_t *msg, json_t **answer)
{
	*answer = NULL;
	const char *method = json_is_object(msg) ? client_str(msg, "method") : "";
	json_t *id = json_object_get(msg, "id");
	if (!strcmp(method, "ping") && (json_is_string(id) || json_is_integer(id))) {
		*answer = mcp__rpc_result(id, json_object());
		return 1;
	}
	if (!strcmp(method, "notifications/cancelled") && !id) {
		json_t *rid = json_object_get(json_object_get(msg, "params"), "requestId");
		pthread_mutex_lock(&m->lock);
		if (m->cur_id && rid && json_equal(rid, m->cur_id))
			mcp__set_cancelled(m, 1);
		pthread_mutex_unlock(&m->lock);
		return 1;
	}
	return 0;
}

/* ---- life ---------------------------------------------------------------------- */

struct mcp *mcp_new(struct client *c, const struct mcp_options *o, const struct mcp_io *io)
{
	struct mcp *m = calloc(1, sizeof(*m));
	if (!m)
		return NULL;
	m->c = c;
	m->io = *io;
	m->create_body = json_deep_copy(o->create_body);
	m->timeout_ms = o->timeout_ms;
	m->keepalive_ms = o->keepalive_ms;
	m->server_title = strdup(o->server_title ? o->server_title : "sandlot sandbox");
	m->contexts = json_object();
	pthread_mutex_init(&m->lock, NULL);
	if (!m->create_body || !m->server_title || !m->contexts) {
		mcp_free(m);
		return NULL;
	}
	return m;
}

void mcp_free(struct mcp *m)
{
	if (!m)
		return;
	json_decref(m->create_body);
	json_decref(m->contexts);
	free(m->sandbox);
	free(m->server_title);
	pthread_mutex_destroy(&m->lock);
	free(m);
}
