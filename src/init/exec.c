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
#include <sys/prctl.h>
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
	uint64_t ev0[INIT_EVENTS_N]; /* the sandbox's counters when it started */
	unsigned ev0_have;           /* init__events_read()'s mask for ev0 */
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

/* A command starts with no signal blocked and every disposition at its
 * default.  execve resets handled signals by itself, and init handles none
 * (SIGCHLD comes through a signalfd); of the ignored ones only init's own
 * are left, SIGPIPE and SIGXFSZ: init reset what the host left ignored
 * when it started (prepare() in loop.c).  Two calls, where each child used
 * to reset all 64. */
static void child_signals(void)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGXFSZ, SIG_DFL);
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
	child_signals();

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

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* The command's stdio pipes belong to the sandbox user, so it can reopen
 * them (`echo x > /dev/stderr`, /proc/self/fd/1) like any process can
 * with pipes it inherited on a normal system. */
static int give_pipes(const struct init_config *cfg, int a, int b, int c)
{
	int fds[3] = { a, b, c };
	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0 && fchown(fds[i], cfg->uid, cfg->gid) < 0)
			return -1;
	return 0;
}

/* --- the warm child ------------------------------------------------------
 *
 * Dropping privileges and loading the seccomp filter (a BPF JIT compile of
 * ~900 instructions) cost more than the fork itself.  So init keeps one
 * child ready: forked, in its own session, its stdio on fresh pipes, its
 * privileges dropped and its filter loaded, blocked reading the next
 * command's spec from a control pipe.  An EXEC then only sends the spec;
 * the next warm child is prepared after STARTED went out.  The warm child
 * is not dumpable, so commands (same uid) cannot reach its descriptors
 * through /proc.
 *
 * Spec on the control pipe: u32 length, then: u8 stdin_pipe, cwd NUL,
 * u32 argc, argv (NUL each), u32 envc, env (NUL each).
 */

static char **unpack_strv(const char **p, const char *end)
{
	uint32_t n;
	if (end - *p < 4)
		return NULL;
	memcpy(&n, *p, 4);
	*p += 4;
	if (n > 1u << 20)
		return NULL;
	char **v = calloc((size_t)n + 1, sizeof(char *));
	if (!v)
		return NULL;
	for (uint32_t i = 0; i < n; i++) {
		const char *nul = memchr(*p, '\0', (size_t)(end - *p));
		if (!nul)
			return NULL;
		v[i] = (char *)*p;
		*p = nul + 1;
	}
	return v;
}

static __attribute__((noreturn)) void warm_child(const struct init_config *cfg, int fd_in, int fd_out,
						 int fd_err, int fd_status, int fd_ctl)
{
	child_signals();
	if (setsid() < 0)
		child_fail(fd_status, STAGE_SETUP);
	if (dup2(fd_in, 0) < 0 || dup2(fd_out, 1) < 0 || dup2(fd_err, 2) < 0 ||
	    dup3(fd_status, 3, O_CLOEXEC) < 0 || dup3(fd_ctl, 4, O_CLOEXEC) < 0)
		child_fail(fd_status, STAGE_SETUP);
	if (sys_close_range(5, ~0U, 0) < 0)
		for (int fd = 5; fd < 1024; fd++)
			close(fd);
	prctl(PR_SET_NAME, "sandlot-spawn", 0, 0, 0);
	if (init_drop_privileges(cfg) < 0)
		child_fail(3, STAGE_PRIVS);
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);

	uint32_t len;
	if (read(4, &len, 4) != 4 || len > SANDLOT_PROTO_MAX_PAYLOAD * 2)
		_exit(0); /* init let us go */
	char *buf = malloc((size_t)len + 1);
	if (!buf)
		child_fail(3, STAGE_SETUP);
	size_t got = 0;
	while (got < len) {
		ssize_t n = read(4, buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(0);
		got += (size_t)n;
	}
	buf[len] = '\0';
	const char *p = buf + 1, *end = buf + len;
	int stdin_pipe = buf[0];
	const char *cwd = p;
	const char *nul = memchr(p, '\0', (size_t)(end - p));
	if (len < 1 || !nul)
		child_fail(3, STAGE_SETUP);
	p = nul + 1;
	char **argv = unpack_strv(&p, end), **envp = unpack_strv(&p, end);
	if (!argv || !envp || !argv[0]) {
		errno = EINVAL;
		child_fail(3, STAGE_SETUP);
	}
	if (!stdin_pipe) {
		int fd = open("/dev/null", O_RDONLY);
		if (fd < 0 || dup2(fd, 0) < 0)
			child_fail(3, STAGE_SETUP);
		close(fd);
	}
	if (chdir(cwd) < 0)
		child_fail(3, STAGE_CWD);
	exec_search(argv, envp);
	child_fail(3, STAGE_EXEC);
}

