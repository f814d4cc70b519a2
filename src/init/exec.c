/* Processes: EXEC, STARTED, STDOUT/STDERR, STDIN, KILL, CREDIT, EXIT.
 *
 * A command runs in its own session (so its process group is the target of
 * KILL) with pipes for stdout and stderr and, on request, stdin.  Between
 * fork and exec the child reports any failure over a close-on-exec status
 * pipe, so init can answer ERROR ("command not found: foo") instead of
 * STARTED.  Output is read only while the stream has credit; when the
 * command exits, init forwards exactly what its pipes held at that moment
 * (FIONREAD), sends the END frames, then EXIT, without waiting for other
 * holders of the pipes (a background child that inherited stdout).
 */
#include "loop.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/cleanup.h"
#include "linux/syscalls.h"

#define DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

enum { OUT, ERR };

struct exec {
	pid_t pid;        /* also the process group id */
	int pipe[2];      /* stdout, stderr read ends; -1 once END was sent */
	int in;           /* stdin write end; -1 if none or closed */
	int in_pipe;      /* the command was started with a stdin pipe */
	int in_end;       /* the host sent END: close `in` once drained */
	uint8_t *inbuf;   /* stdin not yet written: inbuf[inoff..inlen) */
	size_t inoff, inlen;
	int reaped, wstatus;
	size_t left[2];   /* after reaping: bytes still to forward per pipe */
};

/* Stages of the child, reported with errno over the status pipe. */
enum { STAGE_SETUP = 1, STAGE_PRIVS, STAGE_CWD, STAGE_EXEC };

struct child_report {
	int stage;
	int err;
};

/* --- in the child ------------------------------------------------------- */

static void try_exec(const char *path, char *const argv[], char *const envp[])
{
	execve(path, argv, envp);
	if (errno != ENOEXEC)
		return;
	/* Like execvp: a file without a #! line is a shell script. */
	size_t argc = 0;
	while (argv[argc])
		argc++;
	char *sh_argv[argc + 2];
	sh_argv[0] = (char *)"/bin/sh";
	sh_argv[1] = (char *)path;
	for (size_t i = 1; i <= argc; i++)
		sh_argv[i + 1] = argv[i];
	execve("/bin/sh", sh_argv, envp);
	errno = ENOEXEC;
}

/* execvpe() with the search PATH taken from the command's own environment
 * (glibc's execvpe would use init's).  Returns only on failure, with errno
 * EACCES if some candidate was not executable, else the error of the first
 * hard failure, else ENOENT. */
static void exec_search(char *const argv[], char *const envp[])
{
	const char *file = argv[0];
	if (!*file) {
		errno = ENOENT;
		return;
	}
	if (strchr(file, '/')) {
		try_exec(file, argv, envp);
		return;
	}
	const char *path = DEFAULT_PATH;
	for (char *const *e = envp; *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0) {
			path = *e + 5;
			break;
		}
	size_t flen = strlen(file);
	if (flen > NAME_MAX) {
		errno = ENAMETOOLONG;
		return;
	}
	int eacces = 0;
	char buf[PATH_MAX];
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		size_t dlen = (size_t)(end - p);
		if (dlen + 1 + flen + 1 <= sizeof(buf)) {
			/* An empty element means the current directory. */
			memcpy(buf, p, dlen);
			buf[dlen] = '/';
			memcpy(buf + dlen + 1, file, flen + 1);
			try_exec(dlen ? buf : file, argv, envp);
			switch (errno) {
			case EACCES:
				eacces = 1;
				break;
			case ENOENT:
			case ENOTDIR:
			case ESTALE:
			case ENODEV:
			case ETIMEDOUT:
				break;
			default:
				return;
			}
		}
		if (!*end)
			break;
		p = end;
	}
	errno = eacces ? EACCES : ENOENT;
}

