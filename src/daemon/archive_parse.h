/* What the archive store answers, checked (archives.h has the layout).
 *
 * The store is shared by every node and reached over the network, so its
 * objects and error answers are parsed as untrusted bytes: JSON by
 * jansson, then every field checked here; fuzzed (fuzz_archive_store.c). */
#ifndef SANDLOT_DAEMON_ARCHIVE_PARSE_H
#define SANDLOT_DAEMON_ARCHIVE_PARSE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define ARCHIVE_NAME_MAX 64 /* node and instance names, with their NUL */

/* owner.json.  "generation" counts every change of hands (archive,
 * restore); "archive_generation" names the objects of the newest archive;
 * "state" is "archived" while that archive is the sandbox's newest state
 * (its holder paused and archived it), "claimed" once a node resumed it
 * from there (its files may have changed since: no other node may take
 * the archive then). */
struct archive_owner {
	uint64_t generation, archived;
	int claimed;                       /* state "claimed" (else "archived") */
	char node[ARCHIVE_NAME_MAX];       /* printable ASCII, no quotes or backslashes */
	char instance[ARCHIVE_NAME_MAX];   /* [a-z0-9] */
};

/* Parse owner.json of sandbox `id` (len bytes of text): 0 with *o filled,
 * or -1 when it is not one sandlot wrote (not JSON, another sandbox's, a
 * field missing, of the wrong type or out of range, names too long). */
int archive__owner_parse(const char *text, size_t len, const char *id, struct archive_owner *o);

/* Parse meta.json of sandbox `id`, generation `gen`: a new JSON object
 * whose "sha256" is 64 lowercase hex digits, "bytes" >= 0, "disk_bytes"
 * >= 16 MiB, "options" an object (and "metadata", when present, one), or
 * NULL. */
json_t *archive__meta_parse(const char *text, size_t len, const char *id, uint64_t gen);

/* S3's error code in an XML error answer ("<Code>X</Code>"), for messages:
 * at most n - 1 characters of [A-Za-z0-9._-] into out, "" when there is
 * none.  body may be NULL. */
void archive__s3_code(const char *body, size_t len, char *out, size_t n);

#endif
