/* The E2B-compatible API's control plane (contract in e2b.h): E2B's
 * sandbox routes under /e2b, each parsed here and done by the domain layer
 * (domain.h), answered in E2B's shapes (its OpenAPI spec: Sandbox,
 * SandboxDetail, ListedSandbox, Error).
 *
 * The mapping:
 *   templateID        the image ("base" and "code-interpreter-v1", E2B's
 *                     default templates: the daemon's default image)
 *   timeout (s)       ttl_seconds, counted from the call; no idle timeout
 *   envVars           env
 *   metadata          metadata (sandlotd's rules for keys and values)
 *   autoResume        auto_resume
 *   pause             pause; connect and resume resume a paused sandbox
 *   kill              delete
 *   network.allowPublicTraffic  options "e2b": {"public_traffic": true}:
 *                     the sandbox's host (getHost) needs no token; every
 *                     sandbox created here has the option "e2b", which
 *                     makes every port of its loopback reachable by its
 *                     host (proxy.c)
 *   domain            --e2b-domain (what getHost(port) builds hosts from)
 * A sandbox that has ended (killed, expired) is "not found" here, as in
 * E2B, although /v1 still shows its record for a while. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "common/percent.h"
#include "daemon/daemon.h"
#include "daemon/domain.h"
#include "daemon/e2b.h"
#include "daemon/e2b_envd.h"
#include "daemon/node.h"

#define E2B_DEFAULT_TIMEOUT_S 300   /* the SDKs' documented default (DEFAULT_SANDBOX_TIMEOUT_MS) */
#define E2B_MAX_TIMEOUT_S 315360000 /* ten years: ttl_seconds' limit */
#define E2B_LIST_MAX 100            /* paginationLimit's maximum and default */
#define E2B_MAX_FILTERS 16          /* metadata pairs in a list filter */

/* ---- answers ---------------------------------------------------------------------- */

/* The E2B status of a domain error (domain.h lists them).  An ended sandbox
 * is "not found", as E2B forgets killed sandboxes. */
static int status_of(const sandlot_error_t *err)
{
	switch (sandlot_error_status(err)) {
	case ENOENT:
	case DOMAIN_EENDED:
	case EPIPE:
		return 404;
	case EINVAL:
	case ENAMETOOLONG:
		return 400;
	case EBUSY:
	case EEXIST:
	case DOMAIN_EPAUSED:
		return 409;
	case EAGAIN:
		return 429;
	case ESHUTDOWN:
	case DOMAIN_ENODEFULL:
		return 503;
	case ENOSPC:
	case EDQUOT:
		return 507;
	default:
		return 500;
	}
}

/* Answer err in E2B's shape (http_error() gives it under /e2b) and free it.
 * Returns 0. */
static int answer_err(struct http_req *req, sandlot_error_t *err)
{
	/* As on /v1 (errmap.c): another node may take the create at once. */
	if (err && sandlot_error_status(err) == DOMAIN_ENODEFULL)
		http_set_header(req, "Retry-After", "1");
	http_error(req, status_of(err), NULL, "%s",
		   err ? sandlot_error_message(err) : "out of memory");
	sandlot_error_free(err);
	return 0;
}

static int not_found(struct http_req *req, const char *id)
{
	return http_error(req, 404, NULL, "sandbox \"%.64s\" not found", id);
}

/* ---- records in E2B's shapes -------------------------------------------------------- */

static const char *str_field(json_t *o, const char *name)
{
	const char *v = json_string_value(json_object_get(o, name));
	return v ? v : "";
}

/* The record's state as E2B names it: "running", "paused", or NULL for
 * every other (starting, or ended: not found for E2B). */
static const char *e2b_state(json_t *rec)
{
	const char *st = str_field(rec, "state");
	if (strcmp(st, "running") == 0 || strcmp(st, "paused") == 0)
		return st;
	return NULL;
}

/* o's "envdAccessToken": the sandbox's own access token (e2b.h), which the
 * SDKs send back as X-Access-Token on the calls made inside it. */
static void set_access_token(struct daemon *d, json_t *o, json_t *rec)
{
	if (!o || !d->cfg.token)
		return;
	const char *id = str_field(rec, "id");
	char tok[E2B_ACCESS_TOKEN_LEN + 1];
	e2b_access_token(d->cfg.token, id, strlen(id), tok);
	json_object_set_new(o, "envdAccessToken", json_string(tok));
}

