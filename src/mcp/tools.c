/* The tools of the MCP server (see mcp.h): their arguments, checked against
 * one table that also gives their inputSchema; their work, as calls of
 * sandlotd's HTTP API in the session's sandbox; their results as MCP
 * content.
 *
 * Everything that goes wrong while a tool runs (a non-zero exit, a missing
 * file, sandlotd unreachable) is a tool result with isError: true and one
 * clear sentence.  Arguments that do not match a tool's inputSchema are
 * -32602 for protocol versions up to 2025-06-18 and a tool result with
 * isError (so that the model sees the message) from 2025-11-25 on, as that
 * version of the specification asks.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/base64.h"
#include "common/cleanup.h"
#include "common/json.h"
#include "mcp/internal.h"

#define OUTPUT_LIMIT (256u << 10)      /* run_command output kept per stream */
#define READ_MAX (16u << 20)           /* read_file */
#define GENERATED_BYTES_MAX (8u << 20) /* contents in one generated_files answer */
#define GENERATED_LIST_MAX 500         /* paths listed by generated_files */
#define CHANGES_SHOWN 20               /* changed files named after a run_command */

static int is_2xx(long status)
{
	return status >= 200 && status < 300;
}

/* ---- tool results ----------------------------------------------------------- */


static void add_text(struct call *k, const char *text, size_t len)
{
	json_array_append_new(k->content, json_pack("{s:s,s:o}", "type", "text", "text",
						    json_text(text, len)));
}

static void vsay(struct call *k, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void vsay(struct call *k, const char *fmt, va_list ap)
{
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);
	if (n >= 0) {
		add_text(k, s, (size_t)n);
		free(s);
	}
}

static void say(struct call *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct call *k, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay(k, fmt, ap);
	va_end(ap);
}

/* say(), and the result is an error (isError). */
static void fail(struct call *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct call *k, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsay(k, fmt, ap);
	va_end(ap);
	k->is_error = 1;
}

/* Whether the call should stop without an answer (cancelled, or the
 * server is going away). */
static int abandoned(const struct call *k)
{
	return mcp__cancelled(k->m) || mcp_stopped(k->m);
}

/* ---- base64 and small helpers ---------------------------------------------- */

static json_t *base64_json(const unsigned char *in, size_t len)
{
	size_t olen;
	cleanup_free char *out = sandlot__base64_encode_alloc(in, len, &olen);
	return out ? json_stringn_nocheck(out, olen) : NULL;
}

/* "sandlot://sb-.../home/user/a%20b.bin": where a binary file came from. */
static json_t *file_uri(const char *sandbox, const char *path)
{
	static const char keep[] = "-._~/";
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return NULL;
	fprintf(f, "sandlot://%s", sandbox);
	if (path[0] != '/')
		fputs("/home/user/", f);
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr(keep, *p))
			fputc(*p, f);
		else
			fprintf(f, "%%%02X", *p);
	}
	fclose(f);
	json_t *s = json_stringn(buf, len);
	free(buf);
	return s;
}

static const char *image_mime(const unsigned char *d, size_t n)
{
	if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8))
		return "image/png";
	if (n >= 3 && !memcmp(d, "\xff\xd8\xff", 3))
		return "image/jpeg";
	if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6)))
		return "image/gif";
	if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4))
		return "image/webp";
	return NULL;
}

/* A file's bytes as MCP content: an image, text (valid UTF-8 without NUL
 * bytes), or else an embedded resource with the bytes as a base64 blob. */
static json_t *file_content(struct mcp *m, const char *path, const char *data, size_t len,
			    int *is_text)
{
	*is_text = 0;
	const char *mime = image_mime((const unsigned char *)data, len);
	if (mime)
		return json_pack("{s:s,s:o,s:s}", "type", "image", "data",
				 base64_json((const unsigned char *)data, len), "mimeType", mime);
	if (!memchr(data, 0, len)) {
		json_t *s = json_stringn(data, len);   /* NULL unless valid UTF-8 */
		if (s) {
			*is_text = 1;
			return json_pack("{s:s,s:o}", "type", "text", "text", s);
		}
	}
	return json_pack("{s:s,s:{s:o,s:s,s:o}}", "type", "resource", "resource", "uri",
			 file_uri(m->sandbox, path), "mimeType", "application/octet-stream", "blob",
			 base64_json((const unsigned char *)data, len));
}

/* ---- tool arguments: one table gives both the inputSchema and the checks ---- */

enum arg_type { ARG_STRING, ARG_INTEGER, ARG_BOOLEAN, ARG_STRING_MAP };

struct arg_spec {
	const char *name;
	enum arg_type type;
	int required;
	const char *description;
	const char *const *choices;   /* ARG_STRING: the allowed values, NULL-terminated */
	json_int_t min, max;          /* ARG_INTEGER */
};

struct tool {
	const char *name;
	const char *title;
	const char *description;
	const struct arg_spec *args;
	int read_only;
	void (*fn)(struct call *k);
};

static const char *const languages[] = { "python", "javascript", "bash", NULL };
static const char *const encodings[] = { "utf-8", "base64", NULL };

static json_t *input_schema(const struct tool *t)
{
	json_t *props = json_object(), *required = json_array();
	for (const struct arg_spec *a = t->args; a->name; a++) {
		json_t *p = json_object();
		switch (a->type) {
		case ARG_STRING:
			json_object_set_new(p, "type", json_string("string"));
			if (a->choices) {
				json_t *e = json_array();
				for (const char *const *c = a->choices; *c; c++)
					json_array_append_new(e, json_string(*c));
				json_object_set_new(p, "enum", e);
			}
			break;
		case ARG_INTEGER:
			json_object_set_new(p, "type", json_string("integer"));
			json_object_set_new(p, "minimum", json_integer(a->min));
			json_object_set_new(p, "maximum", json_integer(a->max));
			break;
		case ARG_BOOLEAN:
			json_object_set_new(p, "type", json_string("boolean"));
			break;
		case ARG_STRING_MAP:
			json_object_set_new(p, "type", json_string("object"));
			json_object_set_new(p, "additionalProperties", json_pack("{s:s}", "type", "string"));
			break;
		}
		json_object_set_new(p, "description", json_string(a->description));
		json_object_set_new(props, a->name, p);
		if (a->required)
			json_array_append_new(required, json_string(a->name));
	}
	return json_pack("{s:s,s:o,s:o,s:b}", "type", "object", "properties", props, "required",
			 required, "additionalProperties", 0);
}

