/* Running commands in a sandbox: EXEC streams with output flow control,
 * stdin, signals and timeouts (spec/protocol.md, "Processes"). */
#include "internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "core/sized.h"

/* Return credit to init once this much output has been consumed: fewer
 * CREDIT frames, still well inside the window. */
#define CREDIT_BATCH (64u * 1024)

struct sandlot_proc {
	struct sl_stream s;   /* first: handlers get &p->s */
	sandlot_t *sb;
	sandlot_exec_callbacks_t cb;
	struct sl_timer timer;
	int started, done, stdin_pipe, stdin_closed;
	volatile int timed_out;
	pid_t pid;
	uint32_t stdin_credit;
	uint32_t consumed;    /* output bytes handled but not yet credited back */
	int paused;
	uint64_t start_ns;
	sandlot_exit_t ex;
};

/* stdout and stderr share the exec stream's window (spec: credit is per
 * stream and direction). */
static void grant(struct sandlot_proc *p, int force)
{
	uint32_t c = p->consumed;
	if (c == 0 || p->paused || (!force && c < CREDIT_BATCH))
		return;
	p->consumed = 0;
	sandlot__conn_send_u32(p->s.conn, SL_MSG_CREDIT, p->s.id, SL_TAG_CREDIT, c, NULL);
}

/* Called with conn->lock held. */
static void finish(struct sandlot_proc *p)
{
	if (p->done)
		return;
	sandlot__timer_disarm(&p->timer);
	sandlot__stream_unregister_locked(&p->s);
	p->ex.duration_ms = (sandlot__now_ns() - p->start_ns) / 1000000u;
	p->ex.timed_out = p->timed_out;
	p->done = 1;
	if (p->cb.on_exit)
		p->cb.on_exit(p->cb.userdata, &p->ex);
	pthread_cond_broadcast(&p->s.conn->cond);
}

static void on_frame(struct sl_stream *s, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct sandlot_proc *p = (struct sandlot_proc *)s;
	struct sl_rec_iter it;
	struct sl_rec r;
	switch (h->type) {
	case SL_MSG_STARTED:
		sl_rec_iter_init(&it, payload, h->length);
		while (sl_rec_next(&it, &r) == 1) {
			uint32_t pid;
			if (r.tag == SL_TAG_PID && sl_rec_u32(&r, &pid) == 0)
				__atomic_store_n(&p->pid, (pid_t)pid, __ATOMIC_RELEASE);
		}
		p->started = 1;
		pthread_cond_broadcast(&s->conn->cond); /* sandlot_exec_attach() */
		break;
	case SL_MSG_STDOUT:
	case SL_MSG_STDERR: {
		int stream = h->type == SL_MSG_STDOUT ? SANDLOT_STDOUT : SANDLOT_STDERR;
		if (h->length == 0)
			break;
		int pause = 0;
		if (p->cb.on_output)
			pause = p->cb.on_output(p->cb.userdata, (sandlot_stream_t)stream, payload,
						h->length) == 1;
		p->consumed += h->length;
		if (pause)
			p->paused = 1;
		else
			grant(p, 0);
		break;
	}
	case SL_MSG_CREDIT:
		sl_rec_iter_init(&it, payload, h->length);
		while (sl_rec_next(&it, &r) == 1) {
			uint32_t c;
			if (r.tag == SL_TAG_CREDIT && sl_rec_u32(&r, &c) == 0)
				p->stdin_credit += c;
		}
		pthread_cond_broadcast(&s->conn->cond);
		break;
	case SL_MSG_ERROR: {
		sandlot_error_t *e = NULL;
		sandlot__error_from_frame(&e, payload, h->length, "exec");
		int st = sandlot_error_status(e);
		snprintf(p->ex.error, sizeof(p->ex.error), "%s", sandlot_error_message(e));
		sandlot_error_free(e);
		uint8_t stage = 0;
		sl_rec_iter_init(&it, payload, h->length);
		while (sl_rec_next(&it, &r) == 1)
			if (r.tag == SL_TAG_STAGE)
				sl_rec_u8(&r, &stage);
		p->ex.start_error = st;
		/* As shells do: 127 for a command that is not there, 126 for
		 * anything else that kept it from running. */
		p->ex.exit_code = stage == 'x' && st == ENOENT ? 127 : 126;
		finish(p);
		break;
	}
	case SL_MSG_EXIT:
		sl_rec_iter_init(&it, payload, h->length);
		while (sl_rec_next(&it, &r) == 1) {
			int32_t code;
			uint32_t sig;
			uint64_t n;
			if (r.tag == SL_TAG_EXIT_CODE && sl_rec_i32(&r, &code) == 0)
				p->ex.exit_code = code;
			else if (r.tag == SL_TAG_SIGNAL && sl_rec_u32(&r, &sig) == 0)
				p->ex.signal = (int)sig;
			/* What the sandbox's kernel counted while it ran, as
			 * init reports it (spec/protocol.md, "Processes"). */
			else if (r.tag == SL_TAG_OOM_KILLS && sl_rec_u64(&r, &n) == 0)
				p->ex.oom_killed = n > 0;
			else if (r.tag == SL_TAG_PIDS_REFUSED && sl_rec_u64(&r, &n) == 0)
				p->ex.pids_limited = n > 0;
		}
		finish(p);
		break;
	default:
		break;
	}
}

