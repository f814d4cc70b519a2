#include "json.h"

#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

json_t *json_text(const char *buf, size_t len)
{
	json_t *s = json_stringn(buf ? buf : "", buf ? len : 0);
	if (s)
		return s;
	char *clean = malloc(len * 3 + 1);
	size_t o = 0;
	if (!clean)
		return json_string("");
	for (size_t i = 0; i < len;) {
		unsigned char c = (unsigned char)buf[i];
		size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
		int ok = n > 0 && i + n <= len && c != 0;
		for (size_t k = 1; ok && k < n; k++)
			ok = ((unsigned char)buf[i + k] >> 6) == 2;
		if (ok && n > 1) {
			/* jansson rejects overlong forms and surrogates for us */
			json_t *probe = json_stringn(buf + i, n);
			ok = probe != NULL;
			json_decref(probe);
		}
		if (ok) {
			memcpy(clean + o, buf + i, n);
			o += n;
			i += n;
		} else {
			memcpy(clean + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
		}
	}
	json_t *r = json_stringn(clean, o);
	free(clean);
	return r ? r : json_string("");
}

json_t *json_time(int64_t ms)
{
	if (ms <= 0)
		return json_null();
	time_t secs = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&secs, &tm);
	char buf[64];
	size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, sizeof(buf) - n, ".%03dZ", (int)(ms % 1000));
	return json_string(buf);
}

const char *json_change_kind(char kind)
{
	return kind == 'c' ? "created" : kind == 'm' ? "modified" : "deleted";
}

const char *json_file_type(char type)
{
	return type == 'f' ? "file" : type == 'd' ? "directory" : type == 'l' ? "symlink" : "other";
}
