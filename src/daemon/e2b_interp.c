/* The code interpreter of E2B's code-interpreter template (e2b_envd.h),
 * on sandlotd's code contexts (code.c, spec/interpreter.md):
 *
 *   POST   /execute                 {"code", "language"?, "context_id"?,
 *                                   "env_vars"?}: an NDJSON stream of
 *                                   E2B's messages
 *   POST   /contexts                {"language"?, "cwd"?}: a new context
 *   GET    /contexts                the contexts
 *   DELETE /contexts/{id}           remove one
 *   POST   /contexts/{id}/restart   a fresh interpreter for it
 *
 * A cell's events become E2B's messages: stdout and stderr as
 * {"type": "stdout"|"stderr", "text", "timestamp"}, each display (a
 * matplotlib figure, display()) as a result that is not the main one, the
 * cell's value as the main result, its error as {"type": "error", "name",
 * "value", "traceback"}, then {"type": "number_of_executions"} and
 * {"type": "end_of_execution"}.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/e2b_envd.h"

/* The language of a request ("js" is E2B's short name for JavaScript);
 * NULL for one sandlot has no interpreter for. */
static const char *language(const char *l)
{
	if (!l || !strcmp(l, "python") || !strcmp(l, "py"))
		return "python";
	if (!strcmp(l, "js") || !strcmp(l, "javascript"))
		return "javascript";
	if (!strcmp(l, "bash"))
		return "bash";
	return NULL;
}

/* E2B's short names of the MIME types of a result. */
static const struct {
	const char *mime, *key;
} mimes[] = {
	{ "text/plain", "text" },       { "text/html", "html" },
	{ "text/markdown", "markdown" }, { "image/svg+xml", "svg" },
	{ "image/png", "png" },         { "image/jpeg", "jpeg" },
	{ "application/pdf", "pdf" },   { "text/latex", "latex" },
	{ "application/json", "json" }, { "application/javascript", "javascript" },
};

static json_t *result_msg(json_t *bundle, int main_result)
{
	json_t *r = json_pack("{s:s, s:b}", "type", "result", "is_main_result", main_result);
	const char *mime;
	json_t *v;
	json_object_foreach(bundle, mime, v)
	{
		const char *key = mime;
		for (size_t i = 0; i < sizeof(mimes) / sizeof(mimes[0]); i++)
			if (strcmp(mimes[i].mime, mime) == 0)
				key = mimes[i].key;
		json_object_set(r, key, v);
	}
	return r;
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec * 1e6 + (double)(ts.tv_nsec / 1000);
}

/* E2B's messages for one event of the cell, appended to out. */
static void translate(json_t *ev, json_t *out)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!type)
		return;
	if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
		json_t *text = json_object_get(ev, "data");
		json_array_append_new(out, json_pack("{s:s, s:O, s:f}", "type", type, "text",
						     text ? text : json_string(""), "timestamp",
						     now_us()));
		return;
	}
	if (!strcmp(type, "display")) {
		json_t *bundle = json_object_get(ev, "data");
		if (json_is_object(bundle))
			json_array_append_new(out, result_msg(bundle, 0));
		return;
	}
	if (strcmp(type, "result") != 0)
		return;
	json_t *data = json_object_get(ev, "data");
	json_t *value = json_object_get(ev, "value");
	if (json_is_object(data) && json_object_size(data) > 0) {
		json_array_append_new(out, result_msg(data, 1));
	} else if (json_is_string(value)) {
		json_array_append_new(out, json_pack("{s:s, s:b, s:O}", "type", "result",
						     "is_main_result", 1, "text", value));
	}
	json_t *err = json_object_get(ev, "error");
	if (json_is_object(err)) {
		json_t *tb = json_object_get(err, "traceback");
		size_t len = 0;
		for (size_t i = 0; i < json_array_size(tb); i++)
			len += strlen(json_string_value(json_array_get(tb, i)) ?: "") + 1;
		char *joined = calloc(1, len + 1);
		for (size_t i = 0; joined && i < json_array_size(tb); i++) {
			if (i)
				strcat(joined, "\n");
			strcat(joined, json_string_value(json_array_get(tb, i)) ?: "");
		}
		json_t *name = json_object_get(err, "name");
		json_t *val = json_object_get(err, "value");
		json_array_append_new(out, json_pack("{s:s, s:O, s:O, s:s}", "type", "error", "name",
						     name ? name : json_string("Error"), "value",
						     val ? val : json_string(""), "traceback",
						     joined ? joined : ""));
		free(joined);
	}
	json_t *count = json_object_get(ev, "execution_count");
	if (json_is_integer(count))
		json_array_append_new(out, json_pack("{s:s, s:O}", "type", "number_of_executions",
						     "execution_count", count));
	json_array_append_new(out, json_pack("{s:s}", "type", "end_of_execution"));
}