/* The "domain" the SDKs build a port's host from (getHost): --e2b-domain. */
static json_t *domain_json(struct daemon *d)
{
	return d->cfg.e2b_domain ? json_string(d->cfg.e2b_domain) : json_null();
}

/* Sandbox: what create, connect and resume answer. */
static json_t *sandbox_json(struct daemon *d, json_t *rec)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:o}", "templateID",
			      str_field(json_object_get(rec, "options"), "image"), "sandboxID",
			      str_field(rec, "id"), "clientID", "sandlot", "envdVersion",
			      E2B_ENVD_VERSION, "domain", domain_json(d));
	set_access_token(d, o, rec);
	/* The code interpreter SDKs send this one (E2B-Traffic-Access-Token),
	 * not envdAccessToken, on their calls to contexts. */
	json_t *t = o ? json_object_get(o, "envdAccessToken") : NULL;
	if (t)
		json_object_set(o, "trafficAccessToken", t);
	return o;
}

static json_int_t host_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? n : 1;
}

static json_int_t host_memory_mb(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
	return pages > 0 && size > 0 ? (json_int_t)((uint64_t)pages * (uint64_t)size >> 20) : 0;
}

/* SandboxDetail / ListedSandbox: what get and list answer. */
static json_t *detail_json(struct daemon *d, json_t *rec)
{
	json_t *opts = json_object_get(rec, "options");
	const char *state = e2b_state(rec);
	json_t *end = json_object_get(rec, "expires_at");
	if (!json_is_string(end)) /* paused: no TTL runs; when its workspace goes */
		end = json_object_get(rec, "workspace_expires_at");
	if (!json_is_string(end))
		end = json_object_get(rec, "created_at");
	double cpus = json_number_value(json_object_get(opts, "cpus"));
	json_int_t mem = json_integer_value(json_object_get(opts, "memory"));
	json_int_t disk = json_integer_value(json_object_get(opts, "disk"));
	json_t *meta = json_object_get(rec, "metadata");
	json_t *o = json_pack(
		"{s:s, s:s, s:s, s:O, s:O, s:I, s:I, s:I, s:O, s:s, s:s, s:{s:b, s:s}, s:[]}",
		"templateID", str_field(opts, "image"), "sandboxID", str_field(rec, "id"), "clientID",
		"sandlot", "startedAt", json_object_get(rec, "created_at"), "endAt", end, "cpuCount",
		cpus > 0 ? (json_int_t)(cpus + 0.999) : host_cpus(), "memoryMB",
		mem > 0 ? mem >> 20 : host_memory_mb(), "diskSizeMB", disk > 0 ? disk >> 20 : 0,
		"metadata", json_is_object(meta) ? meta : json_object(), "state",
		state ? state : "running", "envdVersion", E2B_ENVD_VERSION, "lifecycle",
		"autoResume", json_is_true(json_object_get(rec, "auto_resume")), "onTimeout", "kill",
		"volumeMounts");
	set_access_token(d, o, rec);
	if (o) {
		json_object_set_new(o, "domain", domain_json(d));
		json_t *e2b = json_object_get(opts, "e2b");
		json_object_set_new(o, "network",
				    json_pack("{s:b}", "allowPublicTraffic",
					      json_is_true(json_object_get(e2b, "public_traffic"))));
	}
	return o;
}

/* The record of sandbox id if E2B would see it (running or paused), else
 * NULL having answered 404 (or the error). */
static json_t *visible_record(struct http_req *req, const char *id)
{
	sandlot_error_t *err = NULL;
	struct dsb *s = domain_sandbox_find(req->d, id, &err);
	if (!s) {
		if (sandlot_error_status(err) == ENOENT) {
			sandlot_error_free(err);
			not_found(req, id);
			return NULL;
		}
		answer_err(req, err);
		return NULL;
	}
	json_t *rec = dsb_to_json(s);
	dsb_release(req->d, s);
	if (!rec) {
		http_error(req, 500, NULL, "out of memory");
		return NULL;
	}
	if (!e2b_state(rec)) {
		json_decref(rec);
		not_found(req, id);
		return NULL;
	}
	return rec;
}

/* ---- request bodies ------------------------------------------------------------------ */

/* The body must be a JSON object or absent (then every field is absent:
 * jansson's json_object_get() of NULL is NULL).  0, or -1 having answered
 * 400. */