static void on_lost(struct sl_stream *s)
{
	struct sandlot_proc *p = (struct sandlot_proc *)s;
	/* The sandbox went away under the command: it was killed with it. */
	if (p->ex.exit_code < 0 && !p->ex.signal)
		p->ex.signal = SIGKILL;
	finish(p);
}

static void on_timeout(struct sl_timer *t)
{
	struct sandlot_proc *p = (struct sandlot_proc *)((char *)t - offsetof(struct sandlot_proc, timer));
	p->timed_out = 1;
	sandlot__conn_send_u32(p->s.conn, SL_MSG_KILL, p->s.id, SL_TAG_SIGNAL, SIGKILL, NULL);
}

sandlot_proc_t *sandlot_exec(sandlot_t *sb, const sandlot_exec_spec_t *spec,
			     const sandlot_exec_callbacks_t *cb, sandlot_error_t **err)
{
	sandlot_exec_spec_t spec_buf;
	sandlot_exec_callbacks_t cb_buf;
	if (!spec)
		return sandlot__error(err, EINVAL, "exec: no command given"), NULL;
	if (sandlot__exec_spec_copy(spec, &spec_buf, err) < 0)
		return sandlot__error_wrap(err, "exec"), NULL;
	spec = &spec_buf;
	if (cb) {
		if (sandlot__exec_callbacks_copy(cb, &cb_buf, err) < 0)
			return sandlot__error_wrap(err, "exec"), NULL;
		cb = &cb_buf;
	}
	if (!spec->argv || !spec->argv[0] || !spec->argv[0][0])
		return sandlot__error(err, EINVAL, "exec: no command given"), NULL;
	for (size_t i = 0; spec->env && spec->env[i]; i++) {
		const char *eq = strchr(spec->env[i], '=');
		if (!eq || eq == spec->env[i])
			return sandlot__error(err, EINVAL,
					      "exec: invalid environment entry \"%s\": expected KEY=VALUE",
					      spec->env[i]), NULL;
	}
	struct sandlot_proc *p = calloc(1, sizeof(*p));
	if (!p)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	p->sb = sb;
	if (cb)
		p->cb = *cb;
	p->ex.size = sizeof(p->ex); /* what on_exit gets: the library's own */
	p->ex.exit_code = -1;
	p->stdin_pipe = spec->stdin_pipe;
	p->stdin_credit = SANDLOT_PROTO_WINDOW;
	p->timer.fire = on_timeout;

	pthread_mutex_lock(&sb->env_lock);
	char **env = sandlot__env_merge(sb->env, spec->env);
	pthread_mutex_unlock(&sb->env_lock);
	if (!env) {
		free(p);
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	}
	if (sandlot__stream_register(&sb->conn, &p->s, on_frame, on_lost) < 0) {
		sandlot__strv_free(env);
		free(p);
		return sandlot__error(err, EPIPE, "exec: the sandbox is gone"), NULL;
	}
	sandlot__ref(sb); /* dropped by sandlot_proc_free() */
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_EXEC, 0, p->s.id);
	for (size_t i = 0; spec->argv[i]; i++)
		sl_msg_put_str(&m, SL_TAG_ARG, spec->argv[i]);
	for (size_t i = 0; env[i]; i++)
		sl_msg_put_str(&m, SL_TAG_ENV, env[i]);
	if (spec->cwd)
		sl_msg_put_str(&m, SL_TAG_CWD, spec->cwd);
	sl_msg_put_u8(&m, SL_TAG_STDIN, spec->stdin_pipe ? 1 : 0);
	if (spec->last)
		sl_msg_put_u8(&m, SL_TAG_LAST, 1);
	sandlot__strv_free(env);

	p->start_ns = sandlot__now_ns();
	if (spec->timeout_ms) {
		p->timer.deadline_ms = sandlot__now_ms() + spec->timeout_ms;
		sandlot__timer_arm(&p->timer);
	}
	if (sandlot__conn_send(&sb->conn, &m, err) < 0) {
		sandlot__timer_disarm(&p->timer);
		pthread_mutex_lock(&sb->conn.lock);
		sandlot__stream_unregister_locked(&p->s);
		pthread_mutex_unlock(&sb->conn.lock);
		free(p);
		sandlot__unref(sb);
		return NULL;
	}
	return p;
}

