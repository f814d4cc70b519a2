/* QMP on a vm sandbox's monitor socket (vm-qmp.h). */
#include "backend/vm-qmp.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "common/util.h"

/* Events remembered for sandlot__qmp_wait_event(): beyond this many the
 * oldest go (QEMU sends some nobody waits for: STOP, RESUME, passes). */
#define EVENTS_KEPT 32

struct sandlot_qmp {
	int fd;
	char *buf;                  /* bytes read, not yet a whole line */
	size_t len, cap;
	json_t *events;             /* array of event messages, oldest first */
};

/* ---- parsing ------------------------------------------------------------------------ */

static int bad(sandlot_error_t **err, const char *what)
{
	return sandlot__error(err, EPROTO, "QEMU's monitor sent %s", what);
}

int sandlot__qmp_parse(const char *line, size_t len, struct qmp_msg *m, sandlot_error_t **err)
{
	memset(m, 0, sizeof(*m));
	json_error_t je;
	/* Duplicate keys would make "which one counts" a question. */
	json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return bad(err, "a line that is not JSON");
	if (!json_is_object(root)) {
		json_decref(root);
		return bad(err, "a message that is not an object");
	}
	json_t *v;
	if ((v = json_object_get(root, "return"))) {
		m->kind = QMP_RETURN;
		m->value = v;
	} else if ((v = json_object_get(root, "error"))) {
		const char *cls = json_string_value(json_object_get(v, "class"));
		const char *desc = json_string_value(json_object_get(v, "desc"));
		if (!json_is_object(v) || !cls || !desc) {
			json_decref(root);
			return bad(err, "an error without a class and a description");
		}
		m->kind = QMP_ERROR;
		m->name = cls;
		m->desc = desc;
	} else if ((v = json_object_get(root, "event"))) {
		if (!json_is_string(v)) {
			json_decref(root);
			return bad(err, "an event whose name is not a string");
		}
		json_t *data = json_object_get(root, "data");
		if (data && !json_is_object(data)) {
			json_decref(root);
			return bad(err, "an event whose data is not an object");
		}
		m->kind = QMP_EVENT;
		m->name = json_string_value(v);
		m->value = data;
	} else if ((v = json_object_get(root, "QMP"))) {
		if (!json_is_object(v)) {
			json_decref(root);
			return bad(err, "a greeting that is not an object");
		}
		m->kind = QMP_GREETING;
		m->value = v;
	} else {
		json_decref(root);
		return bad(err, "a message that is no reply, error, event or greeting");
	}
	m->root = root;
	return 0;
}

/* ---- reading and writing ------------------------------------------------------------ */

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The next message, read by the deadline (CLOCK_MONOTONIC ms). */
static int read_msg(struct sandlot_qmp *q, int64_t deadline, struct qmp_msg *m,
		    sandlot_error_t **err)
{
	for (;;) {
		char *nl = q->len ? memchr(q->buf, '\n', q->len) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - q->buf);
			size_t l = n;
			if (l > 0 && q->buf[l - 1] == '\r')
				l--;
			int rc = sandlot__qmp_parse(q->buf, l, m, err);
			memmove(q->buf, nl + 1, q->len - n - 1);
			q->len -= n + 1;
			return rc;
		}
		if (q->len >= QMP_LINE_MAX)
			return bad(err, "a line longer than 1 MiB");
		if (q->cap - q->len < 4096) {
			size_t cap = q->cap ? q->cap * 2 : 8192;
			if (cap > QMP_LINE_MAX + 4096)
				cap = QMP_LINE_MAX + 4096;
			char *b = realloc(q->buf, cap);
			if (!b)
				return sandlot__error(err, ENOMEM, "out of memory");
			q->buf = b;
			q->cap = cap;
		}
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return sandlot__error(err, ETIMEDOUT, "QEMU's monitor did not answer in time");
		struct pollfd p = { .fd = q->fd, .events = POLLIN };
		int r = poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return sandlot__error_errno(err, errno, "wait for QEMU's monitor");
		if (r == 0)
			continue; /* the deadline check above says it */
		ssize_t k = recv(q->fd, q->buf + q->len, q->cap - q->len, MSG_DONTWAIT);
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k < 0)
			return sandlot__error_errno(err, errno, "read QEMU's monitor");
		if (k == 0)
			return sandlot__error(err, EPIPE, "QEMU closed its monitor (it exited)");
		q->len += (size_t)k;
	}
}