static int body_ok(struct http_req *req)
{
	if (req->json && !json_is_object(req->json)) {
		http_error(req, 400, NULL, "the request body must be a JSON object");
		return -1;
	}
	return 0;
}

/* "timeout" in seconds: absent or null → *given 0; else an integer from 1
 * to ten years.  0, or -1 having answered 400. */
static int parse_timeout(struct http_req *req, json_t *body, uint32_t *out, int *given)
{
	json_t *v = json_object_get(body, "timeout");
	*given = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 1 ||
	    json_integer_value(v) > E2B_MAX_TIMEOUT_S) {
		http_error(req, 400, NULL,
			   "\"timeout\" must be a whole number of seconds from 1 to %d "
			   "(timeoutMs is sent rounded up to seconds)",
			   E2B_MAX_TIMEOUT_S);
		return -1;
	}
	*out = (uint32_t)json_integer_value(v);
	*given = 1;
	return 0;
}

/* Whether an option sandlotd does not map has a value that asks for
 * something: absent, null, false, {} and [] ask for nothing. */
static int asks_for_something(json_t *v)
{
	if (!v || json_is_null(v) || json_is_false(v))
		return 0;
	if (json_is_object(v))
		return json_object_size(v) > 0;
	if (json_is_array(v))
		return json_array_size(v) > 0;
	return 1;
}

/* NewSandbox → the body of a /v1 create (a new object), or NULL having
 * answered 400. */
static json_t *native_create_body(struct http_req *req, json_t *body, int *public_traffic)
{
	json_t *t = json_object_get(body, "templateID");
	if (!json_is_string(t) || json_string_length(t) == 0) {
		http_error(req, 400, NULL,
			   "\"templateID\" is required: the name of a sandlot image (\"base\" "
			   "is the daemon's default image)");
		return NULL;
	}
	static const char *const unsupported[][2] = {
		{ "autoPause", "pausing on timeout is not supported: the sandbox is killed" },
		{ "allow_internet_access",
		  "sandboxes have no network by default; set a network policy with sandlotd's "
		  "own API (/v1/sandboxes/{id}/network)" },
		{ "mcp", "the MCP gateway is not supported" },
		{ "iam", "IAM settings are not supported" },
		{ "volumeMounts", "volumes are not supported" },
	};
	for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
		json_t *v = json_object_get(body, unsupported[i][0]);
		/* allow_internet_access: false is what sandlotd does anyway. */
		if (asks_for_something(v)) {
			http_error(req, 400, NULL, "\"%s\" is not supported by sandlotd: %s",
				   unsupported[i][0], unsupported[i][1]);
			return NULL;
		}
	}
	json_t *net = json_object_get(body, "network");
	json_t *pub = json_object_get(net, "allowPublicTraffic");
	if (net && !json_is_null(net)) {
		if (!json_is_object(net)) {
			http_error(req, 400, NULL, "\"network\" must be an object");
			return NULL;
		}
		const char *key;
		json_t *v;
		json_object_foreach(net, key, v) {
			if (strcmp(key, "allowPublicTraffic") == 0) {
				if (!json_is_boolean(v) && !json_is_null(v)) {
					http_error(req, 400, NULL,
						   "\"network.allowPublicTraffic\" must be true or false");
					return NULL;
				}
			} else if (asks_for_something(v)) {
				http_error(req, 400, NULL,
					   "\"network.%.64s\" is not supported by sandlotd: sandboxes have no "
					   "network by default; set a network policy with sandlotd's own API "
					   "(/v1/sandboxes/{id}/network)", key);
				return NULL;
			}
		}
	}
	json_t *ar = json_object_get(body, "autoResume");
	if (ar && !json_is_null(ar) &&
	    (!json_is_object(ar) || !json_is_boolean(json_object_get(ar, "enabled")))) {
		http_error(req, 400, NULL, "\"autoResume\" must be {\"enabled\": true|false}");
		return NULL;
	}
	uint32_t timeout;
	int given;
	if (parse_timeout(req, body, &timeout, &given) < 0)
		return NULL;
	json_t *n = json_pack("{s:I, s:i}", "ttl_seconds",
			      (json_int_t)(given ? timeout : E2B_DEFAULT_TIMEOUT_S),
			      "idle_timeout_seconds", 0);
	if (!n) {
		http_error(req, 500, NULL, "out of memory");
		return NULL;
	}
	const char *tmpl = json_string_value(t);
	/* E2B's default templates: the daemon's default image (no "image"). */
	if (strcmp(tmpl, "base") != 0 && strcmp(tmpl, "code-interpreter-v1") != 0)
		json_object_set(n, "image", t);
	json_t *v;
	if ((v = json_object_get(body, "envVars")) && !json_is_null(v))
		json_object_set(n, "env", v);
	if ((v = json_object_get(body, "metadata")) && !json_is_null(v))
		json_object_set(n, "metadata", v);
	if (json_is_true(json_object_get(ar, "enabled")))
		json_object_set_new(n, "auto_resume", json_true());
	/* Public only when asked for explicitly (E2B's default is public). */
	*public_traffic = json_is_true(pub);
	return n;
}

