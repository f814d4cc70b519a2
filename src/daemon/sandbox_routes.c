/* The /v1 routes of the sandbox lifecycle: create, list, get, delete,
 * keepalive, pause, resume.  Each parses its request, calls the domain
 * layer (domain.h) and answers; errors go through http_error_from(). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"
#include "daemon/archives.h"
#include "daemon/domain.h"

#define MAX_LABELS 16

/* Answer err and free it.  Returns 0. */
static int answer_err(struct http_req *req, sandlot_error_t *err)
{
	http_error_from(req, err);
	sandlot_error_free(err);
	return 0;
}

/* ---- helpers of every route on a sandbox ------------------------------------ */

struct dsb *dsb_get(struct daemon *d, struct http_req *req, const char *id)
{
	sandlot_error_t *err = NULL;
	struct dsb *s = domain_sandbox_get(d, id, &err);
	if (!s)
		answer_err(req, err);
	return s;
}

void dsb_answer_missing(struct http_req *req, const char *id)
{
	sandlot_error_t *err = NULL;
	struct dsb *s = domain_sandbox_find(req->d, id, &err);
	if (s) { /* it came meanwhile; say what was asked about anyway */
		dsb_release(req->d, s);
		sandlot__error(&err, ENOENT, "no sandbox %s", id);
	}
	answer_err(req, err);
}

void dsb_answer_ended(struct http_req *req, struct dsb *s)
{
	sandlot_error_t *err = NULL;
	domain_error_ended(s, &err);
	answer_err(req, err);
}

/* ---- routes ---------------------------------------------------------------------- */

static int create_sandbox(struct http_req *req)
{
	struct daemon *d = req->d;
	struct domain_create c;
	sandlot_error_t *err = NULL;
	if (domain_create_parse(d, req->json, &c, &err) < 0) {
		domain_create_free(&c);
		return answer_err(req, err);
	}
	struct domain_created out;
	struct dsb *s = domain_create(d, &c, &out, &err);
	domain_create_free(&c);
	if (out.pool)
		http_set_header(req, "Sandlot-Pool", out.pool);
	if (!s) {
		if (out.install_error) {
			/* The installers' own error object, with their output. */
			sandlot_error_free(err);
			http_json(req, out.install_status,
				  json_pack("{s:O}", "error", out.install_error));
			domain_created_free(&out);
			return 0;
		}
		domain_created_free(&out);
		return answer_err(req, err);
	}
	json_t *body = dsb_to_json(s);
	if (out.installed) /* what the installers said, once */
		json_object_set(body, "packages_install", out.installed);
	domain_created_free(&out);
	snprintf(req->log_sandbox, sizeof(req->log_sandbox), "%s", s->id);
	dsb_release(d, s);
	return http_json(req, 201, body);
}

static int list_sandboxes(struct http_req *req)
{
	const char *labels[MAX_LABELS + 1];
	size_t nl = http_query_all(req, "label", labels, MAX_LABELS);
	sandlot_error_t *err = NULL;
	json_t *arr = domain_sandbox_list(req->d, http_query(req, "state"),
					  (const char *const *)labels, nl, &err);
	if (!arr)
		return answer_err(req, err);
	return http_json(req, 200, json_pack("{s:o}", "sandboxes", arr));
}

static int get_sandbox(struct http_req *req)
{
	sandlot_error_t *err = NULL;
	struct dsb *s = domain_sandbox_find(req->d, req->params[0], &err);
	if (!s)
		return answer_err(req, err);
	/* A sandbox that moved to another node (archives.h) is that node's
	 * now: 410 sandbox_moved names it. */
	pthread_mutex_lock(&s->lock);
	int moved = dsb_state_ended(s->state) && archive_moved_reason(s->id, s->end_reason, &err);
	pthread_mutex_unlock(&s->lock);
	if (moved) {
		dsb_release(req->d, s);
		return answer_err(req, err);
	}
	http_json(req, 200, dsb_to_json(s));
	dsb_release(req->d, s);
	return 0;
}

static int delete_sandbox(struct http_req *req)
{
	sandlot_error_t *err = NULL;
	if (domain_sandbox_delete(req->d, req->params[0], &err) < 0)
		return answer_err(req, err);
	return http_empty(req, 204);
}