static __attribute__((noreturn)) void child_fail(int status_fd, int stage)
{
	struct child_report r = { stage, errno };
	ssize_t w = write(status_fd, &r, sizeof(r));
	(void)w;
	_exit(127);
}

/* Runs in the forked child; never returns.  The status pipe becomes fd 3
 * (close-on-exec) so that one close_range can drop everything else. */
static __attribute__((noreturn)) void child(const struct init_config *cfg, int fd_in, int fd_out,
					    int fd_err, int fd_status, const char *cwd,
					    char *const argv[], char *const envp[])
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	for (int sig = 1; sig < NSIG; sig++)
		signal(sig, SIG_DFL); /* SIGPIPE was ignored by init */

	if (setsid() < 0)
		child_fail(fd_status, STAGE_SETUP);
	/* All of these are >= 3 (init keeps 0-2 open), so the dup2 calls
	 * cannot clobber one another. */
	if (dup2(fd_in, 0) < 0 || dup2(fd_out, 1) < 0 || dup2(fd_err, 2) < 0)
		child_fail(fd_status, STAGE_SETUP);
	if (fd_status != 3) {
		if (dup3(fd_status, 3, O_CLOEXEC) < 0)
			child_fail(fd_status, STAGE_SETUP);
		fd_status = 3;
	}
	/* Before dropping privileges: the seccomp filter need not allow
	 * close_range. */
	if (sys_close_range(4, ~0U, 0) < 0)
		for (int fd = 4; fd < 1024; fd++)
			close(fd);

	if (init_drop_privileges(cfg) < 0)
		child_fail(fd_status, STAGE_PRIVS);
	/* As the sandbox user, so it cannot end up in a directory it may not
	 * enter. */
	if (chdir(cwd) < 0)
		child_fail(fd_status, STAGE_CWD);
	exec_search(argv, envp);
	child_fail(fd_status, STAGE_EXEC);
}

/* --- the stream --------------------------------------------------------- */

static struct exec *exec_of(struct stream *s)
{
	return s->data;
}

/* Send the END frame for one output pipe and close it. */
static void pipe_end(struct loop *l, struct stream *s, int which)
{
	struct exec *e = exec_of(s);
	if (e->pipe[which] < 0)
		return;
	close(e->pipe[which]);
	e->pipe[which] = -1;
	init__send_data(l, which == OUT ? SL_MSG_STDOUT : SL_MSG_STDERR, SANDLOT_PROTO_FLAG_END,
			s->id, NULL, 0);
}

/* After the command was reaped and both pipes are done: EXIT ends it. */
static void maybe_finish(struct loop *l, struct stream *s)
{
	struct exec *e = exec_of(s);
	if (!e->reaped || e->pipe[OUT] >= 0 || e->pipe[ERR] >= 0)
		return;
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_EXIT, 0, s->id);
	if (WIFEXITED(e->wstatus)) {
		sl_msg_put_i32(&m, SL_TAG_EXIT_CODE, WEXITSTATUS(e->wstatus));
	} else {
		sl_msg_put_u32(&m, SL_TAG_SIGNAL, (uint32_t)WTERMSIG(e->wstatus));
		if (WCOREDUMP(e->wstatus))
			sl_msg_put_u8(&m, SL_TAG_CORE, 1);
	}
	init__queue(l, &m);
	init__stream_close(l, s);
}

static void pipe_read(struct loop *l, struct stream *s, int which)
{
	struct exec *e = exec_of(s);
	size_t want = SANDLOT_PROTO_MAX_DATA;
	if (want > s->credit)
		want = (size_t)s->credit;
	if (e->reaped && want > e->left[which])
		want = e->left[which];
	if (want == 0)
		return;
	ssize_t n = read(e->pipe[which], l->scratch, want);
	if (n > 0) {
		init__send_data(l, which == OUT ? SL_MSG_STDOUT : SL_MSG_STDERR, 0, s->id,
				l->scratch, (size_t)n);
		s->credit -= (size_t)n;
		if (e->reaped) {
			e->left[which] -= (size_t)n;
			if (e->left[which] == 0)
				pipe_end(l, s, which);
		}
	} else if (n == 0) {
		pipe_end(l, s, which);
	} else if (errno != EINTR && (errno != EAGAIN || e->reaped)) {
		pipe_end(l, s, which); /* error, or drained after the exit */
	}
}