/* Send text (one message and its newline), with fd (>= 0) as SCM_RIGHTS. */
static int send_all(struct sandlot_qmp *q, const char *text, size_t len, int fd,
		    sandlot_error_t **err)
{
	size_t off = 0;
	while (off < len) {
		ssize_t k = sandlot__send_with_fd(q->fd, text + off, len - off, off == 0 ? fd : -1);
		if (k < 0)
			return sandlot__error_errno(err, errno, "write to QEMU's monitor");
		off += (size_t)k;
	}
	return 0;
}

static void remember_event(struct sandlot_qmp *q, json_t *msg)
{
	if (json_array_size(q->events) >= EVENTS_KEPT)
		json_array_remove(q->events, 0);
	json_array_append(q->events, msg);
}

/* ---- the calls ---------------------------------------------------------------------- */

struct sandlot_qmp *sandlot__qmp_open(int fd, unsigned timeout_ms, sandlot_error_t **err)
{
	struct sandlot_qmp *q = calloc(1, sizeof(*q));
	if (!q || !(q->events = json_array())) {
		free(q);
		close(fd);
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	}
	q->fd = fd;
	struct qmp_msg m;
	if (read_msg(q, now_ms() + timeout_ms, &m, err) < 0)
		goto fail;
	enum qmp_kind kind = m.kind;
	json_decref(m.root);
	if (kind != QMP_GREETING) {
		bad(err, "no greeting first");
		goto fail;
	}
	json_t *r = sandlot__qmp_call(q, "qmp_capabilities", NULL, -1, timeout_ms, err);
	if (!r)
		goto fail;
	json_decref(r);
	return q;
fail:
	sandlot__error_wrap(err, "QEMU's monitor");
	sandlot__qmp_close(q);
	return NULL;
}

void sandlot__qmp_close(struct sandlot_qmp *q)
{
	if (!q)
		return;
	if (q->fd >= 0)
		close(q->fd);
	json_decref(q->events);
	free(q->buf);
	free(q);
}

json_t *sandlot__qmp_call(struct sandlot_qmp *q, const char *command, json_t *args, int pass_fd,
			  unsigned timeout_ms, sandlot_error_t **err)
{
	int64_t deadline = now_ms() + timeout_ms;
	json_t *req = json_pack("{s:s}", "execute", command);
	if (!req || (args && json_object_set(req, "arguments", args) < 0)) {
		json_decref(req);
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	}
	cleanup_free char *text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	size_t len = text ? strlen(text) : 0;
	cleanup_free char *line = text ? malloc(len + 1) : NULL;
	if (!line)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	memcpy(line, text, len);
	line[len] = '\n';
	if (send_all(q, line, len + 1, pass_fd, err) < 0)
		return NULL;
	for (;;) {
		struct qmp_msg m;
		if (read_msg(q, deadline, &m, err) < 0)
			return sandlot__error_wrap(err, "%s", command), NULL;
		if (m.kind == QMP_EVENT) {
			remember_event(q, m.root);
			json_decref(m.root);
			continue;
		}
		if (m.kind == QMP_RETURN) {
			json_t *r = json_incref(m.value);
			json_decref(m.root);
			return r;
		}
		if (m.kind == QMP_ERROR) {
			sandlot__error(err, EIO, "QEMU refused %s: %s (%s)", command, m.desc, m.name);
			json_decref(m.root);
			return NULL;
		}
		json_decref(m.root);
		return sandlot__error(err, EPROTO, "%s: QEMU's monitor sent a second greeting",
				      command), NULL;
	}
}