static const char *type_name(enum arg_type t)
{
	switch (t) {
	case ARG_STRING: return "a string";
	case ARG_INTEGER: return "an integer";
	case ARG_BOOLEAN: return "a boolean";
	case ARG_STRING_MAP: return "an object of strings";
	}
	return "?";
}

/* Check args against the tool's table.  NULL if they fit, else why not
 * (malloc'd).  A JSON null counts as leaving an optional argument out. */
static char *check_args(const struct tool *t, json_t *args)
{
	char *why = NULL;
	const char *key;
	json_t *v;
	json_object_foreach(args, key, v) {
		const struct arg_spec *a = t->args;
		while (a->name && strcmp(a->name, key) != 0)
			a++;
		if (!a->name) {
			char names[256] = "";
			for (const struct arg_spec *b = t->args; b->name; b++)
				snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
					 b == t->args ? "" : ", ", b->name);
			if (asprintf(&why, "unknown argument \"%.100s\" (%s takes: %s)", key, t->name, names) < 0)
				why = NULL;
			return why ? why : strdup("unknown argument");
		}
		if (json_is_null(v) && !a->required)
			continue;
		int ok = 0;
		switch (a->type) {
		case ARG_STRING:
			ok = json_is_string(v);
			if (ok && a->choices) {
				const char *const *c = a->choices;
				while (*c && strcmp(*c, json_string_value(v)) != 0)
					c++;
				if (!*c) {
					char names[128] = "";
					for (c = a->choices; *c; c++)
						snprintf(names + strlen(names), sizeof(names) - strlen(names),
							 "%s%s", c == a->choices ? "" : ", ", *c);
					if (asprintf(&why, "argument \"%s\" must be one of %s, not \"%.100s\"",
						     key, names, json_string_value(v)) < 0)
						why = NULL;
					return why ? why : strdup("invalid argument");
				}
			}
			break;
		case ARG_INTEGER: {
			double d = json_is_real(v) ? json_real_value(v) : 0;
			if (json_is_real(v) && d == (double)(json_int_t)d) {
				/* 30.0 is an integer in JSON Schema */
				json_object_set_new(args, key, json_integer((json_int_t)d));
				v = json_object_get(args, key);
			}
			ok = json_is_integer(v);
			if (ok && (json_integer_value(v) < a->min || json_integer_value(v) > a->max)) {
				if (asprintf(&why, "argument \"%s\" must be from %lld to %lld, not %lld", key,
					     (long long)a->min, (long long)a->max,
					     (long long)json_integer_value(v)) < 0)
					why = NULL;
				return why ? why : strdup("invalid argument");
			}
			break;
		}
		case ARG_BOOLEAN:
			ok = json_is_boolean(v);
			break;
		case ARG_STRING_MAP: {
			ok = json_is_object(v);
			const char *k2;
			json_t *v2;
			json_object_foreach(v, k2, v2)
				if (!json_is_string(v2))
					ok = 0;
			break;
		}
		}
		if (!ok) {
			if (asprintf(&why, "argument \"%s\" must be %s", key, type_name(a->type)) < 0)
				why = NULL;
			return why ? why : strdup("invalid argument");
		}
	}
	for (const struct arg_spec *a = t->args; a->name; a++) {
		v = json_object_get(args, a->name);
		if (a->required && (!v || json_is_null(v))) {
			if (asprintf(&why, "missing required argument \"%s\"", a->name) < 0)
				why = NULL;
			return why ? why : strdup("missing argument");
		}
	}
	return NULL;
}

static const char *arg_str(struct call *k, const char *name)
{
	return json_string_value(json_object_get(k->args, name));
}

static int arg_bool(struct call *k, const char *name)
{
	return json_is_true(json_object_get(k->args, name));
}

/* timeout_seconds, else the server's default, in ms. */
static json_int_t arg_timeout_ms(struct call *k)
{
	json_t *v = json_object_get(k->args, "timeout_seconds");
	return json_is_integer(v) ? json_integer_value(v) * 1000 : (json_int_t)k->m->timeout_ms;
}

/* ---- the sandbox ------------------------------------------------------------- */

static int ensure_sandbox(struct call *k)
{
	struct mcp *m = k->m;
	if (m->sandbox)
		return 0;
	struct client_req r = { .method = "POST", .path = "/v1/sandboxes", .json = m->create_body };
	/* Not abandoned half-way: a sandbox sandlotd made for an answer we did
	 * not wait for would be nobody's until its idle timeout.  Once we have
	 * its id, the end of the session deletes it. */
	m->hold = 1;
	mcp__http(m, &r);
	m->hold = 0;
	int rc = -1;
	const char *id = r.reply ? client_str(r.reply, "id") : "";
	if (is_2xx(r.status) && *id) {
		m->sandbox = strdup(id);
		m->baseline = m->gen_cursor = json_integer_value(json_object_get(r.reply, "cursor"));
		m->last_active_ms = mcp__now_ms();
		mcp__log(m, "created sandbox %s", id);
		rc = m->sandbox ? 0 : -1;
	}
	if (rc == 0 && abandoned(k)) {
		rc = -1;
	} else if (rc < 0 && !abandoned(k)) {
		cleanup_free char *why = is_2xx(r.status) ? strdup("sandlotd did not say its id")
							  : mcp__req_error(m, &r);
		fail(k, "could not create a sandbox: %s", why ? why : "error");
	}
	client_req_free(&r);
	return rc;
}

/* Whether a failed request says that our sandbox no longer runs: 410, or
 * a 404 after which the sandbox's own record is gone or not running. */
static int sandbox_gone(struct mcp *m, const struct client_req *r)
{
	if (r->status == 410)
		return 1;
	if (r->status != 404)
		return 0;
	cleanup_free char *path = NULL;
	if (asprintf(&path, "/v1/sandboxes/%s", m->sandbox) < 0)
		return 0;
	struct client_req g = { .method = "GET", .path = path };
	mcp__http(m, &g);
	int gone = g.status == 404 ||
		   (g.status == 200 && strcmp(client_str(g.reply, "state"), "running") != 0 &&
		    strcmp(client_str(g.reply, "state"), "paused") != 0);
	client_req_free(&g);
	return gone;
}