/* Write pending stdin into the pipe; return credit for what left the
 * buffer (written, or discarded because the command closed its stdin). */
static void stdin_flush(struct loop *l, struct stream *s)
{
	struct exec *e = exec_of(s);
	size_t done = 0;
	while (e->in >= 0 && e->inoff < e->inlen) {
		ssize_t w = write(e->in, e->inbuf + e->inoff, e->inlen - e->inoff);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		if (w < 0) { /* EPIPE: nobody reads stdin any more */
			close(e->in);
			e->in = -1;
			w = (ssize_t)(e->inlen - e->inoff);
		}
		e->inoff += (size_t)w;
		done += (size_t)w;
	}
	if (e->inoff == e->inlen)
		e->inoff = e->inlen = 0;
	if (e->in_end && e->inlen == 0 && e->in >= 0) {
		close(e->in);
		e->in = -1;
	}
	if (done && !e->reaped)
		init__send_credit(l, s->id, (uint32_t)done);
}

static void on_stdin(struct loop *l, struct stream *s, const struct sl_frame_header *h,
		     const uint8_t *payload)
{
	struct exec *e = exec_of(s);
	if (!e->in_pipe || e->in_end || e->reaped)
		return;
	if (h->flags & SANDLOT_PROTO_FLAG_END)
		e->in_end = 1;
	if (e->in < 0) {
		/* The command closed its stdin: discard, but keep the host's
		 * window open so it is not stuck waiting for credit. */
		if (h->length)
			init__send_credit(l, s->id, h->length);
		return;
	}
	if (e->inlen - e->inoff + h->length > SANDLOT_PROTO_WINDOW) {
		init__fail(l, 1, "host sent STDIN beyond its credit");
		return;
	}
	if (h->length) {
		if (!e->inbuf && !(e->inbuf = malloc(SANDLOT_PROTO_WINDOW))) {
			init__fail(l, 1, "out of memory");
			return;
		}
		if (e->inoff) {
			memmove(e->inbuf, e->inbuf + e->inoff, e->inlen - e->inoff);
			e->inlen -= e->inoff;
			e->inoff = 0;
		}
		memcpy(e->inbuf + e->inlen, payload, h->length);
		e->inlen += h->length;
	}
	stdin_flush(l, s);
}

static void exec_frame(struct loop *l, struct stream *s, const struct sl_frame_header *h,
		       const uint8_t *payload)
{
	struct exec *e = exec_of(s);
	switch (h->type) {
	case SL_MSG_STDIN:
		on_stdin(l, s, h, payload);
		break;
	case SL_MSG_KILL: {
		uint32_t sig = SIGKILL;
		if (init__find_u32(h, payload, SL_TAG_SIGNAL, &sig) < 0)
			return;
		/* Once reaped, the pid (= pgid) may be reused by a new
		 * command: never signal it then. */
		if (!e->reaped && sig > 0 && sig < (uint32_t)NSIG)
			kill(-e->pid, (int)sig);
		break;
	}
	case SL_MSG_CREDIT:
		init__add_credit(s, h, payload);
		break;
	default:
		break;
	}
}

static void exec_poll_fds(struct loop *l, struct stream *s, struct pollfd *fds, size_t *n)
{
	struct exec *e = exec_of(s);
	int can_send = s->credit > 0 && l->qbytes < INIT_QUEUE_HIGH;
	for (int i = 0; i < 2; i++)
		fds[*n + (size_t)i] = (struct pollfd){
			.fd = can_send && e->pipe[i] >= 0 ? e->pipe[i] : -1, .events = POLLIN
		};
	fds[*n + 2] = (struct pollfd){ .fd = e->inoff < e->inlen ? e->in : -1, .events = POLLOUT };
	*n += 3;
}