sandlot_proc_t *sandlot_exec_attach(sandlot_t *sb, pid_t pid, const sandlot_exec_callbacks_t *cb,
				    sandlot_error_t **err)
{
	sandlot_exec_callbacks_t cb_buf = { 0 };
	if (pid <= 0)
		return sandlot__error(err, EINVAL, "attach: invalid pid %d", (int)pid), NULL;
	if (cb && sandlot__exec_callbacks_copy(cb, &cb_buf, err) < 0)
		return sandlot__error_wrap(err, "attach"), NULL;
	struct sandlot_proc *p = calloc(1, sizeof(*p));
	if (!p)
		return sandlot__error(err, ENOMEM, "out of memory"), NULL;
	p->sb = sb;
	p->ex.size = sizeof(p->ex);
	p->ex.exit_code = -1;
	p->stdin_pipe = 1;
	p->stdin_credit = SANDLOT_PROTO_WINDOW;
	p->timer.fire = on_timeout;
	p->start_ns = sandlot__now_ns();
	/* No callbacks until init has said STARTED: a refusal is this call's
	 * error, not an on_exit (nothing else can come before STARTED). */
	if (sandlot__stream_register(&sb->conn, &p->s, on_frame, on_lost) < 0) {
		free(p);
		return sandlot__error(err, EPIPE, "attach: the sandbox is gone"), NULL;
	}
	sandlot__ref(sb);
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_ATTACH, 0, p->s.id);
	sl_msg_put_u32(&m, SL_TAG_PID, (uint32_t)pid);
	if (sandlot__conn_send(&sb->conn, &m, err) < 0) {
		pthread_mutex_lock(&sb->conn.lock);
		sandlot__stream_unregister_locked(&p->s);
		pthread_mutex_unlock(&sb->conn.lock);
		free(p);
		sandlot__unref(sb);
		return sandlot__error_wrap(err, "attach"), NULL;
	}
	struct sl_conn *c = &sb->conn;
	pthread_mutex_lock(&c->lock);
	while (!p->started && !p->done)
		pthread_cond_wait(&c->cond, &c->lock);
	int ok = p->started;
	if (ok)
		p->cb = cb_buf;
	pthread_mutex_unlock(&c->lock);
	if (!ok) {
		int st = p->ex.start_error ? p->ex.start_error : EPIPE;
		sandlot__error(err, st, "attach to pid %d: %s", (int)pid,
			       p->ex.error[0] ? p->ex.error : "the sandbox is gone");
		sandlot_proc_free(p);
		return NULL;
	}
	return p;
}