/* Run r at /v1/sandboxes/ID<suffix> in the session's sandbox, creating it
 * first if there is none yet, and once more in a new sandbox if the old one
 * has ended (TTL, deleted by someone, daemon restart): k->note then says so.
 * Returns 0 on a 2xx answer; -1 otherwise, after adding the reason
 * (prefixed with `what` if not NULL) to the result -- unless the call was
 * abandoned.  The caller frees r in either case. */
static int sb_request(struct call *k, struct client_req *r, const char *what, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int sb_request(struct call *k, struct client_req *r, const char *what, const char *fmt, ...)
{
	struct mcp *m = k->m;
	va_list ap;
	va_start(ap, fmt);
	cleanup_free char *suffix = NULL;
	if (vasprintf(&suffix, fmt, ap) < 0)
		suffix = NULL;
	va_end(ap);
	if (!suffix) {
		fail(k, "out of memory");
		return -1;
	}
	struct client_req in = *r;
	for (int attempt = 0;; attempt++) {
		if (ensure_sandbox(k) < 0)
			return -1;
		cleanup_free char *path = NULL;
		if (asprintf(&path, "/v1/sandboxes/%s%s", m->sandbox, suffix) < 0) {
			fail(k, "out of memory");
			return -1;
		}
		r->path = path;
		mcp__http(m, r);
		r->path = NULL;
		if (is_2xx(r->status)) {
			m->last_active_ms = mcp__now_ms();
			return 0;
		}
		if (abandoned(k))
			return -1;
		if (attempt == 0 && !r->transport && sandbox_gone(m, r)) {
			mcp__log(m, "sandbox %s has ended (%s); starting a new one", m->sandbox,
			     r->err_msg ? r->err_msg : "gone");
			free(k->note);
			if (asprintf(&k->note, "Note: the session's sandbox %s had ended (%s); this ran in a "
				     "new sandbox, so files and interpreter state from before are gone.",
				     m->sandbox, r->err_msg ? r->err_msg : "gone") < 0)
				k->note = NULL;
			mcp__forget_sandbox(m);
			client_req_free(r);
			*r = in;
			continue;
		}
		cleanup_free char *why = mcp__req_error(m, r);
		if (what && why && !strstr(why, what))
			fail(k, "%s: %s", what, why);
		else
			fail(k, "%s", why ? why : "error");
		return -1;
	}
}

/* ---- run_command ------------------------------------------------------------ */

static void describe_changes(FILE *f, json_t *changes)
{
	size_t n = json_array_size(changes), shown = 0, i;
	json_t *ch;
	if (!n)
		return;
	fputs("\nfiles changed:\n", f);
	json_array_foreach(changes, i, ch) {
		if (!strcmp(client_str(ch, "type"), "directory"))
			continue;
		if (shown++ == CHANGES_SHOWN) {
			fputs("  ... and more (see generated_files)\n", f);
			break;
		}
		if (!strcmp(client_str(ch, "kind"), "deleted"))
			fprintf(f, "  deleted %s\n", client_str(ch, "path"));
		else
			fprintf(f, "  %s %s (%lld bytes)\n", client_str(ch, "kind"), client_str(ch, "path"),
				(long long)json_integer_value(json_object_get(ch, "size")));
	}
}

static void tool_run_command(struct call *k)
{
	json_t *body = json_object();
	json_object_set(body, "command", json_object_get(k->args, "command"));
	if (arg_str(k, "cwd"))
		json_object_set(body, "cwd", json_object_get(k->args, "cwd"));
	if (json_is_object(json_object_get(k->args, "env")))
		json_object_set(body, "env", json_object_get(k->args, "env"));
	if (arg_str(k, "stdin"))
		json_object_set(body, "stdin", json_object_get(k->args, "stdin"));
	json_int_t timeout_ms = arg_timeout_ms(k);
	json_object_set_new(body, "timeout_ms", json_integer(timeout_ms));
	json_object_set_new(body, "output_limit", json_integer(OUTPUT_LIMIT));
	struct client_req r = { .method = "POST", .json = body };
	if (sb_request(k, &r, NULL, "/exec") == 0) {
		json_t *res = r.reply;
		json_t *code = json_object_get(res, "exit_code"), *sig = json_object_get(res, "signal");
		const char *err = client_str(res, "error"), *out = client_str(res, "stdout"),
			   *errout = client_str(res, "stderr");
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		if (f) {
			int ok = 0;
			if (*err)
				fprintf(f, "the command could not run: %s (exit code %lld)\n", err,
					(long long)json_integer_value(code));
			else if (json_is_true(json_object_get(res, "timed_out")))
				fprintf(f, "timed out after %lld s and was killed (with everything it started)\n",
					(long long)(timeout_ms / 1000));
			else if (json_is_true(json_object_get(res, "oom_killed")))
				fputs("killed: out of memory (the sandbox's memory limit)\n", f);
			else if (json_is_integer(sig))
				fprintf(f, "killed by signal %lld (SIG%s)\n", (long long)json_integer_value(sig),
					sigabbrev_np((int)json_integer_value(sig))
						? sigabbrev_np((int)json_integer_value(sig)) : "?");
			else {
				fprintf(f, "exit code %lld\n", (long long)json_integer_value(code));
				ok = json_integer_value(code) == 0;
			}
			k->is_error = !ok;
			if (*out)
				fprintf(f, "\n--- stdout ---\n%s%s", out, out[strlen(out) - 1] == '\n' ? "" : "\n");
			if (*errout)
				fprintf(f, "\n--- stderr ---\n%s%s", errout,
					errout[strlen(errout) - 1] == '\n' ? "" : "\n");
			if (!*out && !*errout && !*err)
				fputs("(no output)\n", f);
			if (json_is_true(json_object_get(res, "truncated")))
				fprintf(f, "\n(output truncated: only the first %u KiB of each stream are shown; "
					"redirect it to a file and read that in parts)\n", OUTPUT_LIMIT >> 10);
			describe_changes(f, json_object_get(res, "changes"));
			fclose(f);
			add_text(k, buf, len);
			free(buf);
		}
	}
	client_req_free(&r);
	json_decref(body);
}

/* ---- run_code ------------------------------------------------------------------ */

/* The daemon's context id for the name the model chose, created on first use. */
static const char *code_context(struct call *k, const char *name, const char *language)
{
	struct mcp *m = k->m;
	json_t *c = json_object_get(m->contexts, name);
	if (c) {
		if (strcmp(client_str(c, "language"), language) != 0) {
			fail(k, "context \"%s\" runs %s, not %s (use another context name for %s)", name,
			     client_str(c, "language"), language, language);
			return NULL;
		}
		return client_str(c, "id");
	}
	json_t *body = json_pack("{s:s}", "language", language);
	struct client_req r = { .method = "POST", .json = body };
	const char *id = NULL;
	if (sb_request(k, &r, "creating the code context", "/contexts") == 0 &&
	    *client_str(r.reply, "id")) {
		json_object_set_new(m->contexts, name, json_pack("{s:s,s:s}", "id", client_str(r.reply, "id"),
								  "language", language));
		id = client_str(json_object_get(m->contexts, name), "id");
	}
	client_req_free(&r);
	json_decref(body);
	return id;
}

/* The image type of a mime bundle ("image/png", ...), or NULL. */
static const char *bundle_image(json_t *bundle)
{
	static const char *const mimes[] = { "image/png", "image/jpeg", "image/gif", "image/webp" };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(mimes); i++)
		if (json_is_string(json_object_get(bundle, mimes[i])))
			return mimes[i];
	return NULL;
}