static void exec_on_poll(struct loop *l, struct stream *s, const struct pollfd *fds)
{
	for (int i = 0; i < 2; i++)
		if (fds[i].fd >= 0 && fds[i].revents)
			pipe_read(l, s, i);
	if (fds[2].fd >= 0 && fds[2].revents)
		stdin_flush(l, s);
	maybe_finish(l, s);
}

static void exec_destroy(struct stream *s)
{
	struct exec *e = exec_of(s);
	for (int i = 0; i < 2; i++)
		if (e->pipe[i] >= 0)
			close(e->pipe[i]);
	if (e->in >= 0)
		close(e->in);
	free(e->inbuf);
	free(e);
}

static const struct stream_ops exec_ops = {
	.frame = exec_frame,
	.poll_fds = exec_poll_fds,
	.on_poll = exec_on_poll,
	.destroy = exec_destroy,
};

/* --- starting a command ------------------------------------------------- */

/* A NULL-terminated vector of strings under construction. */
struct strv {
	char **v;
	size_t n, cap;
};

static int strv_push(struct strv *sv, char *s)
{
	if (sv->n + 2 > sv->cap) {
		size_t cap = sv->cap ? sv->cap * 2 : 16;
		char **v = realloc(sv->v, cap * sizeof(*v));
		if (!v)
			return -1;
		sv->v = v;
		sv->cap = cap;
	}
	sv->v[sv->n++] = s;
	sv->v[sv->n] = NULL;
	return 0;
}

static void strv_free(struct strv *sv)
{
	for (size_t i = 0; i < sv->n; i++)
		free(sv->v[i]);
	free(sv->v);
}

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void send_start_error(struct loop *l, uint32_t id, int err, char stage, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* ERROR for an EXEC that could not start, with the STAGE that failed. */
static void send_start_error(struct loop *l, uint32_t id, int err, char stage, const char *fmt, ...)
{
	char msg[INIT_PATH_MAX + 256];
	va_list ap;
	va_start(ap, fmt);
	if (vsnprintf(msg, sizeof(msg), fmt, ap) < 0)
		msg[0] = '\0';
	va_end(ap);
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_ERROR, 0, id);
	sl_msg_put_u32(&m, SL_TAG_ERRNO, (uint32_t)(err > 0 ? err : EIO));
	sl_msg_put_str(&m, SL_TAG_MESSAGE, msg);
	sl_msg_put_u8(&m, SL_TAG_STAGE, (uint8_t)stage);
	init__queue(l, &m);
}

static void report_start_failure(struct loop *l, uint32_t id, const struct child_report *r,
				 const char *argv0, const char *cwd)
{
	switch (r->stage) {
	case STAGE_EXEC:
		if (r->err == ENOENT)
			send_start_error(l, id, ENOENT, 'x', "command not found: %s", argv0);
		else if (r->err == EACCES)
			send_start_error(l, id, EACCES, 'x', "permission denied: %s", argv0);
		else
			send_start_error(l, id, r->err, 'x', "cannot execute %s: %s", argv0,
					 strerror(r->err));
		break;
	case STAGE_CWD:
		send_start_error(l, id, r->err, 'w', "working directory %s: %s", cwd, strerror(r->err));
		break;
	case STAGE_PRIVS:
		send_start_error(l, id, r->err, 'p', "cannot drop privileges: %s", strerror(r->err));
		break;
	default:
		send_start_error(l, id, r->err, 's', "cannot set up the process: %s", strerror(r->err));
		break;
	}
}

/* Fork and exec; on success the stream is added and STARTED queued, on
 * failure ERROR is queued.  Either way the caller keeps argv/envp. */