/* ---- routes: create, get, kill, timeout ------------------------------------------- */

static int create_route(struct http_req *req)
{
	struct daemon *d = req->d;
	if (body_ok(req) < 0)
		return 0;
	json_t *body = req->json;
	int public_traffic = 0;
	json_t *native = native_create_body(req, body, &public_traffic);
	if (!native)
		return 0;
	struct domain_create c;
	sandlot_error_t *err = NULL;
	if (domain_create_parse(d, native, &c, &err) < 0) {
		domain_create_free(&c);
		json_decref(native);
		/* The field names are /v1's (env, metadata, image): say whose. */
		http_error(req, status_of(err), NULL, "invalid sandbox options: %s",
			   sandlot_error_message(err));
		sandlot_error_free(err);
		return 0;
	}
	/* Made here: every port reachable by its host, public if asked. */
	json_object_set_new(c.norm, "e2b", json_pack("{s:b}", "public_traffic", public_traffic));
	struct domain_created out;
	struct dsb *s = domain_create(d, &c, &out, &err);
	domain_create_free(&c);
	json_decref(native);
	domain_created_free(&out);
	if (!s)
		return answer_err(req, err);
	json_t *rec = dsb_to_json(s);
	snprintf(req->log_sandbox, sizeof(req->log_sandbox), "%s", s->id);
	dsb_release(d, s);
	json_t *o = rec ? sandbox_json(d, rec) : NULL;
	json_decref(rec);
	if (!o)
		return http_error(req, 500, NULL, "out of memory");
	return http_json(req, 201, o);
}

static int get_route(struct http_req *req)
{
	json_t *rec = visible_record(req, req->params[0]);
	if (!rec)
		return 0;
	json_t *o = detail_json(req->d, rec);
	json_decref(rec);
	return o ? http_json(req, 200, o) : http_error(req, 500, NULL, "out of memory");
}

static int kill_route(struct http_req *req)
{
	json_t *rec = visible_record(req, req->params[0]);
	if (!rec)
		return 0;
	json_decref(rec);
	sandlot_error_t *err = NULL;
	if (domain_sandbox_delete(req->d, req->params[0], &err) < 0)
		return answer_err(req, err);
	return http_empty(req, 204);
}

static int timeout_route(struct http_req *req)
{
	if (body_ok(req) < 0)
		return 0;
	json_t *body = req->json;
	uint32_t ttl;
	int given;
	if (parse_timeout(req, body, &ttl, &given) < 0)
		return 0;
	if (!given)
		return http_error(req, 400, NULL, "\"timeout\" (seconds) is required");
	json_t *rec = visible_record(req, req->params[0]);
	if (!rec)
		return 0;
	json_decref(rec);
	sandlot_error_t *err = NULL;
	json_t *o = domain_sandbox_keepalive(req->d, req->params[0], &ttl, &err);
	if (!o)
		return answer_err(req, err);
	json_decref(o);
	return http_empty(req, 204);
}

/* ---- routes: pause, resume, connect ------------------------------------------------ */