/* How long after a command started its warm successor is forked, unless
 * the command ends first (see spawn()). */
#define WARM_DELAY_MS 5

/* The host said the command running now is the sandbox's last (EXEC's
 * LAST): no spare process after it.  An EXEC without LAST clears it. */
static int warm_off;

void init__warm_later(struct loop *l, int delay_ms)
{
	if (warm_off)
		return;
	int64_t at = init__now_ms() + delay_ms;
	if (at < 1)
		at = 1;
	if (l->warm_at_ms == 0 || at < l->warm_at_ms)
		l->warm_at_ms = at;
}

struct warm {
	pid_t pid;         /* 0: none ready */
	int in_w, out_r, err_r, st_r, ctl_w;
};
static struct warm warm = { 0, -1, -1, -1, -1, -1 };
/* The last fork for a warm child was refused (the pids limit): do not try
 * again while commands run, only after one ends. */
static int warm_blocked;

static void warm_discard(void)
{
	int *fds[] = { &warm.in_w, &warm.out_r, &warm.err_r, &warm.st_r, &warm.ctl_w };
	for (size_t i = 0; i < SANDLOT_ARRAY_SIZE(fds); i++)
		if (*fds[i] >= 0) {
			close(*fds[i]);
			*fds[i] = -1;
		}
	if (warm.pid > 0)
		kill(warm.pid, SIGKILL); /* reaped as an unknown child */
	warm.pid = 0;
}

/* A pipe whose ends are both at `low` or above (0: wherever). */
static int pipe_from(int p[2], int low)
{
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	for (int i = 0; low > 0 && i < 2; i++) {
		if (p[i] >= low)
			continue;
		int fd = fcntl(p[i], F_DUPFD_CLOEXEC, low);
		if (fd < 0) {
			int e = errno;
			close(p[0]), close(p[1]);
			errno = e;
			return -1;
		}
		close(p[i]);
		p[i] = fd;
	}
	return 0;
}

/* Fork a warm child if none is ready, its pipes at `low` or above.  Best
 * effort: without one, spawn() forks on demand. */
static void warm_fork(const struct init_config *cfg, int low)
{
	if (warm.pid > 0 || cfg->no_warm)
		return;
	int in[2], out[2], err[2], st[2], ctl[2];
	if (pipe_from(in, low) < 0)
		return;
	if (pipe_from(out, low) < 0)
		goto close_in;
	if (pipe_from(err, low) < 0)
		goto close_out;
	if (pipe_from(st, low) < 0)
		goto close_err;
	if (pipe_from(ctl, low) < 0)
		goto close_st;
	if (give_pipes(cfg, in[0], out[1], err[1]) < 0)
		goto close_ctl;
	pid_t pid = fork();
	if (pid == 0)
		warm_child(cfg, in[0], out[1], err[1], st[1], ctl[0]);
	if (pid < 0) {
		warm_blocked = errno == EAGAIN;
		goto close_ctl;
	}
	close(in[0]), close(out[1]), close(err[1]), close(st[1]), close(ctl[0]);
	if (set_nonblock(out[0]) < 0 || set_nonblock(err[0]) < 0 || set_nonblock(in[1]) < 0) {
		warm = (struct warm){ pid, in[1], out[0], err[0], st[0], ctl[1] };
		warm_discard();
		return;
	}
	warm = (struct warm){ pid, in[1], out[0], err[0], st[0], ctl[1] };
	return;
close_ctl:
	close(ctl[0]), close(ctl[1]);
close_st:
	close(st[0]), close(st[1]);
close_err:
	close(err[0]), close(err[1]);
close_out:
	close(out[0]), close(out[1]);
close_in:
	close(in[0]), close(in[1]);
}

void init__warm_prepare(struct loop *l)
{
	warm_fork(l->cfg, 0);
}