/* A rich output: its image as image content, else its text/plain. */
static void add_display(struct call *k, json_t *bundle)
{
	const char *mime = bundle_image(bundle);
	if (mime) {
		json_array_append_new(k->content, json_pack("{s:s,s:O,s:s}", "type", "image", "data",
							    json_object_get(bundle, mime), "mimeType", mime));
		return;
	}
	const char *text = client_str(bundle, "text/plain");
	if (*text)
		say(k, "--- display ---\n%s", text);
}

/* Interrupt the cell of a cancelled run_code and wait (up to 7 s: sandlotd
 * kills an interpreter that ignores the interrupt for 5 s) until its
 * context is free again, so that the next call does not find it busy. */
static void interrupt_cell(struct mcp *m, const char *context, const char *language)
{
	if (!m->sandbox)
		return;
	cleanup_free char *path = NULL, *list = NULL;
	if (asprintf(&path, "/v1/sandboxes/%s/code/interrupt", m->sandbox) < 0 ||
	    asprintf(&list, "/v1/sandboxes/%s/contexts", m->sandbox) < 0)
		return;
	mcp__set_cancelled(m, 0);   /* let mcp__http() run these requests */
	json_t *body = context ? json_pack("{s:s}", "context", context)
			       : json_pack("{s:s}", "language", language);
	struct client_req r = { .method = "POST", .path = path, .json = body };
	mcp__http(m, &r);
	cleanup_free char *id = is_2xx(r.status) ? strdup(client_str(r.reply, "context")) : NULL;
	client_req_free(&r);
	json_decref(body);
	for (int64_t deadline = mcp__now_ms() + 7000; id && mcp__now_ms() < deadline && !mcp_stopped(m);) {
		struct client_req g = { .method = "GET", .path = list };
		mcp__http(m, &g);
		int busy = 0;
		json_t *c;
		size_t i;
		json_array_foreach(json_object_get(g.reply, "contexts"), i, c)
			if (!strcmp(client_str(c, "id"), id))
				busy = json_is_true(json_object_get(c, "busy"));
		int ok = is_2xx(g.status);
		client_req_free(&g);
		if (!ok || !busy)
			break;
		m->io.wait(m->io.ud, m->c, 50);
	}
	mcp__set_cancelled(m, 1);
}

static void tool_run_code(struct call *k)
{
	const char *language = arg_str(k, "language"), *name = arg_str(k, "context");
	const char *context = NULL;
	if (name && *name && strcmp(name, "default") != 0) {
		context = code_context(k, name, language);
		if (!context)
			return;
	}
	json_t *body = json_pack("{s:O,s:I}", "code", json_object_get(k->args, "code"), "timeout_ms",
				 arg_timeout_ms(k));
	json_object_set_new(body, context ? "context" : "language", json_string(context ? context : language));
	struct client_req r = { .method = "POST", .json = body };
	int rc = sb_request(k, &r, NULL, "/code");
	if (rc < 0 && mcp__cancelled(k->m) && !mcp_stopped(k->m))
		interrupt_cell(k->m, context, language);   /* do not leave the cell running */
	if (rc == 0) {
		json_t *res = r.reply;
		const char *status = client_str(res, "status"), *out = client_str(res, "stdout"),
			   *errout = client_str(res, "stderr");
		json_t *value = json_object_get(res, "value"), *error = json_object_get(res, "error");
		json_t *exit_code = json_object_get(res, "exit_code");
		k->is_error = strcmp(status, "ok") != 0 ||
			      (json_is_integer(exit_code) && json_integer_value(exit_code) != 0);
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);
		if (f) {
			if (*out)
				fprintf(f, "%s%s", out, out[strlen(out) - 1] == '\n' ? "" : "\n");
			if (*errout)
				fprintf(f, "--- stderr ---\n%s%s", errout,
					errout[strlen(errout) - 1] == '\n' ? "" : "\n");
			if (json_is_object(error)) {
				json_t *tb = json_object_get(error, "traceback");
				size_t i;
				json_t *line;
				fputs("--- error ---\n", f);
				if (json_array_size(tb)) {
					json_array_foreach(tb, i, line)
						fprintf(f, "%s\n", json_string_value(line) ? json_string_value(line) : "");
				} else {
					fprintf(f, "%s: %s\n", client_str(error, "name"), client_str(error, "value"));
				}
			}
			if (!strcmp(status, "timeout"))
				fprintf(f, "(timed out after %lld s: the cell was interrupted)\n",
					(long long)(arg_timeout_ms(k) / 1000));
			if (json_is_string(value))
				fprintf(f, "--- result ---\n%s\n", json_string_value(value));
			if (json_is_integer(exit_code) && json_integer_value(exit_code) != 0)
				fprintf(f, "(exit code %lld)\n", (long long)json_integer_value(exit_code));
			if (json_is_true(json_object_get(res, "state_lost")) ||
			    json_is_true(json_object_get(res, "restarted")))
				fputs("(the interpreter was restarted: variables, imports and definitions from "
				      "earlier calls are gone)\n", f);
			if (ftell(f) == 0)
				fputs("(no output)\n", f);
			fclose(f);
			add_text(k, buf, len);
			free(buf);
		}
		json_t *displays = json_object_get(res, "displays"), *d;
		size_t i;
		json_array_foreach(displays, i, d)
			add_display(k, json_object_get(d, "data"));
		/* a last expression that is an image (its repr is in the text) */
		if (bundle_image(json_object_get(res, "data")))
			add_display(k, json_object_get(res, "data"));
	}
	client_req_free(&r);
	json_decref(body);
}

