/* Packages over the API: "packages" on create and POST
 * /v1/sandboxes/{id}/packages (docs/network.md).  The install itself is
 * libsandlot's (sandlot_install_packages). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/daemon.h"

void packages_req_free(struct packages_req *p)
{
	free(p->pip);
	free(p->npm);
	p->pip = p->npm = NULL;
}

static int list(const char *key, json_t *v, const char ***out, sandlot_error_t **err)
{
	if (!json_is_array(v))
		return sandlot__error(err, EINVAL, "field \"packages.%s\" must be an array of "
				  "strings", key);
	size_t n = json_array_size(v);
	const char **l = calloc(n + 1, sizeof(*l));
	if (!l)
		return sandlot__error(err, ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(v, i);
		if (!json_is_string(e) || strlen(json_string_value(e)) != json_string_length(e)) {
			free(l);
			return sandlot__error(err, EINVAL, "field \"packages.%s\": entry %zu is "
					  "not a string", key, i);
		}
		l[i] = json_string_value(e);
	}
	*out = l;
	return 0;
}

int packages_parse(json_t *v, struct packages_req *out, sandlot_error_t **err)
{
	memset(out, 0, sizeof(*out));
	if (!json_is_object(v))
		return sandlot__error(err, EINVAL, "field \"packages\" must be an object such as "
				  "{\"pip\": [\"pandas==2.2.0\"], \"npm\": [\"lodash@4\"]}");
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x) {
		const char ***slot = !strcmp(k, "pip") ? &out->pip : !strcmp(k, "npm") ? &out->npm : NULL;
		if (!slot) {
			packages_req_free(out);
			return sandlot__error(err, EINVAL, "unknown field \"packages.%.64s\" "
					  "(known: pip, npm)", k);
		}
		free(*slot);
		*slot = NULL;
		if (list(k, x, slot, err) < 0) {
			packages_req_free(out);
			return -1;
		}
	}
	sandlot_packages_t pk = { .size = sizeof(pk), .pip = out->pip, .npm = out->npm };
	sandlot_error_t *e = NULL;
	if (sandlot_packages_validate(&pk, &e) < 0) {
		sandlot__error(err, EINVAL, "%s", sandlot_error_message(e));
		sandlot_error_free(e);
		packages_req_free(out);
		return -1;
	}
	out->any = (out->pip && out->pip[0]) || (out->npm && out->npm[0]);
	return 0;
}

/* Add what was installed to the record's options.packages (s->lock held). */
static void record_locked(struct dsb *s, const struct packages_req *p)
{
	json_t *o = json_object_get(s->options, "packages");
	if (!json_is_object(o)) {
		o = json_pack("{s:[], s:[]}", "pip", "npm");
		json_object_set_new(s->options, "packages", o);
	}
	for (int m = 0; m < 2; m++) {
		const char **l = m ? p->npm : p->pip;
		json_t *a = json_object_get(o, m ? "npm" : "pip");
		for (size_t i = 0; l && l[i]; i++) {
			size_t j;
			for (j = 0; j < json_array_size(a); j++)
				if (!strcmp(json_string_value(json_array_get(a, j)), l[i]))
					break;
			if (j == json_array_size(a))
				json_array_append_new(a, json_string(l[i]));
		}
	}
}

int packages_install(struct daemon *d, struct dsb *s, sandlot_t *sb, const struct packages_req *p,
		     json_t **result, json_t **error)
{
	*result = *error = NULL;
	sandlot_packages_t pk = { .size = sizeof(pk), .pip = p->pip, .npm = p->npm };
	sandlot_install_result_t ir = { .size = sizeof(ir) };
	sandlot_error_t *err = NULL;
	int r = sandlot_install_packages(sb, &pk, &ir, &err);
	const char *id = s ? s->id : sandlot_id(sb);
	if (r < 0) {
		int st = sandlot_error_status(err);
		const char *code = st == EINVAL ? "bad_request" : st == ENOENT ? "installer_missing"
				   : "package_install_failed";
		*error = json_pack("{s:s, s:s, s:s}", "code", code, "message",
				   sandlot_error_message(err), "output", ir.output);
		daemon_log("packages_failed", "level=warn sandbox=%s ms=%llu", id,
			   (unsigned long long)ir.duration_ms);
		sandlot_error_free(err);
		free(ir.output);
		return st == EINVAL ? 400 : st == EPIPE ? 410 : 422;
	}
	*result = json_pack("{s:s, s:b, s:I}", "output", ir.output, "from_cache", ir.from_cache,
			    "duration_ms", (json_int_t)ir.duration_ms);
	daemon_log("packages", "sandbox=%s ms=%llu from_cache=%d", id,
		   (unsigned long long)ir.duration_ms, ir.from_cache);
	free(ir.output);
	if (s) {
		pthread_mutex_lock(&s->lock);
		record_locked(s, p);
		json_object_set(*result, "packages", json_object_get(s->options, "packages"));
		registry_save(d, s);
		pthread_mutex_unlock(&s->lock);
	}
	return 200;
}

static int post_packages(struct http_req *req)
{
	struct daemon *d = req->d;
	struct packages_req p;
	if (!req->json)
		return http_error(req, 400, "bad_request", "the body must name the packages, e.g. "
				  "{\"pip\": [\"pandas==2.2.0\"]}");
	sandlot_error_t *perr = NULL;
	if (packages_parse(req->json, &p, &perr) < 0) {
		http_error_from(req, perr);
		sandlot_error_free(perr);
		return 0;
	}
	if (!p.any) {
		packages_req_free(&p);
		return http_error(req, 400, "bad_request", "no packages given");
	}
	struct dsb *s = dsb_get(d, req, req->params[0]);
	if (!s) {
		packages_req_free(&p);
		return 0;
	}
	json_t *res, *e;
	int status = packages_install(d, s, s->sb, &p, &res, &e);
	dsb_put(d, s);
	packages_req_free(&p);
	if (e)
		return http_json(req, status, json_pack("{s:o}", "error", e));
	return http_json(req, 200, res);
}

const struct http_route package_routes[] = {
	{ "POST", "/v1/sandboxes/{}/packages", HTTP_JSON, post_packages, NULL, NULL, NULL },
	{ 0 },
};