static int pause_route(struct http_req *req)
{
	/* The body's "memory" (absent: true, as E2B has it; the SDKs send
	 * true unless asked for a files-only pause) keeps a vm sandbox's
	 * running state too (SANDLOT_PAUSE_MEMORY).  An ns sandbox pauses its
	 * files only, whatever it says: its processes end. */
	if (body_ok(req) < 0)
		return 0;
	json_t *m = req->json ? json_object_get(req->json, "memory") : NULL;
	if (m && !json_is_boolean(m))
		return http_error(req, 400, NULL, "\"memory\" must be true or false");
	json_t *rec = visible_record(req, req->params[0]);
	if (!rec)
		return 0;
	int paused = strcmp(str_field(rec, "state"), "paused") == 0;
	int vm = strcmp(str_field(rec, "isolation"), "vm") == 0;
	json_decref(rec);
	if (paused) /* the SDKs read 409 as "was paused already" */
		return http_error(req, 409, NULL, "sandbox \"%.64s\" is already paused",
				  req->params[0]);
	sandlot_error_t *err = NULL;
	unsigned flags = vm && (!m || json_is_true(m)) ? SANDLOT_PAUSE_MEMORY : 0;
	json_t *o = domain_sandbox_pause_with(req->d, req->params[0], flags, &err);
	if (!o)
		return answer_err(req, err);
	json_decref(o);
	return http_empty(req, 204);
}

/* Resume a paused sandbox (ttl: a new timeout, or NULL) and answer 201
 * with its Sandbox. */
static int resume_and_answer(struct http_req *req, const uint32_t *ttl)
{
	sandlot_error_t *err = NULL;
	json_t *rec = domain_sandbox_resume(req->d, req->params[0], ttl, &err);
	if (!rec)
		return answer_err(req, err);
	json_t *o = sandbox_json(req->d, rec);
	json_decref(rec);
	return o ? http_json(req, 201, o) : http_error(req, 500, NULL, "out of memory");
}

/* POST /sandboxes/{id}/resume (deprecated in E2B): a running one is a 409. */
static int resume_route(struct http_req *req)
{
	if (body_ok(req) < 0)
		return 0;
	json_t *body = req->json;
	if (json_is_true(json_object_get(body, "autoPause")))
		return http_error(req, 400, NULL,
				  "\"autoPause\" is not supported by sandlotd: the sandbox is killed "
				  "on timeout");
	uint32_t ttl;
	int given;
	if (parse_timeout(req, body, &ttl, &given) < 0)
		return 0;
	json_t *rec = visible_record(req, req->params[0]);
	if (!rec)
		return 0;
	int running = strcmp(str_field(rec, "state"), "running") == 0;
	json_decref(rec);
	if (running)
		return http_error(req, 409, NULL, "sandbox \"%.64s\" is already running",
				  req->params[0]);
	return resume_and_answer(req, given ? &ttl : NULL);
}

/* POST /sandboxes/{id}/connect, /v2/sandboxes/{id}/connect: a paused
 * sandbox is resumed (201); a running one (200) has its timeout extended
 * to the one given, never shortened. */
static int connect_route(struct http_req *req)
{
	if (body_ok(req) < 0)
		return 0;
	json_t *body = req->json;
	uint32_t ttl;
	int given;
	if (parse_timeout(req, body, &ttl, &given) < 0)
		return 0;
	struct daemon *d = req->d;
	sandlot_error_t *err = NULL;
	struct dsb *s = domain_sandbox_find(d, req->params[0], &err);
	if (!s) {
		if (sandlot_error_status(err) == ENOENT) {
			sandlot_error_free(err);
			return not_found(req, req->params[0]);
		}
		return answer_err(req, err);
	}
	pthread_mutex_lock(&s->lock);
	enum dsb_state st = s->state;
	int64_t expires = s->expires_ms;
	pthread_mutex_unlock(&s->lock);
	dsb_release(d, s);
	if (st == DSB_PAUSED)
		return resume_and_answer(req, given ? &ttl : NULL);
	if (st != DSB_RUNNING)
		return not_found(req, req->params[0]);
	json_t *rec;
	if (given && expires != 0 && daemon_now_ms() + 1000 * (int64_t)ttl > expires)
		rec = domain_sandbox_keepalive(d, req->params[0], &ttl, &err);
	else
		rec = domain_sandbox_keepalive(d, req->params[0], NULL, &err);
	if (!rec)
		return answer_err(req, err);
	json_t *o = sandbox_json(d, rec);
	json_decref(rec);
	return o ? http_json(req, 200, o) : http_error(req, 500, NULL, "out of memory");
}

/* ---- routes: list ------------------------------------------------------------------- */

/* A time as E2B sends it (RFC 3339: "2026-11-24T17:00:00Z", with
 * fractional seconds and a numeric offset allowed) in ms since the epoch.
 * 0, or -1 if s is not one. */