/* ---- files -------------------------------------------------------------------- */

struct grab {
	char *buf;
	size_t len, cap, max;
	int too_big;
};

static int grab_sink(void *ud, const char *data, size_t len)
{
	struct grab *g = ud;
	if (g->len + len > g->max) {
		g->too_big = 1;
		return -1;
	}
	if (g->len + len + 1 > g->cap) {
		size_t cap = g->cap ? g->cap : 65536;
		while (cap < g->len + len + 1)
			cap *= 2;
		char *nb = realloc(g->buf, cap);
		if (!nb)
			return -1;
		g->buf = nb;
		g->cap = cap;
	}
	memcpy(g->buf + g->len, data, len);
	g->len += len;
	return 0;
}

/* GET a file of at most max bytes into g.  Returns 0, or -1 after saying
 * why (unless abandoned). */
static int fetch_file(struct call *k, const char *path, struct grab *g)
{
	cleanup_free char *esc = client_escape(path);
	if (!esc) {
		fail(k, "out of memory");
		return -1;
	}
	struct client_req r = { .method = "GET", .sink = grab_sink, .sink_ud = g };
	int rc = sb_request(k, &r, path, "/files?path=%s", esc);
	if (rc == 0 && (r.aborted || g->too_big)) {
		if (g->too_big)
			fail(k, "%s: larger than %zu MiB: read it in parts with run_command (head, tail, "
			     "split) instead", path, g->max >> 20);
		else if (!abandoned(k))
			fail(k, "%s: the transfer failed", path);
		rc = -1;
	}
	client_req_free(&r);
	return rc;
}

/* GET .../files/stat: the entry's FileInfo (new reference), or NULL after
 * saying why. */
static json_t *stat_file(struct call *k, const char *path)
{
	cleanup_free char *esc = client_escape(path);
	if (!esc) {
		fail(k, "out of memory");
		return NULL;
	}
	struct client_req r = { .method = "GET" };
	json_t *info = NULL;
	if (sb_request(k, &r, path, "/files/stat?path=%s", esc) == 0)
		info = json_incref(r.reply);
	client_req_free(&r);
	return info;
}

static void tool_read_file(struct call *k)
{
	const char *path = arg_str(k, "path");
	json_t *info = stat_file(k, path);
	if (!info)
		return;
	const char *type = client_str(info, "type");
	const char *abs = *client_str(info, "path") ? client_str(info, "path") : path;
	json_int_t size = json_integer_value(json_object_get(info, "size"));
	if (!strcmp(type, "directory")) {
		fail(k, "%s is a directory: use list_files", abs);
	} else if (strcmp(type, "file") != 0) {
		fail(k, "%s is not a regular file (%s)", abs, type);
	} else if (size > (json_int_t)READ_MAX) {
		fail(k, "%s is %lld bytes, more than read_file returns (%u MiB): read it in parts with "
		     "run_command (head, tail, split) instead", abs, (long long)size, READ_MAX >> 20);
	} else {
		struct grab g = { .max = READ_MAX };
		if (fetch_file(k, abs, &g) == 0) {
			int is_text;
			json_t *c = file_content(k->m, abs, g.buf ? g.buf : "", g.len, &is_text);
			if (c)
				json_array_append_new(k->content, c);
			else
				fail(k, "out of memory");
		}
		free(g.buf);
	}
	json_decref(info);
}

static void tool_write_file(struct call *k)
{
	const char *path = arg_str(k, "path"), *enc = arg_str(k, "encoding");
	json_t *content = json_object_get(k->args, "content");
	const char *data = json_string_value(content);
	size_t len = json_string_length(content);
	cleanup_free unsigned char *decoded = NULL;
	if (enc && !strcmp(enc, "base64")) {
		decoded = malloc(sandlot__base64_decoded_max(len));
		if (!decoded) {
			fail(k, "out of memory");
			return;
		}
		ssize_t n = sandlot__base64_decode(data, len, decoded);
		if (n < 0) {
			fail(k, "content is not valid base64 (encoding is \"base64\")");
			return;
		}
		data = (const char *)decoded;
		len = (size_t)n;
	}
	cleanup_free char *esc = client_escape(path);
	if (!esc) {
		fail(k, "out of memory");
		return;
	}
	struct client_req r = { .method = "PUT", .body = data, .body_len = len };
	if (sb_request(k, &r, path, "/files?path=%s", esc) == 0)
		say(k, "wrote %zu bytes to %s", len, *client_str(r.reply, "path") ? client_str(r.reply, "path")
									: path);
	client_req_free(&r);
}

static void tool_list_files(struct call *k)
{
	const char *path = arg_str(k, "path");
	if (!path || !*path)
		path = "/home/user";
	cleanup_free char *esc = client_escape(path);
	if (!esc) {
		fail(k, "out of memory");
		return;
	}
	struct client_req r = { .method = "GET" };
	if (sb_request(k, &r, path, "/files/list?path=%s", esc) == 0) {
		json_t *entries = json_object_get(r.reply, "entries"), *e;
		char *buf = NULL;
		size_t len = 0, i;
		FILE *f = open_memstream(&buf, &len);
		if (f) {
			size_t n = json_array_size(entries);
			fprintf(f, "%s: %zu %s\n", *client_str(r.reply, "path") ? client_str(r.reply, "path") : path,
				n, n == 1 ? "entry" : "entries");
			json_array_foreach(entries, i, e) {
				const char *type = client_str(e, "type");
				long long size = (long long)json_integer_value(json_object_get(e, "size"));
				long long disk = (long long)json_integer_value(json_object_get(e, "allocated"));
				const char *mark = !strcmp(type, "directory") ? "/"
						   : !strcmp(type, "symlink") ? "@" : "";
				/* A file mostly of holes: reading it costs its size, not its disk. */
				int sparse = !strcmp(type, "file") && size - disk > (1LL << 20);
				fprintf(f, "%-9s %10lld  %s  %s%s", type, size, client_str(e, "mode"),
					client_str(e, "name"), mark);
				if (sparse)
					fprintf(f, "  (sparse: %lld bytes on disk)", disk);
				fputc('\n', f);
			}
			fclose(f);
			add_text(k, buf, len);
			free(buf);
		}
	}
	client_req_free(&r);
}

