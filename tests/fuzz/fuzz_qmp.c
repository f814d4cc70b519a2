/* Fuzz entry point for the vm backend's QMP client (src/backend/vm-qmp.c):
 * what QEMU's monitor sends is untrusted (QEMU runs the guest's code).
 *
 * Input: what the monitor sends, as one stream (at most 64 KiB).  Each
 * line goes through the parser on its own; then the whole stream is played
 * to a client on a socketpair (open, one call, one wait for an event).
 * Oracle: a parsed message has a known kind and the parts its kind
 * promises; every failure has an error with a status and a message; the
 * replay build's ASan checks every read stays in bounds.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend/vm-qmp.h"
#include "fuzz.h"

static void check(int ok)
{
	if (!ok)
		abort();
}

static void check_failure(sandlot_error_t *e)
{
	check(e != NULL);
	check(sandlot_error_status(e) != 0);
	check(sandlot_error_message(e) && *sandlot_error_message(e));
	sandlot_error_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 65536)
		return 0;
	const char *p = (const char *)data, *end = p + size;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = (size_t)((nl ? nl : end) - p);
		struct qmp_msg m;
		sandlot_error_t *e = NULL;
		if (sandlot__qmp_parse(p, len, &m, &e) == 0) {
			check(e == NULL && m.root != NULL);
			check(m.kind >= QMP_GREETING && m.kind <= QMP_EVENT);
			if (m.kind == QMP_ERROR)
				check(m.name && m.desc);
			if (m.kind == QMP_EVENT)
				check(m.name != NULL && (!m.value || json_is_object(m.value)));
			if (m.kind == QMP_RETURN || m.kind == QMP_GREETING)
				check(m.value != NULL);
			json_decref(m.root);
		} else {
			check(sandlot_error_status(e) == EPROTO);
			check_failure(e);
		}
		p += len + 1;
	}

	/* The whole stream to a client: the socket's buffer holds 64 KiB. */
	int sv[2];
	check(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	int buf = 1 << 20;
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	for (size_t off = 0; off < size;) {
		ssize_t k = write(sv[1], data + off, size - off);
		check(k > 0);
		off += (size_t)k;
	}
	shutdown(sv[1], SHUT_WR); /* then EOF: nothing waits for the timeout */
	sandlot_error_t *e = NULL;
	struct sandlot_qmp *q = sandlot__qmp_open(sv[0], 1000, &e);
	if (!q) {
		check_failure(e);
	} else {
		json_t *r = sandlot__qmp_call(q, "query-status", NULL, -1, 1000, &e);
		if (r)
			json_decref(r);
		else
			check_failure(e);
		e = NULL;
		json_t *d = sandlot__qmp_wait_event(q, "MIGRATION", 1000, &e);
		if (d)
			check(json_is_object(d)), json_decref(d);
		else
			check_failure(e);
		sandlot__qmp_close(q);
	}
	close(sv[1]);
	return 0;
}