static int parse_time(const char *s, int64_t *ms)
{
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		return -1;
	int64_t frac = 0;
	if (*p == '.') {
		int digits = 0;
		for (p++; *p >= '0' && *p <= '9'; p++, digits++)
			if (digits < 3)
				frac = frac * 10 + (*p - '0');
		if (digits == 0)
			return -1;
		for (; digits < 3; digits++)
			frac *= 10;
	}
	int64_t offset_s = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p == '-' ? -1 : 1;
		if (!(p[1] >= '0' && p[1] <= '9' && p[2] >= '0' && p[2] <= '9' && p[3] == ':' &&
		      p[4] >= '0' && p[4] <= '9' && p[5] >= '0' && p[5] <= '9'))
			return -1;
		offset_s = sign * (((p[1] - '0') * 10 + (p[2] - '0')) * 3600 +
				   ((p[4] - '0') * 10 + (p[5] - '0')) * 60);
		p += 6;
	} else {
		return -1;
	}
	if (*p)
		return -1;
	time_t t = timegm(&tm);
	if (t == (time_t)-1)
		return -1;
	*ms = ((int64_t)t - offset_s) * 1000 + frac;
	return 0;
}

/* One listed sandbox and where it sorts: by start, then id. */
struct listed {
	json_t *rec;
	int64_t started_ms;
	const char *id;
};

static int listed_cmp(const struct listed *a, const struct listed *b)
{
	if (a->started_ms != b->started_ms)
		return a->started_ms < b->started_ms ? -1 : 1;
	return strcmp(a->id, b->id);
}

static int by_start_asc(const void *a, const void *b)
{
	return listed_cmp(a, b);
}

static int by_start_desc(const void *a, const void *b)
{
	return listed_cmp(b, a);
}

/* The filters of a list. */
struct list_query {
	int want_running, want_paused;
	int desc;
	int64_t started_after;    /* ms; INT64_MIN: none */
	const char *template_;
	size_t limit;
	int has_token;            /* continue after (token_ms, token_id) */
	int64_t token_ms;
	char token_id[32];
	char *labels[E2B_MAX_FILTERS];
	size_t nlabels;
};

static void list_query_free(struct list_query *q)
{
	for (size_t i = 0; i < q->nlabels; i++)
		free(q->labels[i]);
}

/* s[0, n) percent-decoded twice, or NULL if either layer is malformed. */
static char *decode_twice(const char *s, size_t n)
{
	char *once = sandlot__percent_decode(s, n);
	if (!once)
		return NULL;
	char *twice = sandlot__percent_decode(once, strlen(once));
	free(once);
	return twice;
}

/* The "metadata" filter, as the SDKs build it: each key and value
 * percent-encoded, the pairs then form-encoded ("k=v&k2=v2", so each
 * key and value is encoded twice; the HTTP layer has decoded the query
 * value itself).  → "k=v" label filters.  0, or -1 having answered 400. */
static int parse_metadata_filter(struct http_req *req, const char *m, struct list_query *q)
{
	while (*m) {
		size_t n = strcspn(m, "&");
		if (n > 0) {
			const char *eq = memchr(m, '=', n);
			if (!eq || eq == m) {
				http_error(req, 400, NULL,
					   "\"metadata\" must be key=value pairs joined by & (got "
					   "\"%.*s\")",
					   (int)(n > 64 ? 64 : n), m);
				return -1;
			}
			if (q->nlabels == E2B_MAX_FILTERS) {
				http_error(req, 400, NULL, "\"metadata\" has more than %d pairs",
					   E2B_MAX_FILTERS);
				return -1;
			}
			char *k = decode_twice(m, (size_t)(eq - m));
			char *v = decode_twice(eq + 1, n - (size_t)(eq - m) - 1);
			char *kv = NULL;
			if (k && v && asprintf(&kv, "%s=%s", k, v) < 0)
				kv = NULL;
			free(k);
			free(v);
			if (!kv) {
				http_error(req, 400, NULL,
					   "\"metadata\": a key or value is not valid percent-encoding");
				return -1;
			}
			q->labels[q->nlabels++] = kv;
		}
		m += n;
		if (*m == '&')
			m++;
	}
	return 0;
}

/* The query of GET /v2/sandboxes (v2 = 1) or GET /sandboxes (running ones,
 * metadata filter only).  0, or -1 having answered 400. */