struct exec_stream {
	struct code_cell *k;
	char *buf;
	size_t len, off;
	int finished;
};

static ssize_t exec_read(void *ud, char *out, size_t max, struct http_wait *w)
{
	struct exec_stream *x = ud;
	for (;;) {
		if (x->off < x->len) {
			size_t n = x->len - x->off < max ? x->len - x->off : max;
			memcpy(out, x->buf + x->off, n);
			x->off += n;
			return (ssize_t)n;
		}
		free(x->buf);
		x->buf = NULL;
		x->len = x->off = 0;
		if (x->finished)
			return 0;
		int fd = -1, ms = 250;
		json_t *ev = code_cell_next(x->k, &fd, &ms);
		if (!ev) {
			if (code_cell_done(x->k)) {
				code_cell_end(x->k);
				x->k = NULL;
				x->finished = 1;
				continue;
			}
			w->fd = fd;
			w->timeout_ms = ms;
			return HTTP_STREAM_WAIT;
		}
		json_t *msgs = json_array();
		translate(ev, msgs);
		json_decref(ev);
		if (code_cell_done(x->k)) {
			/* Free the context's cell slot before the client has the
			 * end: its next call may come before the stream is freed. */
			code_cell_end(x->k);
			x->k = NULL;
			x->finished = 1;
		}
		size_t i;
		json_t *m;
		json_array_foreach(msgs, i, m)
		{
			char *t = json_dumps(m, JSON_COMPACT);
			size_t n = t ? strlen(t) : 0;
			char *nb = t ? realloc(x->buf, x->len + n + 1) : NULL;
			if (!nb) {
				free(t);
				json_decref(msgs);
				return HTTP_STREAM_ERROR;
			}
			memcpy(nb + x->len, t, n);
			nb[x->len + n] = '\n';
			x->buf = nb;
			x->len += n + 1;
			free(t);
		}
		json_decref(msgs);
	}
}

static void exec_free(void *ud, int completed)
{
	(void)completed;
	struct exec_stream *x = ud;
	if (x->k)
		code_cell_end(x->k);
	free(x->buf);
	free(x);
}

static int execute(struct http_req *req)
{
	json_t *body = req->json;
	json_t *code = json_object_get(body, "code");
	json_t *jl = json_object_get(body, "language");
	json_t *jc = json_object_get(body, "context_id");
	json_t *envs = json_object_get(body, "env_vars");
	if (!json_is_string(code))
		return e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
					"\"code\" (a string) is required");
	if ((jl && !json_is_null(jl) && !json_is_string(jl)) ||
	    (jc && !json_is_null(jc) && !json_is_string(jc)))
		return e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
					"\"language\" and \"context_id\" must be strings");
	if (json_is_object(envs) && json_object_size(envs) > 0)
		return e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
					"env_vars are not supported by sandlotd's interpreter: "
					"set them when the sandbox is created");
	const char *ctx = json_string_value(jc);
	const char *lang = language(json_string_value(jl));
	if (json_is_string(jl) && !lang)
		return e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
					"language %.32s is not supported (python, javascript, bash)",
					json_string_value(jl));
	if (ctx && json_is_string(jl))
		return e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
					"give a context or a language, not both");
	sandlot_t *sb;
	struct dsb *s = e2b_sandbox(req, E2B_PLAIN, E2B_INTERP_PORT, &sb);
	if (!s)
		return 0;
	int status = 500;
	char msg[768];
	struct code_cell *k = code_cell_start(req->d, s, lang, ctx, json_string_value(code),
					      &status, msg, sizeof(msg));
	dsb_put(req->d, s);
	if (!k)
		return http_json(req, status,
				 json_pack("{s:i, s:s}", "code", status, "message", msg));
	struct exec_stream *x = calloc(1, sizeof(*x));
	if (!x) {
		code_cell_end(k);
		return e2b_answer_error(req, E2B_PLAIN, "internal", "out of memory");
	}
	x->k = k;
	return http_stream(req, 200, "application/x-ndjson", exec_read, exec_free, x);
}

