/* Archives: moving a paused sandbox between nodes through a store.
 *
 * `sandlotd --archive URL` names a store every node of a fleet shares:
 *
 *   file:///DIR                         a directory (local, or NFS for a fleet)
 *   s3://BUCKET[/PREFIX][?endpoint=URL&region=R]
 *                                       any S3-compatible store, requests
 *                                       signed with SigV4 by libcurl, keys
 *                                       from AWS_ACCESS_KEY_ID and
 *                                       AWS_SECRET_ACCESS_KEY (and
 *                                       AWS_SESSION_TOKEN) in sandlotd's
 *                                       environment
 *
 * and holds, per archived sandbox,
 *
 *   sandboxes/<id>/owner.json           {"sandbox", "node", "instance",
 *                                        "generation"}: who holds it now
 *   sandboxes/<id>/<gen>/workspace.tar  its kept workspace (a POSIX tar)
 *   sandboxes/<id>/<gen>/meta.json      sha256 and size of the tar, the
 *                                       sandbox's options, metadata, times
 *
 * POST /v1/sandboxes/{id}/archive writes a paused sandbox's workspace as
 * generation G+1 and claims owner.json; POST .../resume with
 * {"from_archive": true} on another node downloads the newest generation,
 * checks its sha256, brings the sandbox in under the same id and claims
 * owner.json with G+1 before resuming it.  The generation fences: a node
 * holding a copy of a sandbox it archived checks owner.json before it
 * resumes or archives it again (and at start-up); if the store says
 * another instance holds a newer generation, it deletes its stale copy and
 * answers 410 sandbox_moved (naming the node) from then on; a store it
 * cannot reach then makes the resume fail (503), never serve the copy.
 * ("instance" is a random name of the data directory, so that two daemons
 * that share a node name, or a node re-made with the same name, are told
 * apart.)
 *
 * Errors: 503 archive_store_unavailable (cannot connect, timed out,
 * directory missing), 502 archive_store_refused (credentials or
 * permissions the store rejects), 404 (nothing archived under that id),
 * 502 archive_corrupt (size or sha256 differ from meta.json), 501 (no
 * --archive, or a backend whose kept workspace is not files: vm).
 */
#ifndef SANDLOT_DAEMON_ARCHIVES_H
#define SANDLOT_DAEMON_ARCHIVES_H

#include <jansson.h>
#include <stdint.h>

#include "common/error.h"
#include "daemon/http.h"

struct daemon;
struct dsb;

/* Errors of this module, beside errno's (errmap.c maps them). */
#define ARCHIVE_EUNAVAILABLE ENOLINK   /* the store cannot be reached: 503 */
#define ARCHIVE_EREFUSED EKEYREJECTED  /* the store refuses us: 502 */
#define ARCHIVE_ECORRUPT EBADMSG       /* size or checksum mismatch: 502 */
#define ARCHIVE_EMOVED EREMCHG         /* another node holds it now: 410 */

/* Parse --archive URL (and the credentials an s3:// store needs, from the
 * environment) into d->archives.  Call once, before any thread starts
 * (it initialises libcurl).  0, or -1 with a message for the command line. */
int archive_configure(struct daemon *d, const char *url, sandlot_error_t **err);
/* After the registry is open and loaded: the archive table, this data
 * directory's instance name, and the fence check of every paused sandbox
 * that was archived (a stale copy goes; a store that cannot be reached
 * leaves them for the check before their resume).  Never fails the start;
 * logs what it did. */
void archive_start(struct daemon *d);
void archive_free(struct daemon *d);

/* POST /v1/sandboxes/{id}/archive: a JSON object (the sandbox, with
 * "archive": {"generation", "sha256", "bytes", "url", "node"}), or NULL
 * with err. */
json_t *domain_sandbox_archive(struct daemon *d, const char *id, sandlot_error_t **err);
/* POST /v1/sandboxes/{id}/resume {"from_archive": true}: resume it here,
 * from the store when this node does not hold it (anymore).  As
 * domain_sandbox_resume(). */
json_t *domain_sandbox_restore(struct daemon *d, const char *id, const uint32_t *ttl,
			       sandlot_error_t **err);
/* Before a resume of s (lifecycle.c): 0 when it may run here — never
 * archived, or this instance still holds the newest generation — or -1
 * with err: ARCHIVE_EMOVED after fencing it (its copy deleted), or the
 * store's error when the check could not be made. */
int archive_fence_check(struct daemon *d, struct dsb *s, sandlot_error_t **err);
/* The generation of sandbox id's archive here (0: never archived). */
uint64_t archive_generation(struct daemon *d, const char *id);
/* Fill err with ARCHIVE_EMOVED (and the node) when id was moved away from
 * here; 0 if not (err untouched). */
int archive_moved_error(struct daemon *d, const char *id, sandlot_error_t **err);
/* Fill err with ARCHIVE_EMOVED (and the node) when end_reason says the
 * sandbox was fenced ("moved to node N ..."); 0 if not. */
int archive_moved_reason(const char *id, const char *end_reason, sandlot_error_t **err);
/* The node this daemon names in owner.json (--node-id, else the host name). */
const char *archive_node_name(struct daemon *d);

extern const struct http_route archive_routes[];

#endif