static int parse_list_query(struct http_req *req, int v2, struct list_query *q)
{
	memset(q, 0, sizeof(*q));
	q->want_running = 1;
	q->want_paused = v2;
	q->desc = 1;
	q->started_after = INT64_MIN;
	q->limit = v2 ? E2B_LIST_MAX : SIZE_MAX;
	const char *m = http_query(req, "metadata");
	if (m && parse_metadata_filter(req, m, q) < 0)
		return -1;
	if (!v2)
		return 0;
	const char *st = http_query(req, "state");
	if (st) {
		q->want_running = q->want_paused = 0;
		while (*st) {
			size_t n = strcspn(st, ",");
			if (n == 7 && strncmp(st, "running", 7) == 0) {
				q->want_running = 1;
			} else if (n == 6 && strncmp(st, "paused", 6) == 0) {
				q->want_paused = 1;
			} else if (n > 0) {
				http_error(req, 400, NULL,
					   "\"state\" must be running, paused or both (comma-separated), "
					   "not \"%.*s\"",
					   (int)(n > 32 ? 32 : n), st);
				return -1;
			}
			st += n;
			if (*st == ',')
				st++;
		}
	}
	const char *o = http_query(req, "order");
	if (o) {
		if (strcmp(o, "asc") == 0) {
			q->desc = 0;
		} else if (strcmp(o, "desc") != 0) {
			http_error(req, 400, NULL, "\"order\" must be asc or desc");
			return -1;
		}
	}
	const char *sa = http_query(req, "startedAfter");
	if (sa && parse_time(sa, &q->started_after) < 0) {
		http_error(req, 400, NULL,
			   "\"startedAfter\" must be an RFC 3339 time (2026-01-31T12:00:00Z)");
		return -1;
	}
	q->template_ = http_query(req, "template");
	const char *l = http_query(req, "limit");
	if (l) {
		char *end;
		errno = 0;
		unsigned long n = strtoul(l, &end, 10);
		if (errno || end == l || *end || l[0] == '-' || n < 1 || n > E2B_LIST_MAX) {
			http_error(req, 400, NULL, "\"limit\" must be an integer from 1 to %d",
				   E2B_LIST_MAX);
			return -1;
		}
		q->limit = n;
	}
	const char *t = http_query(req, "nextToken");
	if (t) {
		/* Our own tokens: "<started ms>_<sandbox id>". */
		char *end;
		errno = 0;
		long long ms = strtoll(t, &end, 10);
		size_t idlen = *end == '_' ? strlen(end + 1) : 0;
		if (errno || end == t || *end != '_' || idlen == 0 || idlen >= sizeof(q->token_id)) {
			http_error(req, 400, NULL, "\"nextToken\" is not a token this API gave");
			return -1;
		}
		q->has_token = 1;
		q->token_ms = ms;
		memcpy(q->token_id, end + 1, idlen + 1);
	}
	return 0;
}

/* Whether the record passes q's filters but the token. */
static int list_wants(struct daemon *d, const struct list_query *q, json_t *rec)
{
	const char *st = e2b_state(rec);
	if (!st || (strcmp(st, "running") == 0 ? !q->want_running : !q->want_paused))
		return 0;
	if (q->template_ && *q->template_) {
		const char *img = str_field(json_object_get(rec, "options"), "image");
		const char *t = q->template_;
		if (strcmp(t, "base") == 0 || strcmp(t, "code-interpreter-v1") == 0)
			t = d->cfg.default_image ? d->cfg.default_image : "host";
		if (strcmp(img, t) != 0)
			return 0;
	}
	return 1;
}

static int answer_list(struct http_req *req, json_t *arr, const char *next_token)
{
	char *text = json_dumps(arr, JSON_COMPACT);
	json_decref(arr);
	if (!text)
		return http_error(req, 500, NULL, "out of memory");
	return e2b_answer_bytes_with(req, "application/json", text, strlen(text),
				     next_token ? "X-Next-Token" : NULL, next_token);
}