static void spawn(struct loop *l, uint32_t id, char *const argv[], char *const envp[],
		  const char *cwd, int stdin_pipe)
{
	cleanup_close int out_r = -1, out_w = -1, err_r = -1, err_w = -1;
	cleanup_close int in_r = -1, in_w = -1, st_r = -1, st_w = -1;
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		goto fail;
	out_r = p[0], out_w = p[1];
	if (pipe2(p, O_CLOEXEC) < 0)
		goto fail;
	err_r = p[0], err_w = p[1];
	if (pipe2(p, O_CLOEXEC) < 0)
		goto fail;
	st_r = p[0], st_w = p[1];
	if (stdin_pipe) {
		if (pipe2(p, O_CLOEXEC) < 0)
			goto fail;
		in_r = p[0], in_w = p[1];
	} else if ((in_r = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		/* No /dev/null: a pipe nobody writes reads as empty too. */
		if (pipe2(p, O_CLOEXEC) < 0)
			goto fail;
		in_r = p[0];
		close(p[1]);
	}
	if (set_nonblock(out_r) < 0 || set_nonblock(err_r) < 0 ||
	    (in_w >= 0 && set_nonblock(in_w) < 0))
		goto fail;

	struct exec *e = calloc(1, sizeof(*e));
	if (!e)
		goto fail;
	pid_t pid = fork();
	if (pid < 0) {
		free(e);
		goto fail;
	}
	if (pid == 0)
		child(l->cfg, in_r, out_w, err_w, st_w, cwd, argv, envp);

	close(steal_fd(&st_w));
	struct child_report rep;
	size_t got = 0;
	while (got < sizeof(rep)) {
		ssize_t n = read(st_r, (char *)&rep + got, sizeof(rep) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got == sizeof(rep)) {
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		free(e);
		report_start_failure(l, id, &rep, argv[0], cwd);
		return;
	}

	e->pid = pid;
	e->pipe[OUT] = steal_fd(&out_r);
	e->pipe[ERR] = steal_fd(&err_r);
	e->in = steal_fd(&in_w);
	e->in_pipe = stdin_pipe;
	if (!init__stream_new(l, id, &exec_ops, e)) {
		kill(-pid, SIGKILL);
		exec_destroy(&(struct stream){ .data = e });
		init__send_error(l, id, ENOMEM, "out of memory");
		return; /* reaped later as an unknown child */
	}
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_STARTED, 0, id);
	sl_msg_put_u32(&m, SL_TAG_PID, (uint32_t)pid);
	init__queue(l, &m);
	return;
fail:
	init__send_error(l, id, errno, "cannot start %s: %s", argv[0], strerror(errno));
}

void init__exec_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct strv argv = { 0 }, envp = { 0 };
	cleanup_free char *cwd = NULL;
	cleanup_free char *abs_cwd = NULL;
	uint8_t stdin_pipe = 0;
	struct sl_rec_iter it;
	struct sl_rec r;
	int rc, err = 0;
	const char *what = NULL;

	sl_rec_iter_init(&it, payload, h->length);
	while ((rc = sl_rec_next(&it, &r)) == 1) {
		char *s;
		switch (r.tag) {
		case SL_TAG_ARG:
		case SL_TAG_ENV:
			if (!(s = init__rec_string(&r, 0)) ||
			    strv_push(r.tag == SL_TAG_ARG ? &argv : &envp, s) < 0) {
				err = errno;
				free(s);
				what = r.tag == SL_TAG_ARG ? "ARG" : "ENV";
				goto out;
			}
			break;
		case SL_TAG_CWD:
			free(cwd);
			if (!(cwd = init__rec_string(&r, 1))) {
				err = errno;
				what = "CWD";
				goto out;
			}
			break;
		case SL_TAG_STDIN:
			if (sl_rec_u8(&r, &stdin_pipe) < 0 || stdin_pipe > 1) {
				err = EINVAL;
				what = "STDIN";
				goto out;
			}
			break;
		default:
			break;
		}
	}
	if (rc < 0) {
		err = EPROTO;
		what = "records";
		goto out;
	}
	if (argv.n == 0) {
		err = EINVAL;
		what = "ARG (none given)";
		goto out;
	}
	abs_cwd = init__abs_path(l, cwd ? cwd : l->cfg->home);
	if (!abs_cwd) {
		err = errno;
		what = "CWD";
		goto out;
	}
	char *no_env[] = { NULL };
	spawn(l, h->stream, argv.v, envp.v ? envp.v : no_env, abs_cwd, stdin_pipe);
out:
	if (err)
		init__send_error(l, h->stream, err, "EXEC: bad %s: %s", what ? what : "request",
				 strerror(err));
	strv_free(&argv);
	strv_free(&envp);
}

