/* The one place where errors become HTTP answers of the /v1 API.
 *
 * The domain layer (domain.h) and libsandlot report errors with an
 * errno-style status and a message (docs/errors.md); the routes hand them
 * here.  The table below is the whole mapping: status → HTTP status and the
 * "code" of the JSON error.  Details an error carries (the state and end
 * reason of a sandbox) become fields of the error object beside "code" and
 * "message". */
#include <errno.h>
#include <string.h>

#include "daemon/archives.h"
#include "daemon/daemon.h"
#include "daemon/domain.h"
#include "daemon/node.h"

struct errmap {
	int status;      /* errno value */
	int http;
	const char *code;
};

static const struct errmap table[] = {
	{ ENOENT, 404, "not_found" },
	{ EINVAL, 400, "bad_request" },
	{ EISDIR, 400, "bad_request" },
	{ ENOTDIR, 400, "bad_request" },
	{ ENAMETOOLONG, 400, "bad_request" },
	{ ELOOP, 400, "bad_request" },
	{ EXDEV, 400, "bad_request" },
	{ EACCES, 403, "forbidden" },
	{ EPERM, 403, "forbidden" },
	{ EROFS, 403, "forbidden" },
	{ EEXIST, 409, "conflict" },
	{ EBUSY, 409, "conflict" },
	{ ENOTEMPTY, 409, "conflict" },
	{ ETXTBSY, 409, "conflict" },
	{ DOMAIN_EPAUSED, 409, "sandbox_paused" },
	{ DOMAIN_ECTXBUSY, 409, "context_busy" },
	{ DOMAIN_EENDED, 410, "sandbox_ended" },
	{ EPIPE, 410, "sandbox_gone" },
	{ EAGAIN, 429, "too_many_sandboxes" },
	{ ESHUTDOWN, 503, "shutting_down" },
	{ DOMAIN_ENODEFULL, 503, "node_full" },
	{ EMFILE, 503, "out_of_descriptors" },
	{ ENFILE, 503, "out_of_descriptors" },
	{ DOMAIN_EINTERP, 500, "interpreter_failed" },
	{ ENOTSUP, 501, "not_supported" },
	{ ENOSPC, 507, "insufficient_storage" },
	{ EDQUOT, 507, "insufficient_storage" },
	{ EFBIG, 507, "insufficient_storage" },
	/* archives (archives.h) */
	{ ARCHIVE_EMOVED, 410, "sandbox_moved" },
	{ ARCHIVE_EUNAVAILABLE, 503, "archive_store_unavailable" },
	{ ARCHIVE_EREFUSED, 502, "archive_store_refused" },
	{ ARCHIVE_ECORRUPT, 502, "archive_corrupt" },
	{ 0, 0, NULL },
};

int http_status_of(const sandlot_error_t *err, const char **code)
{
	int st = err ? sandlot_error_status(err) : EIO;
	for (const struct errmap *m = table; m->status; m++) {
		if (m->status == st) {
			if (code)
				*code = m->code;
			return m->http;
		}
	}
	if (code)
		*code = "internal";
	return 500;
}

int http_error_from(struct http_req *req, const sandlot_error_t *err)
{
	const char *code;
	int status = http_status_of(err, &code);
	const char *msg = err ? sandlot_error_message(err) : "unknown error";
	json_t *e = json_object();
	json_object_set_new(e, "code", json_string(code));
	json_object_set_new(e, "message", json_text(msg, strlen(msg)));
	/* Nothing was allocated: a proxy may retry the create on another
	 * node at once (docs/fleet.md). */
	if (err && sandlot_error_status(err) == DOMAIN_ENODEFULL)
		http_set_header(req, "Retry-After", "1");
	const char *key, *value;
	for (unsigned i = 0; (key = sandlot__error_detail_at(err, i, &value)); i++)
		json_object_set_new(e, key, value ? json_string(value) : json_null());
	return http_json(req, status, json_pack("{s:o}", "error", e));
}
