/* Fuzz entry point for sandlotd's request validators: the JSON bodies and
 * query parameters of every route (create, exec, kill, keepalive, code,
 * contexts, pause/resume, files, list filters, changes, ports, the port
 * proxy, network policies, the network log, packages, the E2B API...).
 *
 * The real route handlers run against a daemon with no sandbox and
 * `stopping` set, over the HTTP stand-in of http_stub.c: a request that
 * passes validation then gets 503 shutting_down (create, exec) or 404 (no
 * such sandbox), so nothing is ever started.  Input:
 *
 *   up to '\n'      the route, "METHOD PATTERN" as in the route tables
 *                   ("POST /v1/sandboxes/{}/exec"), or "CHECK files-query"
 *                   for the file routes' query checks; anything else
 *                   picks one by a hash of the line
 *   up to '\n'      the query string: name=value pairs split at '&' (not
 *                   percent-decoded: libmicrohttpd has done that already)
 *   up to '\n'      header lines "Name: value" separated by '\r'
 *   the rest        the body (JSON routes: parsed as http.c does; a body
 *                   that is not JSON gets 400 before any handler runs)
 *
 * Oracles: every request gets exactly one answer; no answer is a 5xx but
 * 503 shutting_down (a validator that fails inside, or lets through
 * something the daemon then chokes on, shows as 500); error answers carry
 * {"error": {"code", "message"}} strings; and LeakSanitizer finds nothing
 * a refused request left behind.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"
#include "daemon/e2b_envd.h"
#include "daemon/e2b.h"
#include "daemon/node.h"
#include "fuzz.h"
#include "fuzz_requests.h"

extern const struct http_route code_routes[]; /* code.c */

static void check(int ok)
{
	if (!ok)
		abort();
}

static struct daemon daemon_;
static const struct http_route *routes[128];
static size_t nroutes;

/* Not a route: the file routes' query checks, which the routes make only
 * once they hold a sandbox. */
static int files_query(struct http_req *req)
{
	if (files_check_query(req) == 0)
		http_empty(req, 204);
	return 0;
}

static const struct http_route extra_routes[] = {
	{ "CHECK", "files-query", HTTP_NOBODY, files_query, NULL, NULL, NULL },
	{ 0 },
};

static void setup(void)
{
	const struct http_route *tables[] = { misc_routes, node_routes, sandbox_routes, exec_routes,
					      file_routes, workspace_routes, code_routes, port_routes,
					      proxy_routes, changes_routes, network_routes, package_routes,
					      e2b_envd_routes, e2b_interp_routes, e2b_routes, extra_routes };
	for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
		for (const struct http_route *r = tables[t]; r->method; r++)
			if (nroutes < sizeof(routes) / sizeof(routes[0]))
				routes[nroutes++] = r;
	struct daemon *d = &daemon_;
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->db_lock, NULL);
	pthread_cond_init(&d->reaper_cond, NULL);
	d->cfg.listen_unix = "/nonexistent/sandlot.sock";
	d->cfg.data_dir = "/nonexistent/sandlot-fuzz";
	d->cfg.max_sandboxes = 0;
	d->cfg.default_ttl_s = 3600;
	d->stopping = 1;
	d->started_ms = daemon_now_ms();
}

/* Split [p, end) at sep into NUL-terminated pieces stored in buf (which
 * holds end - p + 1 bytes); "k=v" / "k: v" pairs into kv.  Returns pairs. */