static int list_common(struct http_req *req, int v2)
{
	struct daemon *d = req->d;
	struct list_query q;
	if (parse_list_query(req, v2, &q) < 0) {
		list_query_free(&q);
		return 0;
	}
	sandlot_error_t *err = NULL;
	json_t *all = domain_sandbox_list(d, "all", (const char *const *)q.labels, q.nlabels, &err);
	list_query_free(&q);
	if (!all) {
		http_error(req, status_of(err), NULL, "\"metadata\": %s", sandlot_error_message(err));
		sandlot_error_free(err);
		return 0;
	}
	size_t n = json_array_size(all), k = 0;
	struct listed *v = calloc(n ? n : 1, sizeof(*v));
	if (!v) {
		json_decref(all);
		return http_error(req, 500, NULL, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		json_t *rec = json_array_get(all, i);
		int64_t ms;
		if (!list_wants(d, &q, rec) ||
		    parse_time(str_field(rec, "created_at"), &ms) < 0 || ms < q.started_after)
			continue;
		v[k++] = (struct listed){ rec, ms, str_field(rec, "id") };
	}
	qsort(v, k, sizeof(*v), q.desc ? by_start_desc : by_start_asc);
	size_t first = 0;
	if (q.has_token) {
		struct listed tok = { NULL, q.token_ms, q.token_id };
		while (first < k && (q.desc ? listed_cmp(&v[first], &tok) >= 0
					    : listed_cmp(&v[first], &tok) <= 0))
			first++;
	}
	json_t *out = json_array();
	size_t i;
	for (i = first; i < k && json_array_size(out) < q.limit; i++)
		json_array_append_new(out, detail_json(d, v[i].rec));
	char token[64] = "";
	if (i < k && i > first)
		snprintf(token, sizeof(token), "%" PRId64 "_%s", v[i - 1].started_ms, v[i - 1].id);
	free(v);
	json_decref(all);
	return answer_list(req, out, token[0] ? token : NULL);
}

static int list_v1_route(struct http_req *req)
{
	return list_common(req, 0);
}

static int list_v2_route(struct http_req *req)
{
	return list_common(req, 1);
}

/* ---- sandbox hosts (e2b.h) ---------------------------------------------------------- */

/* s->lock held. */
static json_t *e2b_option_locked(struct dsb *s)
{
	return json_object_get(s->options, "e2b");
}

int e2b_sandbox_all_ports(struct dsb *s)
{
	pthread_mutex_lock(&s->lock);
	int all = json_is_object(e2b_option_locked(s));
	pthread_mutex_unlock(&s->lock);
	return all;
}

int e2b_sandbox_public(struct daemon *d, const char *id)
{
	struct dsb *s = dsb_find(d, id);
	if (!s)
		return 0;
	pthread_mutex_lock(&s->lock);
	int pub = json_is_true(json_object_get(e2b_option_locked(s), "public_traffic"));
	pthread_mutex_unlock(&s->lock);
	dsb_release(d, s);
	return pub;
}

/* ---- everything else -------------------------------------------------------------- */

static int unsupported_route(struct http_req *req)
{
	return http_error(req, 501, NULL,
			  "%s %.200s is not supported by sandlotd's E2B-compatible API (what is: "
			  "docs/e2b.md)",
			  req->method, req->path);
}

const struct http_route e2b_routes[] = {
	{ "POST", "/e2b/sandboxes", HTTP_JSON, create_route, NULL, NULL, NULL },
	{ "POST", "/e2b/v2/sandboxes", HTTP_JSON, create_route, NULL, NULL, NULL },
	{ "GET", "/e2b/sandboxes", HTTP_NOBODY, list_v1_route, NULL, NULL, NULL },
	{ "GET", "/e2b/v2/sandboxes", HTTP_NOBODY, list_v2_route, NULL, NULL, NULL },
	{ "GET", "/e2b/sandboxes/{}", HTTP_NOBODY, get_route, NULL, NULL, NULL },
	{ "DELETE", "/e2b/sandboxes/{}", HTTP_NOBODY, kill_route, NULL, NULL, NULL },
	{ "POST", "/e2b/sandboxes/{}/timeout", HTTP_JSON, timeout_route, NULL, NULL, NULL },
	{ "POST", "/e2b/sandboxes/{}/pause", HTTP_JSON, pause_route, NULL, NULL, NULL },
	{ "POST", "/e2b/sandboxes/{}/resume", HTTP_JSON, resume_route, NULL, NULL, NULL },
	{ "POST", "/e2b/sandboxes/{}/connect", HTTP_JSON, connect_route, NULL, NULL, NULL },
	{ "POST", "/e2b/v2/sandboxes/{}/connect", HTTP_JSON, connect_route, NULL, NULL, NULL },
	/* Last: whatever is not mapped, in E2B's shape, named. */
	{ "*", "/e2b", HTTP_NOBODY, unsupported_route, NULL, NULL, NULL },
	{ "*", "/e2b/*", HTTP_NOBODY, unsupported_route, NULL, NULL, NULL },
	{ 0 },
};
