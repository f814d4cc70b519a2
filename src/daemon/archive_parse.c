/* What the archive store answers, checked (archive_parse.h). */
#include "daemon/archive_parse.h"

#include <string.h>

static int name_ok(const char *s, size_t max, int strict)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n >= max)
		return 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (strict ? !((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
			   : (c < 0x21 || c > 0x7e || c == '"' || c == '\\'))
			return 0;
	}
	return 1;
}

/* A JSON integer in [lo, hi], into *out. */
static int int_in(json_t *v, json_int_t lo, json_int_t hi, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return 0;
	*out = (uint64_t)json_integer_value(v);
	return 1;
}

#define GEN_MAX ((json_int_t)1 << 53)

int archive__owner_parse(const char *text, size_t len, const char *id, struct archive_owner *o)
{
	memset(o, 0, sizeof(*o));
	json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(j)) {
		json_decref(j);
		return -1;
	}
	const char *sid = json_string_value(json_object_get(j, "sandbox"));
	const char *node = json_string_value(json_object_get(j, "node"));
	const char *inst = json_string_value(json_object_get(j, "instance"));
	const char *state = json_string_value(json_object_get(j, "state"));
	int ok = sid && strcmp(sid, id) == 0 && name_ok(node, sizeof(o->node), 0) &&
		 name_ok(inst, sizeof(o->instance), 1) && state &&
		 (strcmp(state, "archived") == 0 || strcmp(state, "claimed") == 0) &&
		 int_in(json_object_get(j, "generation"), 1, GEN_MAX, &o->generation) &&
		 int_in(json_object_get(j, "archive_generation"), 1, GEN_MAX, &o->archived) &&
		 o->archived <= o->generation;
	if (ok) {
		memcpy(o->node, node, strlen(node) + 1);
		memcpy(o->instance, inst, strlen(inst) + 1);
		o->claimed = strcmp(state, "claimed") == 0;
	}
	json_decref(j);
	return ok ? 0 : -1;
}

json_t *archive__meta_parse(const char *text, size_t len, const char *id, uint64_t gen)
{
	json_t *m = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(m))
		goto bad;
	const char *sid = json_string_value(json_object_get(m, "sandbox"));
	const char *sha = json_string_value(json_object_get(m, "sha256"));
	json_t *md = json_object_get(m, "metadata");
	uint64_t g, bytes, disk;
	int ok = sid && strcmp(sid, id) == 0 &&
		 int_in(json_object_get(m, "generation"), 1, GEN_MAX, &g) && g == gen && sha &&
		 strlen(sha) == 64 && int_in(json_object_get(m, "bytes"), 0, GEN_MAX, &bytes) &&
		 int_in(json_object_get(m, "disk_bytes"), 16 << 20, GEN_MAX, &disk) &&
		 json_is_object(json_object_get(m, "options")) && (!md || json_is_object(md));
	for (size_t i = 0; ok && i < 64; i++)
		ok = (sha[i] >= '0' && sha[i] <= '9') || (sha[i] >= 'a' && sha[i] <= 'f');
	if (ok)
		return m;
bad:
	json_decref(m);
	return NULL;
}

void archive__s3_code(const char *body, size_t len, char *out, size_t n)
{
	out[0] = '\0';
	static const char tag[] = "<Code>";
	const size_t tl = sizeof(tag) - 1;
	if (!body || n == 0)
		return;
	for (size_t i = 0; i + tl <= len; i++) {
		if (memcmp(body + i, tag, tl) != 0)
			continue;
		size_t k = 0, p = i + tl;
		while (p + k < len && k + 1 < n) {
			char c = body[p + k];
			if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			      c == '.' || c == '_' || c == '-'))
				break;
			k++;
		}
		memcpy(out, body + p, k);
		out[k] = '\0';
		return;
	}
}