json_t *sandlot__qmp_wait_event(struct sandlot_qmp *q, const char *name, unsigned timeout_ms,
				sandlot_error_t **err)
{
	int64_t deadline = now_ms() + timeout_ms;
	for (;;) {
		size_t i;
		json_t *ev;
		json_array_foreach(q->events, i, ev) {
			if (strcmp(json_string_value(json_object_get(ev, "event")), name) != 0)
				continue;
			json_t *data = json_object_get(ev, "data");
			json_t *r = data ? json_incref(data) : json_object();
			json_array_remove(q->events, i);
			if (!r)
				return sandlot__error(err, ENOMEM, "out of memory"), NULL;
			return r;
		}
		struct qmp_msg m;
		if (read_msg(q, deadline, &m, err) < 0)
			return sandlot__error_wrap(err, "wait for QEMU's event %s", name), NULL;
		enum qmp_kind kind = m.kind;
		if (kind == QMP_EVENT)
			remember_event(q, m.root);
		json_decref(m.root);
		if (kind != QMP_EVENT)
			return sandlot__error(err, EPROTO, "QEMU's monitor sent a reply nothing asked "
					      "for"), NULL;
	}
}

/* Until the MIGRATION event says it ended: 0 when it completed, else -1
 * with what query-migrate says went wrong. */
static int migration_wait(struct sandlot_qmp *q, int64_t deadline, sandlot_error_t **err)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		json_t *data = sandlot__qmp_wait_event(q, "MIGRATION",
						       left > 0 ? (unsigned)left : 0, err);
		if (!data)
			return -1;
		const char *status = json_string_value(json_object_get(data, "status"));
		int done = status && strcmp(status, "completed") == 0;
		int failed = status && (strcmp(status, "failed") == 0 ||
					strcmp(status, "cancelled") == 0);
		cleanup_free char *st = status ? strdup(status) : NULL;
		json_decref(data);
		if (done)
			return 0;
		if (!failed)
			continue;
		/* Why: query-migrate's error-desc (best effort). */
		char why[300] = "QEMU gave no reason here (it writes one on its stderr)";
		json_t *info = sandlot__qmp_call(q, "query-migrate", NULL, -1, 5000, NULL);
		const char *desc = json_string_value(json_object_get(info, "error-desc"));
		if (desc)
			snprintf(why, sizeof(why), "%s", desc);
		json_decref(info);
		return sandlot__error(err, EIO, "QEMU's migration %s: %s", st ? st : "failed", why);
	}
}

static int call_ok(struct sandlot_qmp *q, const char *command, json_t *args, int fd,
		   int64_t deadline, sandlot_error_t **err)
{
	int64_t left = deadline - now_ms();
	json_t *r = sandlot__qmp_call(q, command, args, fd, left > 0 ? (unsigned)left : 0, err);
	json_decref(args);
	if (!r)
		return -1;
	json_decref(r);
	return 0;
}

static json_t *events_on(void)
{
	return json_pack("{s:[{s:s,s:b}]}", "capabilities", "capability", "events", "state", 1);
}

int sandlot__qmp_save(struct sandlot_qmp *q, int out_fd, unsigned timeout_ms,
		      sandlot_error_t **err)
{
	int64_t deadline = now_ms() + timeout_ms;
	if (call_ok(q, "stop", NULL, -1, deadline, err) < 0 ||
	    call_ok(q, "migrate-set-capabilities", events_on(), -1, deadline, err) < 0 ||
	    call_ok(q, "getfd", json_pack("{s:s}", "fdname", "sandlot-state"), out_fd, deadline,
		    err) < 0 ||
	    call_ok(q, "migrate", json_pack("{s:s}", "uri", "fd:sandlot-state"), -1, deadline,
		    err) < 0 ||
	    migration_wait(q, deadline, err) < 0)
		return sandlot__error_wrap(err, "save the VM's state");
	return 0;
}

int sandlot__qmp_restore(struct sandlot_qmp *q, int in_fd, unsigned timeout_ms,
			 sandlot_error_t **err)
{
	int64_t deadline = now_ms() + timeout_ms;
	if (call_ok(q, "migrate-set-capabilities", events_on(), -1, deadline, err) < 0 ||
	    call_ok(q, "getfd", json_pack("{s:s}", "fdname", "sandlot-state"), in_fd, deadline,
		    err) < 0 ||
	    call_ok(q, "migrate-incoming", json_pack("{s:s}", "uri", "fd:sandlot-state"), -1,
		    deadline, err) < 0 ||
	    migration_wait(q, deadline, err) < 0 ||
	    call_ok(q, "cont", NULL, -1, deadline, err) < 0)
		return sandlot__error_wrap(err, "restore the VM's state");
	return 0;
}