static int keepalive(struct http_req *req)
{
	json_t *body = req->json;
	if (body && !json_is_object(body))
		return http_error(req, 400, "bad_request", "the request body must be a JSON object");
	uint32_t ttl = 0;
	int ttl_given = 0;
	const char *key;
	json_t *v;
	sandlot_error_t *err = NULL;
	json_object_foreach(body, key, v) {
		if (strcmp(key, "ttl_seconds") != 0)
			return http_error(req, 400, "bad_request",
					  "unknown field \"%.64s\" (known: ttl_seconds)", key);
		if (domain_parse_seconds(key, v, &ttl, &err) < 0)
			return answer_err(req, err);
		ttl_given = 1;
	}
	json_t *o = domain_sandbox_keepalive(req->d, req->params[0], ttl_given ? &ttl : NULL, &err);
	if (!o)
		return answer_err(req, err);
	return http_json(req, 200, o);
}

/* A JSON body that may be absent or {}, or hold the listed field only. */
static int body_fields(struct http_req *req, const char *allowed)
{
	json_t *body = req->json;
	if (body && !json_is_object(body)) {
		http_error(req, 400, "bad_request", "the request body must be a JSON object");
		return -1;
	}
	const char *key;
	json_t *v;
	json_object_foreach(body, key, v) {
		if (!allowed || strcmp(key, allowed) != 0) {
			http_error(req, 400, "bad_request", "unknown field \"%.64s\" (known: %s)", key,
				   allowed ? allowed : "none");
			return -1;
		}
	}
	return 0;
}

static int pause_route(struct http_req *req)
{
	if (body_fields(req, NULL) < 0)
		return 0;
	sandlot_error_t *err = NULL;
	json_t *o = domain_sandbox_pause(req->d, req->params[0], &err);
	return o ? http_json(req, 200, o) : answer_err(req, err);
}

static int resume_route(struct http_req *req)
{
	/* {"from_archive": true}: from the archive store when this node does
	 * not hold the sandbox (archives.h). */
	json_t *fa = req->json ? json_object_get(req->json, "from_archive") : NULL;
	if (fa && !json_is_boolean(fa))
		return http_error(req, 400, "bad_request", "field \"from_archive\" must be a boolean");
	if (fa)
		json_object_del(req->json, "from_archive");
	if (body_fields(req, "ttl_seconds") < 0)
		return 0;
	uint32_t ttl = 0;
	json_t *t = req->json ? json_object_get(req->json, "ttl_seconds") : NULL;
	if (t) {
		if (!json_is_integer(t) || json_integer_value(t) < 0 ||
		    json_integer_value(t) > 315360000)
			return http_error(req, 400, "bad_request",
					  "field \"ttl_seconds\" must be an integer between 0 and 315360000");
		ttl = (uint32_t)json_integer_value(t);
	}
	sandlot_error_t *err = NULL;
	json_t *o = json_is_true(fa)
			    ? domain_sandbox_restore(req->d, req->params[0], t ? &ttl : NULL, &err)
			    : domain_sandbox_resume(req->d, req->params[0], t ? &ttl : NULL, &err);
	return o ? http_json(req, 200, o) : answer_err(req, err);
}

const struct http_route sandbox_routes[] = {
	{ "POST", "/v1/sandboxes", HTTP_JSON, create_sandbox, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes", HTTP_NOBODY, list_sandboxes, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes/{}", HTTP_NOBODY, get_sandbox, NULL, NULL, NULL },
	{ "DELETE", "/v1/sandboxes/{}", HTTP_NOBODY, delete_sandbox, NULL, NULL, NULL },
	{ "POST", "/v1/sandboxes/{}/keepalive", HTTP_JSON, keepalive, NULL, NULL, NULL },
	{ 0 },
};

static int snapshot_route(struct http_req *req)
{
	if (http_query(req, "path"))
		return http_error(req, 400, "bad_request",
				  "a snapshot is the whole of /home/user and takes no \"path\" (GET "
				  ".../files/archive?path=DIR archives a part)");
	return files_archive_get(req);
}

/* Kept workspaces (workspaces.c). */
const struct http_route workspace_routes[] = {
	{ "POST", "/v1/sandboxes/{}/pause", HTTP_JSON, pause_route, NULL, NULL, NULL },
	{ "POST", "/v1/sandboxes/{}/resume", HTTP_JSON, resume_route, NULL, NULL, NULL },
	{ "GET", "/v1/sandboxes/{}/snapshot", HTTP_NOBODY, snapshot_route, NULL, NULL, NULL },
	{ 0 },
};