int sandlot_proc_write_stdin(sandlot_proc_t *p, const void *data, size_t len, sandlot_error_t **err)
{
	const uint8_t *d = data;
	struct sl_conn *c = &p->sb->conn;
	if (!p->stdin_pipe)
		return sandlot__error(err, EINVAL, "stdin: the command was started without a stdin pipe");
	while (len > 0) {
		pthread_mutex_lock(&c->lock);
		while (!p->done && p->stdin_credit == 0)
			pthread_cond_wait(&c->cond, &c->lock);
		if (p->done || p->stdin_closed) {
			pthread_mutex_unlock(&c->lock);
			return sandlot__error(err, EPIPE, "stdin: the command has %s",
					      p->done ? "exited" : "its stdin closed");
		}
		size_t n = len;
		if (n > p->stdin_credit)
			n = p->stdin_credit;
		if (n > SANDLOT_PROTO_MAX_DATA)
			n = SANDLOT_PROTO_MAX_DATA;
		p->stdin_credit -= (uint32_t)n;
		uint32_t id = p->s.id;
		pthread_mutex_unlock(&c->lock);
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_STDIN, 0, id);
		sl_msg_put_raw(&m, d, n);
		if (sandlot__conn_send(c, &m, err) < 0)
			return -1;
		d += n;
		len -= n;
	}
	return 0;
}

int sandlot_proc_close_stdin(sandlot_proc_t *p, sandlot_error_t **err)
{
	struct sl_conn *c = &p->sb->conn;
	pthread_mutex_lock(&c->lock);
	int skip = p->done || p->stdin_closed || !p->stdin_pipe;
	p->stdin_closed = 1;
	uint32_t id = p->s.id;
	pthread_mutex_unlock(&c->lock);
	if (skip)
		return 0;
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_STDIN, SANDLOT_PROTO_FLAG_END, id);
	return sandlot__conn_send(c, &m, err);
}

int sandlot_proc_kill(sandlot_proc_t *p, int sig, sandlot_error_t **err)
{
	if (sig <= 0 || sig >= 65)
		return sandlot__error(err, EINVAL, "kill: invalid signal %d", sig);
	struct sl_conn *c = &p->sb->conn;
	pthread_mutex_lock(&c->lock);
	int done = p->done;
	pthread_mutex_unlock(&c->lock);
	if (done)
		return 0;
	return sandlot__conn_send_u32(c, SL_MSG_KILL, p->s.id, SL_TAG_SIGNAL, (uint32_t)sig, err);
}

void sandlot_proc_resume_output(sandlot_proc_t *p)
{
	struct sl_conn *c = &p->sb->conn;
	pthread_mutex_lock(&c->lock);
	p->paused = 0;
	if (!p->done)
		grant(p, 1);
	pthread_mutex_unlock(&c->lock);
}

int sandlot_proc_wait(sandlot_proc_t *p, sandlot_exit_t *out, sandlot_error_t **err)
{
	if (out && sandlot__out_check("sandlot_exit_t", out, sizeof(*out), err) < 0)
		return -1;
	struct sl_conn *c = &p->sb->conn;
	pthread_mutex_lock(&c->lock);
	while (!p->done)
		pthread_cond_wait(&c->cond, &c->lock);
	if (out)
		sandlot__out_put(out, &p->ex, sizeof(p->ex));
	pthread_mutex_unlock(&c->lock);
	return 0;
}

pid_t sandlot_proc_pid(const sandlot_proc_t *p)
{
	return __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
}

void sandlot_proc_free(sandlot_proc_t *p)
{
	if (!p)
		return;
	struct sl_conn *c = &p->sb->conn;
	sandlot_t *sb = p->sb;
	pthread_mutex_lock(&c->lock);
	int done = p->done;
	if (!done)
		p->cb.on_output = NULL; /* nobody consumes output any more */
	pthread_mutex_unlock(&c->lock);
	if (!done) {
		/* Kill first (a paused command is blocked on its full pipe, so it
		 * cannot finish on its own meanwhile), then give init the credit
		 * it needs to drain the pipe and reach EXIT. */
		sandlot_proc_kill(p, SIGKILL, NULL);
		pthread_mutex_lock(&c->lock);
		p->paused = 0;
		if (!p->done)
			grant(p, 1);
		pthread_mutex_unlock(&c->lock);
		sandlot_proc_wait(p, NULL, NULL);
	}
	sandlot__timer_disarm(&p->timer);
	free(p);
	sandlot__unref(sb);
}