/* ---- expose_port ----------------------------------------------------------------- */

static void tool_expose_port(struct call *k)
{
	json_int_t port = json_integer_value(json_object_get(k->args, "port"));
	struct client_req g = { .method = "GET" };
	if (sb_request(k, &g, NULL, "/ports") < 0) {
		client_req_free(&g);
		return;
	}
	const char *url = NULL;
	size_t i;
	json_t *p;
	json_array_foreach(json_object_get(g.reply, "ports"), i, p)
		if (json_integer_value(json_object_get(p, "port")) == port)
			url = client_str(p, "url");
	cleanup_free char *have = url && *url ? strdup(url) : NULL;
	client_req_free(&g);
	if (!have) {
		json_t *body = json_pack("{s:I}", "port", port);
		struct client_req r = { .method = "POST", .json = body };
		cleanup_free char *what = NULL;
		if (asprintf(&what, "port %lld", (long long)port) < 0)
			what = NULL;
		int rc = sb_request(k, &r, what, "/ports");
		if (rc == 0)
			have = strdup(client_str(r.reply, "url"));
		client_req_free(&r);
		json_decref(body);
		if (rc < 0)
			return;
	}
	say(k, "Port %lld of the sandbox is exposed: a server listening on it inside (on 0.0.0.0 or "
	    "127.0.0.1) is reachable from this machine at %s (start the server in the background, "
	    "e.g. with run_command \"nohup python3 -m http.server %lld >/dev/null 2>&1 &\").",
	    (long long)port, have ? have : "(unknown)", (long long)port);
}

/* ---- generated_files ---------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void tool_generated_files(struct call *k)
{
	struct mcp *m = k->m;
	int contents = arg_bool(k, "include_contents"), since_last = arg_bool(k, "since_last_call");
	int hidden = arg_bool(k, "include_hidden");
	size_t left_hidden = 0;
	if (!m->sandbox) {
		say(k, "no files: no sandbox has been used in this session yet");
		return;
	}
	/* The daemon records changes when an exec, a file call or a code cell
	 * ends; what processes left running in the background wrote since is
	 * logged by a scan. */
	struct client_req r = { .method = "POST" };
	int rc = sb_request(k, &r, "scanning the workspace", "/changes/scan");
	client_req_free(&r);
	if (rc < 0)
		return;
	/* The daemon folds the log: one entry per path with its net effect
	 * since `since`, caches (hidden paths, __pycache__) left out unless
	 * asked for; every page of it ("more": the answer's size limit cut
	 * it, and the page's cursor is the next page's `after`). */
	json_int_t since = since_last ? m->gen_cursor : m->baseline;
	json_t *all = json_array();
	int forgotten = 0;
	json_int_t after = since;
	for (int page = 0;; page++) {
		struct client_req g = { .method = "GET" };
		if (sb_request(k, &g, NULL, "/changes?since=%lld&after=%lld&net=1&exclude_hidden=%d",
			       (long long)since, (long long)after, !hidden) < 0) {
			client_req_free(&g);
			json_decref(all);
			return;
		}
		if (page == 0)
			forgotten = json_is_true(json_object_get(g.reply, "truncated"));
		left_hidden += (size_t)json_integer_value(json_object_get(g.reply, "hidden"));
		json_array_extend(all, json_object_get(g.reply, "changes"));
		json_int_t next = json_integer_value(json_object_get(g.reply, "cursor"));
		int more = json_is_true(json_object_get(g.reply, "more")) && next > after;
		client_req_free(&g);
		after = next;
		if (!more)
			break;
	}
	m->gen_cursor = after;

	json_t *net = json_object(), *ch, *e;
	size_t i;
	json_array_foreach(all, i, ch) {
		if (!strcmp(client_str(ch, "type"), "directory"))
			continue;   /* directories show through their files */
		/* A path changed again while the pages were read: its later entry. */
		json_object_set(net, client_str(ch, "path"), ch);
	}
	size_t n = json_object_size(net), count = 0;
	const char **paths = calloc(n ? n : 1, sizeof(*paths));
	const char *key;
	json_object_foreach(net, key, e)
		if (paths)
			paths[count++] = key;
	if (paths)
		qsort(paths, count, sizeof(*paths), cmp_str);

	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (f) {
		const char *when = since_last ? "since the last generated_files call" : "since the session began";
		if (!count)
			fprintf(f, "no files were created, modified or deleted under /home/user %s\n", when);
		else
			fprintf(f, "%zu %s created, modified or deleted under /home/user %s:\n", count,
				count == 1 ? "file" : "files", when);
		for (i = 0; i < count && i < GENERATED_LIST_MAX; i++) {
			e = json_object_get(net, paths[i]);
			const char *kind = client_str(e, "kind");
			if (!strcmp(kind, "deleted"))
				fprintf(f, "  deleted   %s\n", paths[i]);
			else
				fprintf(f, "  %-9s %s (%lld bytes)\n", kind, paths[i],
					(long long)json_integer_value(json_object_get(e, "size")));
		}
		if (count > GENERATED_LIST_MAX)
			fprintf(f, "  ... and %zu more\n", count - GENERATED_LIST_MAX);
		if (left_hidden)
			fprintf(f, "(%zu hidden %s (a component starting with \".\", __pycache__) left "
				"out: include_hidden shows them)\n", left_hidden, left_hidden == 1 ? "path" : "paths");
		if (forgotten)
			fputs("(the daemon's change log dropped its oldest entries: earlier changes are missing)\n", f);
		fclose(f);
		add_text(k, buf, len);
		free(buf);
	}

	/* Contents, in the same order, until the byte budget is spent. */
	size_t budget = GENERATED_BYTES_MAX, skipped = 0;
	for (i = 0; contents && i < count && !abandoned(k); i++) {
		e = json_object_get(net, paths[i]);
		if (!strcmp(client_str(e, "kind"), "deleted") || strcmp(client_str(e, "type"), "file") != 0)
			continue;
		json_int_t size = json_integer_value(json_object_get(e, "size"));
		if (size < 0 || (size_t)size > budget) {
			skipped++;
			continue;
		}
		struct grab gr = { .max = budget };
		struct call sub = { .m = m, .args = k->args, .content = json_array() };
		if (fetch_file(&sub, paths[i], &gr) == 0) {
			int is_text;
			json_t *c = file_content(m, paths[i], gr.buf ? gr.buf : "", gr.len, &is_text);
			if (is_text) {
				/* the name first, in the same text block */
				char *t = NULL;
				if (asprintf(&t, "--- %s ---\n%s", paths[i], json_string_value(json_object_get(c, "text"))) >= 0) {
					json_object_set_new(c, "text", json_text(t, strlen(t)));
					free(t);
				}
			} else {
				say(k, "--- %s ---", paths[i]);
			}
			if (c)
				json_array_append_new(k->content, c);
			budget -= gr.len;
		} else if (gr.too_big) {
			skipped++;
		} else {
			/* gone since (deleted by a process still running): say so */
			json_array_extend(k->content, sub.content);
		}
		json_decref(sub.content);
		free(sub.note);
		free(gr.buf);
	}
	if (skipped)
		say(k, "(%zu %s left out: more than %u MiB of contents in all; use read_file)", skipped,
		    skipped == 1 ? "file was" : "files were", GENERATED_BYTES_MAX >> 20);
	free(paths);
	json_decref(net);
	json_decref(all);
}