/* Before the set-up, descriptors up to INIT_FD_LAST are the host's hand-over
 * (or free where the host passed nothing, and probed as such): the pipes go
 * above them. */
void init__warm_early(const struct init_config *cfg)
{
	warm_fork(cfg, INIT_FD_LAST + 1);
}

/* The warm child died before it was used (killed by a command): forget it. */
static void warm_reaped(pid_t pid)
{
	if (pid == warm.pid) {
		warm.pid = 0;
		warm_discard();
	}
}

static int put_strv(uint8_t **p, char *const v[])
{
	uint32_t n = 0;
	while (v[n])
		n++;
	memcpy(*p, &n, 4);
	*p += 4;
	for (uint32_t i = 0; i < n; i++) {
		size_t k = strlen(v[i]) + 1;
		memcpy(*p, v[i], k);
		*p += k;
	}
	return 0;
}

/* Hand the spec to the warm child.  Returns 0, or -1 if it is gone (the
 * caller falls back to a fresh fork). */
static int warm_send(char *const argv[], char *const envp[], const char *cwd, int stdin_pipe)
{
	size_t len = 1 + strlen(cwd) + 1 + 8;
	for (size_t i = 0; argv[i]; i++)
		len += strlen(argv[i]) + 1;
	for (size_t i = 0; envp[i]; i++)
		len += strlen(envp[i]) + 1;
	uint8_t *buf = malloc(4 + len);
	if (!buf)
		return -1;
	uint32_t l32 = (uint32_t)len;
	memcpy(buf, &l32, 4);
	uint8_t *p = buf + 4;
	*p++ = (uint8_t)(stdin_pipe ? 1 : 0);
	memcpy(p, cwd, strlen(cwd) + 1);
	p += strlen(cwd) + 1;
	put_strv(&p, argv);
	put_strv(&p, envp);
	/* The child is blocked reading: a plain blocking write completes. */
	size_t off = 0, total = 4 + len;
	int rc = 0;
	while (off < total) {
		ssize_t n = write(warm.ctl_w, buf + off, total - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = -1;
			break;
		}
		off += (size_t)n;
	}
	free(buf);
	return rc;
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
	/* What happened in the sandbox while the command ran (counters only
	 * grow; a smaller one would be a reset, which counts as nothing). */
	uint64_t ev[INIT_EVENTS_N];
	unsigned have = init__events_read(ev) & e->ev0_have;
	static const uint16_t tags[INIT_EVENTS_N] = {
		[INIT_EV_OOM] = SL_TAG_OOM_KILLS, [INIT_EV_PIDS] = SL_TAG_PIDS_REFUSED,
	};
	for (int i = 0; i < INIT_EVENTS_N; i++)
		if (have & (1u << i))
			sl_msg_put_u64(&m, tags[i], ev[i] >= e->ev0[i] ? ev[i] - e->ev0[i] : 0);
	init__queue(l, &m);
	init__stream_close(l, s);
	warm_blocked = 0;
	init__warm_later(l, 0);   /* after the EXIT is out */
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


static void send_start_error(struct loop *l, uint32_t id, int err, char stage, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* ERROR for an EXEC that could not start, with the STAGE that failed. */
static void send_start_error(struct loop *l, uint32_t id, int err, char stage, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	init__send_errorv(l, id, err, stage, fmt, ap);
	va_end(ap);
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
					 init__strerror(r->err));
		break;
	case STAGE_CWD:
		send_start_error(l, id, r->err, 'w', "working directory %s: %s", cwd, init__strerror(r->err));
		break;
	case STAGE_PRIVS:
		send_start_error(l, id, r->err, 'p', "cannot drop privileges: %s", init__strerror(r->err));
		break;
	default:
		send_start_error(l, id, r->err, 's', "cannot set up the process: %s", init__strerror(r->err));
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
	pid_t pid = 0;
	struct exec *e = NULL;
	/* The counters before the command can do anything. */
	uint64_t ev0[INIT_EVENTS_N];
	unsigned ev0_have = init__events_read(ev0);

	if (warm.pid > 0) {
		if (warm_send(argv, envp, cwd, stdin_pipe) == 0) {
			pid = warm.pid;
			in_w = warm.in_w, out_r = warm.out_r, err_r = warm.err_r, st_r = warm.st_r;
			close(warm.ctl_w);
			warm = (struct warm){ 0, -1, -1, -1, -1, -1 };
			if (!stdin_pipe)
				close(steal_fd(&in_w));
			e = calloc(1, sizeof(*e));
			if (!e) {
				kill(-pid, SIGKILL);
				goto fail;
			}
			goto started;
		}
		warm_discard();
	}

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
	if (give_pipes(l->cfg, in_w >= 0 ? in_r : -1, out_w, err_w) < 0)
		goto fail;

	e = calloc(1, sizeof(*e));
	if (!e)
		goto fail;
	pid = fork();
	if (pid < 0) {
		free(e);
		goto fail;
	}
	if (pid == 0)
		child(l->cfg, in_r, out_w, err_w, st_w, cwd, argv, envp);

	close(steal_fd(&st_w));
started:;
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
		init__warm_later(l, 0);
		return;
	}

	e->pid = pid;
	memcpy(e->ev0, ev0, sizeof(ev0));
	e->ev0_have = ev0_have;
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
	/* The next command's process gets ready while this one runs, unless
	 * the pids limit is so small that it would take a command's place.
	 * Not at once: the fork, and the new child's privilege drop and BPF
	 * compile, would compete with this command for the CPUs and delay
	 * its exit; a command that ends within WARM_DELAY_MS gets the next
	 * warm child prepared right after its EXIT instead. */
	if (!warm_blocked && (l->cfg->pids == 0 || l->cfg->pids >= 16))
		init__warm_later(l, WARM_DELAY_MS);
	return;
fail:
	init__send_error(l, id, errno, "cannot start %s: %s", argv[0], init__strerror(errno));
}