/* --- reaping and the end ------------------------------------------------ */

static struct stream *stream_of_pid(struct loop *l, pid_t pid)
{
	for (struct stream *s = l->streams; s; s = s->next)
		if (s->ops == &exec_ops && exec_of(s)->pid == pid && !exec_of(s)->reaped)
			return s;
	return NULL;
}

static void exited(struct loop *l, struct stream *s, int wstatus)
{
	struct exec *e = exec_of(s);
	e->reaped = 1;
	e->wstatus = wstatus;
	/* Forward what the pipes hold now; anything written later by other
	 * holders (background children) is not this command's output. */
	for (int i = 0; i < 2; i++) {
		int n = 0;
		if (e->pipe[i] >= 0 && ioctl(e->pipe[i], FIONREAD, &n) == 0 && n > 0)
			e->left[i] = (size_t)n;
		else
			pipe_end(l, s, i);
	}
	if (e->in >= 0) {
		close(e->in);
		e->in = -1;
	}
	free(e->inbuf);
	e->inbuf = NULL;
	e->inoff = e->inlen = 0;
	maybe_finish(l, s);
}

void init__reap(struct loop *l)
{
	struct signalfd_siginfo si;
	while (read(l->sigfd, &si, sizeof(si)) == sizeof(si))
		;
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid <= 0)
			break;
		struct stream *s = stream_of_pid(l, pid);
		if (s)
			exited(l, s, st); /* others are orphans we adopted */
	}
}

/* Kill our children (adopted orphans included, as we are a subreaper) and
 * their process groups.  Returns how many were found. */
static int kill_children(void)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
	cleanup_fclose FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	int n = 0, pid;
	while (fscanf(f, "%d", &pid) == 1) {
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
		n++;
	}
	return n;
}

void init__kill_all(struct loop *l)
{
	/* As PID 1 of the sandbox's pid namespace, kill(-1) reaches every
	 * process of the sandbox and nothing else.  Outside (unit tests) it
	 * would reach the whole host, so kill only what we started. */
	int pid1 = getpid() == 1;
	if (pid1) {
		kill(-1, SIGKILL);
	} else {
		for (struct stream *s = l->streams; s; s = s->next)
			if (s->ops == &exec_ops && !exec_of(s)->reaped)
				kill(-exec_of(s)->pid, SIGKILL);
		kill_children();
	}
	/* Reap for at most two seconds; as PID 1 our exit kills the rest. */
	struct timespec start, now, nap = { 0, 2 * 1000 * 1000 };
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid > 0) {
			struct stream *s = stream_of_pid(l, pid);
			if (s) {
				exec_of(s)->reaped = 1;
				exec_of(s)->wstatus = st;
			}
			continue;
		}
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0)
			break; /* ECHILD: nothing left */
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec >= 2)
			break;
		if (!pid1)
			kill_children(); /* orphans re-parented to us meanwhile */
		nanosleep(&nap, NULL);
	}
}