/* ---- the tools -------------------------------------------------------------- */

static const struct arg_spec run_command_args[] = {
	{ "command", ARG_STRING, 1, "shell command line, run by /bin/sh -c", NULL, 0, 0 },
	{ "cwd", ARG_STRING, 0, "working directory (absolute, or relative to /home/user; default /home/user)",
	  NULL, 0, 0 },
	{ "env", ARG_STRING_MAP, 0, "extra environment variables", NULL, 0, 0 },
	{ "stdin", ARG_STRING, 0, "text given to the command's standard input (default: empty)", NULL, 0,
	  0 },
	{ "timeout_seconds", ARG_INTEGER, 0,
	  "kill the command and everything it started after this long (default: the server's, 300)", NULL,
	  1, MCP_TIMEOUT_MAX_S },
	{ 0 },
};

static const struct arg_spec run_code_args[] = {
	{ "language", ARG_STRING, 1, "the interpreter", languages, 0, 0 },
	{ "code", ARG_STRING, 1,
	  "the code to run, like a notebook cell: the value of a last expression is returned", NULL, 0, 0 },
	{ "context", ARG_STRING, 0,
	  "name of an independent interpreter of this language, started on first use (default: the "
	  "language's default context, shared by all calls without a context)",
	  NULL, 0, 0 },
	{ "timeout_seconds", ARG_INTEGER, 0,
	  "interrupt the code after this long; the interpreter keeps its state (default 300)", NULL, 1,
	  MCP_TIMEOUT_MAX_S },
	{ 0 },
};

static const struct arg_spec expose_port_args[] = {
	{ "port", ARG_INTEGER, 1, "the TCP port a server in the sandbox listens on", NULL, 1, 65535 },
	{ 0 },
};

static const struct arg_spec read_file_args[] = {
	{ "path", ARG_STRING, 1, "the file (absolute, or relative to /home/user)", NULL, 0, 0 },
	{ 0 },
};

static const struct arg_spec write_file_args[] = {
	{ "path", ARG_STRING, 1, "the file (absolute, or relative to /home/user); parent directories are "
	  "created; an existing file is replaced", NULL, 0, 0 },
	{ "content", ARG_STRING, 1, "the content: text, or base64 with encoding \"base64\"", NULL, 0, 0 },
	{ "encoding", ARG_STRING, 0, "how content is given (default utf-8)", encodings, 0, 0 },
	{ 0 },
};

static const struct arg_spec list_files_args[] = {
	{ "path", ARG_STRING, 0, "the directory (absolute, or relative to /home/user; default /home/user)",
	  NULL, 0, 0 },
	{ 0 },
};

static const struct arg_spec generated_files_args[] = {
	{ "include_contents", ARG_BOOLEAN, 0,
	  "also return the files' contents: text, images, or base64 blobs for other binaries (at most "
	  "8 MiB in all; default false)", NULL, 0, 0 },
	{ "since_last_call", ARG_BOOLEAN, 0,
	  "only what changed since the previous generated_files call (default false: since the session "
	  "began)", NULL, 0, 0 },
	{ "include_hidden", ARG_BOOLEAN, 0,
	  "also list hidden files and caches (a path component starting with \".\", __pycache__; "
	  "default false)", NULL, 0, 0 },
	{ 0 },
};

static const struct tool tools[] = {
	{ "run_command", "Run a shell command",
	  "Run a shell command in the sandbox (Linux, as an unprivileged user in /home/user, {network}) "
	  "and return its exit code, stdout and stderr, and the files it changed. State on disk persists "
	  "between calls; a non-zero exit is reported as an error result.",
	  run_command_args, 0, tool_run_command },
	{ "run_code", "Run code in a persistent interpreter",
	  "Run Python, JavaScript (Node.js) or bash code in a long-lived interpreter in the sandbox: "
	  "variables, imports and functions persist between calls of the same context, as in a notebook. "
	  "Returns printed output, the value of the last expression, the error with its traceback, and "
	  "images (matplotlib figures are returned as PNG images).",
	  run_code_args, 0, tool_run_code },
	{ "read_file", "Read a file",
	  "Read a file from the sandbox: text is returned as text, images as images, other binary files "
	  "as a base64 blob (at most 16 MiB).",
	  read_file_args, 1, tool_read_file },
	{ "write_file", "Write a file",
	  "Write a file in the sandbox (text, or base64 for binary content), creating parent directories.",
	  write_file_args, 0, tool_write_file },
	{ "list_files", "List a directory",
	  "List the entries of a directory in the sandbox: type, size, permissions and name.",
	  list_files_args, 1, tool_list_files },
	{ "generated_files", "Files created or modified",
	  "List the files created, modified or deleted under /home/user since the session began (or since "
	  "the last call), optionally with their contents: the way to collect what the code produced.",
	  generated_files_args, 1, tool_generated_files },
	{ "expose_port", "Expose a port to the user",
	  "Make a server that listens on a TCP port inside the sandbox (a web app, a notebook, an API "
	  "being developed) reachable by the user: returns the URL on this machine where it answers. "
	  "Only this port is reachable, from the host; nothing else of the sandbox is.",
	  expose_port_args, 0, tool_expose_port },
};