void init__exec_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct strv argv = { 0 }, envp = { 0 };
	cleanup_free char *cwd = NULL;
	cleanup_free char *abs_cwd = NULL;
	uint8_t stdin_pipe = 0, last = 0;
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
		case SL_TAG_LAST: {
			/* Flags: 0 or 1. */
			uint8_t *flag = r.tag == SL_TAG_STDIN ? &stdin_pipe : &last;
			if (sl_rec_u8(&r, flag) < 0 || *flag > 1) {
				err = EINVAL;
				what = r.tag == SL_TAG_STDIN ? "STDIN" : "LAST";
				goto out;
			}
			break;
		}
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
	abs_cwd = init__abs_path(l, cwd ? cwd : l->cfg->workdir ? l->cfg->workdir : l->cfg->home);
	if (!abs_cwd) {
		err = errno;
		what = "CWD";
		goto out;
	}
	char *no_env[] = { NULL };
	warm_off = last;
	if (last)
		l->warm_at_ms = 0;
	spawn(l, h->stream, argv.v, envp.v ? envp.v : no_env, abs_cwd, stdin_pipe);
out:
	if (err)
		init__send_error(l, h->stream, err, "EXEC: bad %s: %s", what ? what : "request",
				 init__strerror(err));
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
		else
			warm_reaped(pid);
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

/* --- taking a command over after a DETACH ------------------------------- */

void init__attach_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	uint32_t pid = 0;
	int rc = init__find_u32(h, payload, SL_TAG_PID, &pid);
	if (rc <= 0 || pid == 0) {
		init__send_error(l, h->stream, rc < 0 ? EPROTO : EINVAL, "ATTACH: bad PID");
		return;
	}
	struct stream *s = NULL;
	for (struct stream *t = l->streams; t; t = t->next)
		if (t->ops == &exec_ops && t->id == 0 && exec_of(t)->pid == (pid_t)pid &&
		    !exec_of(t)->reaped)
			s = t;
	if (!s) {
		init__send_error(l, h->stream, ESRCH,
				 "no running command with pid %u was left by an earlier host", pid);
		return;
	}
	struct exec *e = exec_of(s);
	if (e->inoff < e->inlen) {
		/* The new host's STDIN window would not fit behind it. */
		init__send_error(l, h->stream, EAGAIN,
				 "pid %u has not read all of the earlier host's input yet", pid);
		return;
	}
	s->id = h->stream;
	s->credit = SANDLOT_PROTO_WINDOW;
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_STARTED, 0, s->id);
	sl_msg_put_u32(&m, SL_TAG_PID, pid);
	init__queue(l, &m);
}