static json_t *context_json(const char *id, const char *lang)
{
	return json_pack("{s:s, s:s, s:s}", "id", id, "language", lang, "cwd", E2B_HOME);
}

static int context_create(struct http_req *req)
{
	json_t *jl = json_object_get(req->json, "language");
	json_t *cwd = json_object_get(req->json, "cwd");
	const char *lang = language(json_string_value(jl));
	if (!lang || (jl && !json_is_null(jl) && !json_is_string(jl)))
		return e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
					"language %.32s is not supported (python, javascript, bash)",
					json_string_value(jl) ?: "?");
	if (cwd && !json_is_null(cwd) &&
	    (!json_is_string(cwd) || strcmp(json_string_value(cwd), E2B_HOME) != 0))
		return e2b_answer_error(req, E2B_PLAIN, "invalid_argument",
					"contexts run in %s: another cwd is not supported", E2B_HOME);
	sandlot_t *sb;
	struct dsb *s = e2b_sandbox(req, E2B_PLAIN, E2B_INTERP_PORT, &sb);
	if (!s)
		return 0;
	char id[48], msg[768];
	int rc = code_ctx_create(req->d, s, lang, id, msg, sizeof(msg));
	dsb_put(req->d, s);
	if (rc < 0)
		return e2b_answer_error(req, E2B_PLAIN, "internal", "%s", msg);
	return http_json(req, 200, context_json(id, lang));
}

static int context_list(struct http_req *req)
{
	sandlot_t *sb;
	struct dsb *s = e2b_sandbox(req, E2B_PLAIN, E2B_INTERP_PORT, &sb);
	if (!s)
		return 0;
	json_t *list = code_ctx_list(req->d, s);
	dsb_put(req->d, s);
	json_t *out = json_array();
	size_t i;
	json_t *c;
	json_array_foreach(list, i, c)
	{
		json_array_append_new(out,
				      context_json(json_string_value(json_object_get(c, "id")),
						   json_string_value(json_object_get(c, "language"))));
	}
	json_decref(list);
	return http_json(req, 200, out);
}

static int context_change(struct http_req *req, int remove)
{
	sandlot_t *sb;
	struct dsb *s = e2b_sandbox(req, E2B_PLAIN, E2B_INTERP_PORT, &sb);
	if (!s)
		return 0;
	char msg[768];
	int rc = code_ctx_restart(req->d, s, req->params[0], remove, msg, sizeof(msg));
	dsb_put(req->d, s);
	if (rc == -ENOENT)
		return e2b_answer_error(req, E2B_PLAIN, "not_found", "%s", msg);
	if (rc < 0)
		return e2b_answer_error(req, E2B_PLAIN, "internal", "%s", msg);
	return http_empty(req, remove ? 204 : 200);
}

static int context_delete(struct http_req *req)
{
	return context_change(req, 1);
}

static int context_restart(struct http_req *req)
{
	return context_change(req, 0);
}

const struct http_route e2b_interp_routes[] = {
	{ "POST", "/e2b/execute", HTTP_JSON, execute, NULL, NULL, NULL },
	{ "POST", "/e2b/contexts", HTTP_JSON, context_create, NULL, NULL, NULL },
	{ "GET", "/e2b/contexts", HTTP_NOBODY, context_list, NULL, NULL, NULL },
	{ "DELETE", "/e2b/contexts/{}", HTTP_NOBODY, context_delete, NULL, NULL, NULL },
	{ "POST", "/e2b/contexts/{}/restart", HTTP_NOBODY, context_restart, NULL, NULL, NULL },
	{ 0 },
};