/* What the session's sandbox can reach (--net, --allow-host, --deny-host),
 * as the tools' descriptions and the instructions tell the model: "no
 * network access", "network access only to a, b (...)", or "access to the
 * public internet (...)".  Malloc'd; NULL without memory. */
static char *network_phrase(json_t *create_body)
{
	json_t *n = json_object_get(create_body, "network");
	const char *mode = json_string_value(json_object_get(n, "mode"));
	if (!mode || !strcmp(mode, "none"))
		return strdup("no network access");
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		return NULL;
	int open = !strcmp(mode, "open");
	fputs(open ? "access to the public internet" : "network access only to", f);
	for (int list = open; list < 2; list++) {
		json_t *a = json_object_get(n, list ? "deny" : "allow");
		size_t i, count = json_array_size(a);
		json_t *v;
		if (!count)
			continue;
		fputs(list ? (open ? " except" : "; not to") : "", f);
		json_array_foreach(a, i, v) {
			if (i == 20) {
				fprintf(f, " and %zu more", count - i);
				break;
			}
			fprintf(f, "%s %s", i ? "," : "", json_string_value(v));
		}
	}
	fputs(open ? " (never to this machine or to private, link-local or metadata addresses)"
		   : " (by name: DNS, HTTPS and HTTP; nothing else is reachable)", f);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* text with its "{network}" replaced by phrase, as a JSON string. */
static json_t *with_network(const char *text, const char *phrase)
{
	const char *at = strstr(text, "{network}");
	if (!at || !phrase)
		return json_string(text);
	char *s = NULL;
	if (asprintf(&s, "%.*s%s%s", (int)(at - text), text, phrase, at + strlen("{network}")) < 0)
		return NULL;
	json_t *j = json_string(s);
	free(s);
	return j;
}

json_t *mcp__tools_list(struct mcp *m)
{
	cleanup_free char *net = network_phrase(m->create_body);
	json_t *n = json_object_get(m->create_body, "network");
	const char *mode = json_string_value(json_object_get(n, "mode"));
	/* Code that can reach hosts outside works with an open world. */
	int open_world = mode && strcmp(mode, "none") != 0;
	json_t *arr = json_array();
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(tools); i++) {
		const struct tool *t = &tools[i];
		int runs_code = t->fn == tool_run_command || t->fn == tool_run_code;
		json_array_append_new(arr, json_pack("{s:s,s:s,s:o,s:o,s:{s:s,s:b,s:b,s:b,s:b}}", "name", t->name,
						     "title", t->title, "description",
						     with_network(t->description, net),
						     "inputSchema", input_schema(t), "annotations", "title",
						     t->title, "readOnlyHint", t->read_only, "destructiveHint",
						     !t->read_only, "idempotentHint", t->read_only,
						     "openWorldHint", runs_code && open_world));
	}
	return json_pack("{s:o}", "tools", arr);
}

/* ---- tools/call ---------------------------------------------------------------- */

static const char instructions[] =
	"The tools of this server work in one Linux sandbox kept for the whole session and deleted "
	"when it ends. Commands and code run as an unprivileged user in /home/user, which is "
	"writable, as is /tmp; the rest of the file system is read-only, and there is {network}. "
	"python3 (with numpy, pandas and matplotlib when the host has them) and node are "
	"available. Relative paths are relative to /home/user. run_code keeps interpreter state "
	"between calls; generated_files lists what the code wrote.";

json_t *mcp__instructions(struct mcp *m)
{
	cleanup_free char *net = network_phrase(m->create_body);
	return with_network(instructions, net);
}

json_t *mcp__tools_call(struct mcp *m, json_t *id, json_t *params)
{
	const char *name = json_string_value(json_object_get(params, "name"));
	if (!name)
		return mcp_rpc_error(id, -32602, "tools/call needs params.name (a string)");
	const struct tool *t = NULL;
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(tools); i++)
		if (!strcmp(tools[i].name, name))
			t = &tools[i];
	if (!t)
		return mcp_rpc_error(id, -32602, "unknown tool \"%.100s\" (tools: run_command, run_code, "
				 "read_file, write_file, list_files, generated_files, expose_port)", name);
	json_t *args = json_object_get(params, "arguments");
	if (args && !json_is_object(args) && !json_is_null(args))
		return mcp_rpc_error(id, -32602, "tools/call: params.arguments must be an object");
	args = json_is_object(args) ? json_deep_copy(args) : json_object();
	struct call k = { .m = m, .args = args, .content = json_array() };
	cleanup_free char *why = check_args(t, args);
	json_t *answer = NULL;
	if (why && !m->input_errors_as_results) {
		answer = mcp_rpc_error(id, -32602, "%s: %s", t->name, why);
		goto out;
	}
	if (why) {
		fail(&k, "invalid arguments for %s: %s", t->name, why);
	} else {
		/* The progress token, when the client asked for progress
		 * (mcp__http() sends it while the call waits for sandlotd). */
		json_t *token = json_object_get(json_object_get(params, "_meta"), "progressToken");
		pthread_mutex_lock(&m->lock);
		m->cur_id = id;
		m->cur_tool = t->name;
		m->progress_token = json_is_string(token) || json_is_integer(token) ? token : NULL;
		m->call_start_ms = m->progress_ms = mcp__now_ms();
		m->progress = 0;
		mcp__set_cancelled(m, 0);
		pthread_mutex_unlock(&m->lock);
		t->fn(&k);
		pthread_mutex_lock(&m->lock);
		m->cur_id = NULL;
		m->cur_tool = NULL;
		m->progress_token = NULL;
		pthread_mutex_unlock(&m->lock);
		if (abandoned(&k)) {
			/* no answer to a cancelled request; none when going away */
			if (mcp__cancelled(m))
				mcp__log(m, "%s cancelled", t->name);
			mcp__set_cancelled(m, 0);
			goto out;
		}
	}
	if (k.note)
		json_array_insert_new(k.content, 0, json_pack("{s:s,s:s}", "type", "text", "text", k.note));
	if (!json_array_size(k.content))
		add_text(&k, "done", 4);
	answer = mcp__rpc_result(id, json_pack("{s:O,s:b}", "content", k.content, "isError", k.is_error));
out:
	json_decref(k.content);
	json_decref(args);
	free(k.note);
	return answer;
}

