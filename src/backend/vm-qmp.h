/* QEMU's machine protocol (QMP) on a vm sandbox's monitor socket
 * (vm-qmp.c): the vm backend's way to stop, save and restore a guest.
 *
 * QEMU gets one end of a socketpair as `-chardev socket,id=qmp,fd=N -mon
 * chardev=qmp,mode=control`; the other end is handed to
 * sandlot__qmp_open().  Messages are JSON objects, one a line (jansson
 * parses them).  QEMU is not trusted: it runs the guest's code under TCG,
 * so everything it sends is checked (a line is at most QMP_LINE_MAX bytes,
 * a reply must be an object with "return" or "error", anything else is
 * EPROTO) and every wait is bounded by a deadline.
 *
 * Save and restore go through the `fd:` migration transport (QEMU 7.2 has
 * no `file:` URI, and `exec:` would need QEMU to spawn, which its seccomp
 * sandbox denies): the file's descriptor is passed with SCM_RIGHTS beside
 * a `getfd` command, then `migrate` / `migrate-incoming` name it.
 * Completion is QEMU's MIGRATION event (the `events` capability), not a
 * polled query.
 *
 * Not thread safe: one caller at a time per handle. */
#ifndef SANDLOT_BACKEND_VM_QMP_H
#define SANDLOT_BACKEND_VM_QMP_H

#include <jansson.h>
#include <stddef.h>

#include "common/error.h"

/* The longest line (one message) accepted from QEMU. */
#define QMP_LINE_MAX (1u << 20)

struct sandlot_qmp;

/* Take over fd (a connected stream socket to QEMU's QMP monitor, closed by
 * sandlot__qmp_close(), or here on failure), read QEMU's greeting and
 * leave capability negotiation, within timeout_ms.  NULL with err:
 * ETIMEDOUT, EPIPE (QEMU closed it: it exited), EPROTO (not QMP). */
struct sandlot_qmp *sandlot__qmp_open(int fd, unsigned timeout_ms, sandlot_error_t **err);

/* Close the socket and free the handle (NULL: nothing). */
void sandlot__qmp_close(struct sandlot_qmp *q);

/* Run `command` with `args` (an object or NULL; borrowed) and wait for its
 * reply within timeout_ms; with pass_fd >= 0, that descriptor goes along
 * (SCM_RIGHTS; for getfd).  Events that arrive meanwhile are remembered
 * for sandlot__qmp_wait_event().  Returns the reply's "return" value (a
 * new reference), or NULL with err: EIO quoting QEMU's error class and
 * description, ETIMEDOUT, EPIPE, EPROTO. */
json_t *sandlot__qmp_call(struct sandlot_qmp *q, const char *command, json_t *args, int pass_fd,
			  unsigned timeout_ms, sandlot_error_t **err);

/* Wait within timeout_ms for the event `name` (one remembered by an
 * earlier call counts, oldest first) and return its "data" (a new
 * reference; an empty object when it had none).  NULL with err as above. */
json_t *sandlot__qmp_wait_event(struct sandlot_qmp *q, const char *name, unsigned timeout_ms,
				sandlot_error_t **err);

/* Stop the guest and write its whole state (devices and RAM) to out_fd (a
 * file or pipe opened for writing; QEMU gets a copy), within timeout_ms.
 * The guest stays stopped (quit QEMU afterwards, or `cont`).  0, or -1
 * with err (EIO naming what QEMU said when the migration failed). */
int sandlot__qmp_save(struct sandlot_qmp *q, int out_fd, unsigned timeout_ms,
		      sandlot_error_t **err);

/* Load the state in in_fd (what sandlot__qmp_save() wrote) into a QEMU
 * started with the same machine and devices plus `-incoming defer`, and
 * let the guest run, within timeout_ms.  0, or -1 with err. */
int sandlot__qmp_restore(struct sandlot_qmp *q, int in_fd, unsigned timeout_ms,
			 sandlot_error_t **err);

/* ---- the parser, on its own for the fuzz target ---- */

enum qmp_kind { QMP_GREETING = 1, QMP_RETURN, QMP_ERROR, QMP_EVENT };

struct qmp_msg {
	enum qmp_kind kind;
	json_t *root;       /* the whole message (owned) */
	json_t *value;      /* RETURN: "return"; EVENT: "data" or NULL (borrowed from root) */
	const char *name;   /* EVENT: "event"; ERROR: "class" (borrowed) */
	const char *desc;   /* ERROR: "desc" (borrowed) */
};

/* One line QEMU sent (line[0..len), without its newline; any bytes) as a
 * message: 0 with *m filled (free m->root with json_decref), or -1 with
 * err EPROTO saying what was wrong with it. */
int sandlot__qmp_parse(const char *line, size_t len, struct qmp_msg *m, sandlot_error_t **err);

#endif