static size_t split_pairs(const char *p, const char *end, char sep, const char *kvsep,
			  char *buf, const char *kv[][2], size_t max)
{
	size_t n = 0, len = (size_t)(end - p);
	memcpy(buf, p, len);
	buf[len] = '\0';
	for (char *save = NULL, *tok = strtok_r(buf, (char[]){ sep, 0 }, &save); tok && n < max;
	     tok = strtok_r(NULL, (char[]){ sep, 0 }, &save)) {
		char *s = strstr(tok, kvsep);
		if (s) {
			*s = '\0';
			s += strlen(kvsep);
		} else {
			s = tok + strlen(tok); /* "?follow" = "" */
		}
		kv[n][0] = tok;
		kv[n][1] = s;
		n++;
	}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, setup);
	if (size > 65536)
		return 0;
	const char *p = (const char *)data, *end = (const char *)data + size;
	const char *r_end = memchr(p, '\n', (size_t)(end - p));
	r_end = r_end ? r_end : end;
	const struct http_route *route = NULL;
	uint32_t hash = 2166136261u;
	for (const char *c = p; c < r_end; c++)
		hash = (hash ^ (uint8_t)*c) * 16777619u;
	for (size_t i = 0; i < nroutes && !route; i++) {
		size_t ml = strlen(routes[i]->method), pl = strlen(routes[i]->pattern);
		if ((size_t)(r_end - p) == ml + 1 + pl && !memcmp(p, routes[i]->method, ml) &&
		    p[ml] == ' ' && !memcmp(p + ml + 1, routes[i]->pattern, pl))
			route = routes[i];
	}
	if (!route)
		route = routes[hash % nroutes];
	p = r_end < end ? r_end + 1 : end;
	const char *q_end = memchr(p, '\n', (size_t)(end - p));
	q_end = q_end ? q_end : end;
	const char *h = q_end < end ? q_end + 1 : end;
	const char *h_end = memchr(h, '\n', (size_t)(end - h));
	h_end = h_end ? h_end : end;
	const char *body = h_end < end ? h_end + 1 : end;
	size_t body_len = (size_t)(end - body);

	struct fuzz_req r = { 0 };
	char *qbuf = malloc((size_t)(q_end - p) + 1), *hbuf = malloc((size_t)(h_end - h) + 1);
	check(qbuf && hbuf);
	r.nquery = split_pairs(p, q_end, '&', "=", qbuf, r.query, FUZZ_MAX_PAIRS);
	r.nheader = split_pairs(h, h_end, '\r', ": ", hbuf, r.header, FUZZ_MAX_PAIRS);
	r.pub.method = route->method;
	r.pub.path = route->pattern;
	r.pub.uri = route->pattern;
	r.pub.route = route->pattern;
	r.pub.d = &daemon_;
	r.pub.client_fd = -1;
	/* Well-formed ids that name nothing. */
	r.pub.params[0] = "sb-fuzzfuzzfuzzfuzzfuzzfuzzfu";
	/* The second capture, picked by the input's length: an exec id or a
	 * context; a port or not one. */
	if (strstr(route->pattern, "/ports/"))
		r.pub.params[1] = size & 1 ? "8080" : "0";
	else
		r.pub.params[1] = size & 1 ? "ex-fuzzfuzzfuzzfuzzfuzzfuzzfu" : "default-python";
	r.pub.nparams = 2;

	int ran = 1;
	if (route->body == HTTP_JSON && body_len > 0) {
		json_error_t jerr;
		r.pub.json = json_loadb(body, body_len, JSON_REJECT_DUPLICATES, &jerr);
		ran = r.pub.json != NULL; /* else http.c answers 400 itself */
	}
	if (ran) {
		int rc = route->handle(&r.pub);
		/* Parked: resumed as though the client had gone, which must end
		 * in an answer after a few turns. */
		for (int turns = 0; r.park_fn; turns++) {
			check(turns < 16);
			http_resume_fn fn = r.park_fn;
			r.park_fn = NULL;
			fn(&r.pub, HTTP_WAKE_GONE);
		}
		if (route->body == HTTP_RAW && rc == 0 && !r.pub.answered && route->abort)
			route->abort(&r.pub); /* begin accepted it: the body never comes */
		else
			check(r.answers == 1);
	}
	if (r.answers) {
		check(r.answers == 1);
		int st = r.pub.status;
		check(st >= 200 && st < 600);
		/* The E2B routes answer in E2B's shapes: {"code": <status>,
		 * "message"}, Connect's {"code": "not_found", "message"}; 501 for
		 * what is not mapped, and 502 for a sandbox the in-sandbox
		 * routes do not know, as E2B's proxy does. */
		int e2b = strncmp(route->pattern, "/e2b/", 5) == 0 || strcmp(route->pattern, "/e2b") == 0;
		check(st < 500 || st == 503 || (e2b && (st == 501 || st == 502)));
		if (st >= 400 && r.body && e2b) {
			json_t *c = json_object_get(r.body, "code");
			check((json_is_string(c) || json_is_integer(c)) &&
			      json_is_string(json_object_get(r.body, "message")));
		} else if (st >= 400 && r.body) {
			json_t *e = json_object_get(r.body, "error");
			check(json_is_string(json_object_get(e, "code")) &&
			      json_is_string(json_object_get(e, "message")));
		}
	}
	if (getenv("FUZZ_VERBOSE")) {
		char *b = r.body ? json_dumps(r.body, JSON_COMPACT) : NULL;
		fprintf(stderr, "%s %s -> %d %.300s\n", route->method, route->pattern, r.pub.status,
			b ? b : "");
		free(b);
	}
	json_decref(r.body);
	json_decref(r.pub.json);
	free(qbuf);
	free(hbuf);
	return 0;
}
