/* Unit tests of sandlot-init's serving loop: each case runs the real
 * init_start() and init_serve() in a forked child on one end of a socketpair
 * (as fd 3), sends it a CONFIG (the NO_SECCOMP flag, a fresh temporary home
 * and the test's own uid/gid) and speaks the protocol to it from the other
 * end.  tests/unit/init_stubs.c stands in for setup.c.
 *
 * The case process is a child subreaper, so anything init leaves running
 * would come back to it: stop_init() fails the case if something does.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/proto.h"
#include "init/init.h"
#include "linux/syscalls.h"
#include "tap.h"

#define WAIT_MS 10000
#define TEST_PATH "PATH=/usr/local/bin:/usr/bin:/bin"

struct client {
	int fd;
	pid_t init;
	char home[64];
	struct sl_reader rd;
};

struct frame {
	uint8_t type, flags;
	uint32_t stream, len;
	uint8_t *p;
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void path_in(const struct client *c, const char *rel, char *out, size_t n)
{
	snprintf(out, n, "%s/%s", c->home, rel);
}

/* --- starting and stopping init ----------------------------------------- */

/* Options for start_init_opts(). */
struct init_opts {
	rlim_t fsize; /* RLIMIT_FSIZE for init itself (0: none) */
	uid_t uid;    /* --uid and --gid (0: the test's own) */
	/* Files init gets as its event counters (fds 10 and 11), or NULL. */
	const char *oom_events, *pids_events;
	/* The case sends init's first frame itself (else: send_config()). */
	int no_config;
};

/* CONFIG as the cases' host sends it: no seccomp, the case's home, and
 * uid/gid; with `extra` records (a built payload, may be NULL) after. */
static void send_config_with(struct client *c, uid_t uid, const struct sl_msg *extra);
static void send_msg(struct client *c, struct sl_msg *m);

/* Open `path` read-only as descriptor `fd` (in init's child, before it
 * starts): 0, or -1. */
static int open_as(const char *path, int fd)
{
	if (!path)
		return 0;
	int t = open(path, O_RDONLY);
	if (t < 0 || (t != fd && dup2(t, fd) < 0))
		return -1;
	if (t != fd)
		close(t);
	return 0;
}

static void start_init_opts(struct client *c, const struct init_opts *o)
{
	signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	strcpy(c->home, "/tmp/sandlot-init-test-XXXXXX");
	if (!mkdtemp(c->home)) {
		printf("#   mkdtemp: %s\n", strerror(errno));
		exit(1);
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		exit(1);
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		exit(1);
	if (pid == 0) {
		int a = fcntl(sv[1], F_DUPFD, 100);
		if (a < 0 || dup2(a, INIT_FD_PROTO) < 0)
			_exit(99);
		sys_close_range(INIT_FD_PROTO + 1, ~0U, 0);
		if (o && (open_as(o->oom_events, INIT_FD_OOM_EVENTS) < 0 ||
			  open_as(o->pids_events, INIT_FD_PIDS_EVENTS) < 0))
			_exit(97);
		if (o && o->fsize) {
			/* Writing past the limit must fail with EFBIG, not kill:
			 * init ignores SIGXFSZ itself (this disposition is reset
			 * when it starts, like any it inherits). */
			signal(SIGXFSZ, SIG_IGN);
			struct rlimit rl = { o->fsize, o->fsize };
			setrlimit(RLIMIT_FSIZE, &rl);
		}
		/* As main.c does. */
		struct init_config cfg;
		struct sl_reader rd;
		sl_reader_init(&rd);
		if (init_start(&cfg, &rd) < 0) {
			sl_reader_free(&rd);
			_exit(1);
		}
		_exit(init_serve(&cfg, &rd));
	}
	close(sv[1]);
	c->fd = sv[0];
	c->init = pid;
	sl_reader_init(&c->rd);
	/* Without waiting for HELLO, as libsandlot does. */
	if (!o || !o->no_config)
		send_config_with(c, o && o->uid ? o->uid : getuid(), NULL);
}

static void start_init(struct client *c)
{
	start_init_opts(c, NULL);
}

static void send_msg(struct client *c, struct sl_msg *m)
{
	if (sl_msg_finish(m) < 0) {
		CHECK(!"sl_msg_finish");
		return;
	}
	const uint8_t *p = m->buf;
	size_t left = m->len;
	while (left) {
		ssize_t n = send(c->fd, p, left, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		p += n;
		left -= (size_t)n;
	}
	sl_msg_free(m);
}

static void send_config_with(struct client *c, uid_t uid, const struct sl_msg *extra)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_CONFIG, 0, 0);
	sl_msg_put_u32(&m, SL_TAG_FLAGS, SL_CONFIG_NO_SECCOMP);
	sl_msg_put_str(&m, SL_TAG_HOME, c->home);
	sl_msg_put_u32(&m, SL_TAG_UID, (uint32_t)uid);
	sl_msg_put_u32(&m, SL_TAG_GID, (uint32_t)(uid == getuid() ? getgid() : uid));
	if (extra)
		sl_msg_put_raw(&m, extra->buf + SANDLOT_PROTO_HEADER, extra->len - SANDLOT_PROTO_HEADER);
	send_msg(c, &m);
}

static void frame_free(struct frame *f)
{
	free(f->p);
	f->p = NULL;
}

/* The next frame from init: 1, 0 on timeout, -1 at EOF. */
static int next_frame_ms(struct client *c, struct frame *f, int timeout_ms)
{
	uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
	for (;;) {
		struct sl_frame_header h;
		const uint8_t *payload;
		int r = sl_reader_next(&c->rd, &h, &payload);
		if (r < 0)
			return -1;
		if (r == 1) {
			f->type = h.type;
			f->flags = h.flags;
			f->stream = h.stream;
			f->len = h.length;
			f->p = malloc(h.length + 1);
			memcpy(f->p, payload, h.length);
			return 1;
		}
		uint64_t now = now_ms();
		if (now >= deadline)
			return 0;
		struct pollfd p = { c->fd, POLLIN, 0 };
		if (poll(&p, 1, (int)(deadline - now)) <= 0)
			return 0;
		size_t avail;
		uint8_t *sp = sl_reader_space(&c->rd, &avail);
		ssize_t n = read(c->fd, sp, avail);
		if (n <= 0)
			return -1;
		sl_reader_commit(&c->rd, (size_t)n);
	}
}

static int next_frame(struct client *c, struct frame *f)
{
	int r = next_frame_ms(c, f, WAIT_MS);
	if (r == 0)
		printf("#   timed out waiting for a frame\n");
	return r;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

/* Close the connection; init must kill everything and exit with `want`.
 * Nothing may be left over, and the home directory is removed. */
static void stop_init_status(struct client *c, int want)
{
	close(c->fd);
	int st = 0;
	pid_t r;
	uint64_t deadline = now_ms() + WAIT_MS;
	while ((r = waitpid(c->init, &st, WNOHANG)) == 0 && now_ms() < deadline)
		usleep(2000);
	CHECK(r == c->init);
	if (r == c->init) {
		CHECK(WIFEXITED(st));
		CHECK_EQ_INT(WEXITSTATUS(st), want);
	} else {
		kill(c->init, SIGKILL);
		waitpid(c->init, NULL, 0);
	}
	/* Leftovers have been re-parented to us (subreaper): the kernel does
	 * that as init exits, before init can be reaped. */
	int leftovers = 0;
	while ((r = waitpid(-1, &st, WNOHANG)) != -1) {
		if (r == 0) {
			leftovers = 1;
			char path[64];
			snprintf(path, sizeof(path), "/proc/self/task/%d/children", getpid());
			FILE *f = fopen(path, "r");
			int pid;
			while (f && fscanf(f, "%d", &pid) == 1) {
				printf("#   leftover process %d\n", pid);
				kill(pid, SIGKILL);
			}
			if (f)
				fclose(f);
			usleep(10000);
		}
	}
	CHECK(!leftovers);
	sl_reader_free(&c->rd);
	nftw(c->home, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	CHECK(access(c->home, F_OK) < 0);
}

static void stop_init(struct client *c)
{
	stop_init_status(c, 0);
}

/* --- record helpers ------------------------------------------------------ */

static int rec_get(const struct frame *f, uint16_t tag, struct sl_rec *out)
{
	struct sl_rec_iter it;
	sl_rec_iter_init(&it, f->p, f->len);
	while (sl_rec_next(&it, out) == 1)
		if (out->tag == tag)
			return 1;
	return 0;
}

static uint32_t rec_u32(const struct frame *f, uint16_t tag, uint32_t dflt)
{
	struct sl_rec r;
	uint32_t v;
	return rec_get(f, tag, &r) && sl_rec_u32(&r, &v) == 0 ? v : dflt;
}

static uint64_t rec_u64(const struct frame *f, uint16_t tag, uint64_t dflt)
{
	struct sl_rec r;
	uint64_t v;
	return rec_get(f, tag, &r) && sl_rec_u64(&r, &v) == 0 ? v : dflt;
}

static int rec_u8(const struct frame *f, uint16_t tag, int dflt)
{
	struct sl_rec r;
	uint8_t v;
	return rec_get(f, tag, &r) && sl_rec_u8(&r, &v) == 0 ? v : dflt;
}

/* The string value of tag, copied into buf ("" if absent). */
static const char *rec_str(const struct frame *f, uint16_t tag, char *buf, size_t n)
{
	struct sl_rec r;
	buf[0] = '\0';
	if (rec_get(f, tag, &r) && r.len < n) {
		memcpy(buf, r.val, r.len);
		buf[r.len] = '\0';
	}
	return buf;
}

static void send_empty(struct client *c, uint8_t type, uint32_t id)
{
	struct sl_msg m;
	sl_msg_begin(&m, type, 0, id);
	send_msg(c, &m);
}

static void send_u32(struct client *c, uint8_t type, uint32_t id, uint16_t tag, uint32_t v)
{
	struct sl_msg m;
	sl_msg_begin(&m, type, 0, id);
	sl_msg_put_u32(&m, tag, v);
	send_msg(c, &m);
}

static void send_path(struct client *c, uint8_t type, uint32_t id, const char *path, int has_flags,
		      uint32_t flags)
{
	struct sl_msg m;
	sl_msg_begin(&m, type, 0, id);
	sl_msg_put_str(&m, SL_TAG_PATH, path);
	if (has_flags)
		sl_msg_put_u32(&m, SL_TAG_FLAGS, flags);
	send_msg(c, &m);
}

/* Expect OK (return 0) or ERROR (return its errno) on stream id. */
static int expect_reply(struct client *c, uint32_t id, struct frame *ok)
{
	struct frame f;
	if (next_frame(c, &f) != 1) {
		CHECK(!"no reply");
		return -1;
	}
	CHECK_EQ_INT(f.stream, id);
	int r;
	if (f.type == SL_MSG_OK) {
		r = 0;
	} else if (f.type == SL_MSG_ERROR) {
		char msg[512];
		r = (int)rec_u32(&f, SL_TAG_ERRNO, 0);
		printf("#   (ERROR %d: %s)\n", r, rec_str(&f, SL_TAG_MESSAGE, msg, sizeof(msg)));
	} else {
		printf("#   unexpected frame type 0x%x\n", f.type);
		r = -1;
	}
	if (ok && r == 0)
		*ok = f;
	else
		frame_free(&f);
	return r;
}

/* --- processes ------------------------------------------------------------ */

static void send_exec(struct client *c, uint32_t id, const char *const *argv, int stdin_pipe,
		      const char *cwd)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_EXEC, 0, id);
	for (; *argv; argv++)
		sl_msg_put_str(&m, SL_TAG_ARG, *argv);
	sl_msg_put_str(&m, SL_TAG_ENV, TEST_PATH);
	sl_msg_put_str(&m, SL_TAG_ENV, "LC_ALL=C");
	if (cwd)
		sl_msg_put_str(&m, SL_TAG_CWD, cwd);
	if (stdin_pipe)
		sl_msg_put_u8(&m, SL_TAG_STDIN, 1);
	send_msg(c, &m);
}

struct result {
	char *out, *err;
	size_t outlen, errlen;
	int started, pid;
	int exited, code, sig;
	int error; /* errno of an ERROR reply */
	int stage; /* its STAGE record, 0 if none */
	char msg[256];
	int out_end, err_end, bad_order;
	uint64_t exit_ms;
	int has_oom, has_pids; /* EXIT carried OOM_KILLS, PIDS_REFUSED */
	uint64_t oom, pids;
};

static void result_free(struct result *r)
{
	free(r->out);
	free(r->err);
}

static void append(char **buf, size_t *len, const uint8_t *p, size_t n)
{
	*buf = realloc(*buf, *len + n + 1);
	memcpy(*buf + *len, p, n);
	*len += n;
	(*buf)[*len] = '\0';
}

/* Collect a command's frames until EXIT or ERROR, granting back the credit
 * of every data frame as it is consumed. */
static void run_to_exit(struct client *c, uint32_t id, struct result *r)
{
	memset(r, 0, sizeof(*r));
	r->out = calloc(1, 1);
	r->err = calloc(1, 1);
	for (;;) {
		struct frame f;
		if (next_frame(c, &f) != 1) {
			CHECK(!"stream ended without EXIT or ERROR");
			return;
		}
		if (f.stream != id) {
			frame_free(&f);
			continue;
		}
		switch (f.type) {
		case SL_MSG_STARTED:
			r->started = 1;
			r->pid = (int)rec_u32(&f, SL_TAG_PID, 0);
			break;
		case SL_MSG_STDOUT:
		case SL_MSG_STDERR: {
			int out = f.type == SL_MSG_STDOUT;
			if (out ? r->out_end : r->err_end)
				r->bad_order = 1;
			if (out)
				append(&r->out, &r->outlen, f.p, f.len);
			else
				append(&r->err, &r->errlen, f.p, f.len);
			if (f.flags & SANDLOT_PROTO_FLAG_END)
				*(out ? &r->out_end : &r->err_end) = 1;
			if (f.len)
				send_u32(c, SL_MSG_CREDIT, id, SL_TAG_CREDIT, f.len);
			break;
		}
		case SL_MSG_EXIT: {
			struct sl_rec rec;
			int32_t code;
			r->exited = 1;
			r->exit_ms = now_ms();
			r->code = rec_get(&f, SL_TAG_EXIT_CODE, &rec) && sl_rec_i32(&rec, &code) == 0
					  ? code
					  : -1000;
			r->sig = (int)rec_u32(&f, SL_TAG_SIGNAL, 0);
			r->has_oom = rec_get(&f, SL_TAG_OOM_KILLS, &rec) && sl_rec_u64(&rec, &r->oom) == 0;
			r->has_pids = rec_get(&f, SL_TAG_PIDS_REFUSED, &rec) &&
				      sl_rec_u64(&rec, &r->pids) == 0;
			if (!r->out_end || !r->err_end)
				r->bad_order = 1;
			frame_free(&f);
			return;
		}
		case SL_MSG_ERROR:
			r->error = (int)rec_u32(&f, SL_TAG_ERRNO, 0);
			r->stage = rec_u8(&f, SL_TAG_STAGE, 0);
			rec_str(&f, SL_TAG_MESSAGE, r->msg, sizeof(r->msg));
			frame_free(&f);
			return;
		default:
			break;
		}
		frame_free(&f);
	}
}

static void run_cmd(struct client *c, uint32_t id, const char *const *argv, struct result *r)
{
	send_exec(c, id, argv, 0, NULL);
	run_to_exit(c, id, r);
}

static void test_hello_ping(void)
{
	struct client c;
	start_init(&c);
	struct frame f;
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_HELLO);
	CHECK_EQ_INT(f.stream, 0);
	CHECK_EQ_INT(rec_u32(&f, SL_TAG_VERSION, 0), SANDLOT_PROTO_VERSION);
	frame_free(&f);
	/* The answer to CONFIG. */
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_OK);
	CHECK_EQ_INT(f.stream, 0);
	CHECK_EQ_INT(f.len, 0);
	frame_free(&f);

	send_empty(&c, SL_MSG_PING, 0);
	CHECK_EQ_INT(expect_reply(&c, 0, NULL), 0);
	send_empty(&c, SL_MSG_PING, 77);
	CHECK_EQ_INT(expect_reply(&c, 77, NULL), 0);
	/* Frames for streams that are not open vanish without a reply. */
	send_u32(&c, SL_MSG_CREDIT, 5, SL_TAG_CREDIT, 100);
	send_u32(&c, SL_MSG_KILL, 5, SL_TAG_SIGNAL, 9);
	send_empty(&c, SL_MSG_STDIN, 5);
	send_empty(&c, SL_MSG_DATA, 5);
	/* Requests need a stream of their own. */
	send_path(&c, SL_MSG_STAT, 0, ".", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 0, NULL), EINVAL);
	send_empty(&c, SL_MSG_PING, 78);
	CHECK_EQ_INT(expect_reply(&c, 78, NULL), 0);
	stop_init(&c);
}

/* Read HELLO and the OK to CONFIG, then wait until init serves requests:
 * it takes the first change-tracking baseline in between (before it reads
 * any request), so once a PING is answered, files the test writes come
 * after it. */
static void skip_hello(struct client *c)
{
	struct frame f;
	CHECK_EQ_INT(next_frame(c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_HELLO);
	frame_free(&f);
	CHECK_EQ_INT(next_frame(c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_OK);
	CHECK_EQ_INT(f.stream, 0);
	frame_free(&f);
	send_empty(c, SL_MSG_PING, 0x7fffffff);
	CHECK_EQ_INT(expect_reply(c, 0x7fffffff, NULL), 0);
}

static void test_exec_echo(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	struct result r;
	run_cmd(&c, 1, (const char *[]){ "echo", "hi", NULL }, &r);
	CHECK(r.started && r.pid > 0);
	CHECK_STR(r.out, "hi\n");
	CHECK_EQ_INT(r.errlen, 0);
	CHECK(r.exited && r.code == 0 && r.sig == 0);
	CHECK(!r.bad_order);
	result_free(&r);

	/* The environment is exactly the one given; cwd defaults to home. */
	run_cmd(&c, 2, (const char *[]){ "sh", "-c", "env; pwd", NULL }, &r);
	char want[256];
	snprintf(want, sizeof(want), TEST_PATH "\nLC_ALL=C\nPWD=%s\n%s\n", c.home, c.home);
	CHECK_STR(r.out, want);
	result_free(&r);
	stop_init(&c);
}

static void test_exit_codes(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	struct result r;
	run_cmd(&c, 1, (const char *[]){ "sh", "-c", "echo oops >&2; exit 3", NULL }, &r);
	CHECK(r.exited && r.code == 3);
	CHECK_STR(r.err, "oops\n");
	CHECK(!r.bad_order);
	result_free(&r);
	run_cmd(&c, 2, (const char *[]){ "false", NULL }, &r);
	CHECK(r.exited && r.code == 1);
	result_free(&r);
	/* A relative CWD is under home. */
	char sub[128];
	path_in(&c, "sub", sub, sizeof(sub));
	CHECK_EQ_INT(mkdir(sub, 0755), 0);
	send_exec(&c, 3, (const char *[]){ "pwd", NULL }, 0, "sub");
	run_to_exit(&c, 3, &r);
	char want[160];
	snprintf(want, sizeof(want), "%s\n", sub);
	CHECK_STR(r.out, want);
	result_free(&r);
	stop_init(&c);
}

static void test_killed_signal(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	send_exec(&c, 4, (const char *[]){ "sleep", "30", NULL }, 0, NULL);
	struct frame f;
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_STARTED);
	frame_free(&f);
	/* Busy: a request on an open stream id is refused. */
	send_empty(&c, SL_MSG_PING, 4);
	CHECK_EQ_INT(expect_reply(&c, 4, NULL), EBUSY);
	/* A KILL with malformed records is dropped, not taken as SIGKILL. */
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_KILL, 0, 4);
	sl_msg_put_raw(&m, "\x0a\x00\x04\x00", 4);
	send_msg(&c, &m);
	sl_msg_begin(&m, SL_MSG_KILL, 0, 4);
	sl_msg_put_u8(&m, SL_TAG_SIGNAL, 9);
	send_msg(&c, &m);
	/* Init answers in order: once the PING is answered, the two KILLs were
	 * handled.  Had one sent SIGKILL, the sleep would end by it whatever
	 * came later (a SIGKILL sent makes the exit status SIGKILL at once). */
	send_empty(&c, SL_MSG_PING, 40);
	CHECK_EQ_INT(expect_reply(&c, 40, NULL), 0);
	send_u32(&c, SL_MSG_KILL, 4, SL_TAG_SIGNAL, SIGTERM);
	struct result r;
	run_to_exit(&c, 4, &r);
	CHECK(r.exited && r.sig == SIGTERM && r.code == -1000);
	CHECK(!r.bad_order);
	result_free(&r);

	/* KILL reaches the whole process group, not just the leader: the
	 * background sleep dies too (and init reaps it as an orphan). */
	send_exec(&c, 5, (const char *[]){ "sh", "-c", "sleep 30 & echo $!; wait; echo never", NULL },
		  0, NULL);
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_STARTED);
	frame_free(&f);
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_STDOUT);
	pid_t bg = (pid_t)strtol((char *)f.p, NULL, 10);
	frame_free(&f);
	CHECK(bg > 0 && kill(bg, 0) == 0);
	send_u32(&c, SL_MSG_KILL, 5, SL_TAG_SIGNAL, SIGKILL);
	run_to_exit(&c, 5, &r);
	CHECK(r.exited && r.sig == SIGKILL);
	CHECK_EQ_INT(r.outlen, 0);
	result_free(&r);
	uint64_t t0 = now_ms();
	while (bg > 0 && kill(bg, 0) == 0 && now_ms() - t0 < 2000)
		usleep(5000);
	CHECK(bg > 0 && kill(bg, 0) < 0 && errno == ESRCH);
	stop_init(&c);
}

static void test_start_errors(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	struct result r;
	run_cmd(&c, 1, (const char *[]){ "no-such-command-xyz", NULL }, &r);
	CHECK(!r.started);
	CHECK_EQ_INT(r.error, ENOENT);
	CHECK_EQ_INT(r.stage, 'x');
	CHECK(strstr(r.msg, "command not found: no-such-command-xyz") != NULL);
	result_free(&r);

	char file[128];
	path_in(&c, "noexec.sh", file, sizeof(file));
	int fd = open(file, O_WRONLY | O_CREAT, 0644);
	CHECK(fd >= 0 && write(fd, "echo x\n", 7) == 7);
	close(fd);
	run_cmd(&c, 2, (const char *[]){ "./noexec.sh", NULL }, &r);
	CHECK_EQ_INT(r.error, EACCES);
	CHECK_EQ_INT(r.stage, 'x');
	result_free(&r);

	/* A script without #! runs under /bin/sh, like execvp. */
	chmod(file, 0755);
	run_cmd(&c, 3, (const char *[]){ "./noexec.sh", NULL }, &r);
	CHECK(r.exited && r.code == 0);
	CHECK_STR(r.out, "x\n");
	result_free(&r);

	send_exec(&c, 4, (const char *[]){ "true", NULL }, 0, "missing-dir");
	run_to_exit(&c, 4, &r);
	CHECK_EQ_INT(r.error, ENOENT);
	CHECK_EQ_INT(r.stage, 'w');
	CHECK(strstr(r.msg, "working directory") != NULL);
	result_free(&r);
	send_exec(&c, 5, (const char *[]){ "true", NULL }, 0, "noexec.sh");
	run_to_exit(&c, 5, &r);
	CHECK_EQ_INT(r.error, ENOTDIR);
	CHECK_EQ_INT(r.stage, 'w');
	result_free(&r);

	/* No ARG at all. */
	send_empty(&c, SL_MSG_EXEC, 6);
	CHECK_EQ_INT(expect_reply(&c, 6, NULL), EINVAL);
	/* A malformed record inside a well-formed frame is not fatal. */
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_EXEC, 0, 7);
	sl_msg_put_str(&m, SL_TAG_ARG, "true");
	sl_msg_put_u32(&m, SL_TAG_STDIN, 1); /* u8 expected */
	send_msg(&c, &m);
	CHECK(expect_reply(&c, 7, NULL) > 0);
	send_empty(&c, SL_MSG_PING, 8);
	CHECK_EQ_INT(expect_reply(&c, 8, NULL), 0);
	stop_init(&c);
}

/* End the case when `expr` does not hold (init gets EOF and exits). */
#define REQUIRE(expr)                                                                 \
	do {                                                                          \
		if (!(expr)) {                                                        \
			printf("#   required: %s (%s:%d)\n", #expr, __FILE__, __LINE__); \
			fflush(stdout);                                               \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

/* Replace the contents of `path` (an event counter file). */
static void put_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	REQUIRE(fd >= 0);
	REQUIRE(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

/* Start `cat` on stream id with a stdin pipe and wait for its STARTED (so
 * init has read the counters it compares against). */
static void start_cat(struct client *c, uint32_t id)
{
	send_exec(c, id, (const char *[]){ "cat", NULL }, 1, NULL);
	for (;;) {
		struct frame f;
		REQUIRE(next_frame(c, &f) == 1);
		int started = f.stream == id && f.type == SL_MSG_STARTED;
		REQUIRE(f.stream != id || f.type == SL_MSG_STARTED);
		frame_free(&f);
		if (started)
			return;
	}
}

/* End the `cat` of start_cat() and collect its EXIT. */
static void end_cat(struct client *c, uint32_t id, struct result *r)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_STDIN, SANDLOT_PROTO_FLAG_END, id);
	send_msg(c, &m);
	run_to_exit(c, id, r);
	CHECK(r->exited && r->code == 0);
}

/* EXIT's OOM_KILLS and PIDS_REFUSED: what the counters init was handed
 * (fds 10 and 11; here files standing in for a cgroup's memory.events or
 * memory.oom_control and pids.events) grew by between EXEC and EXIT; 0
 * when they did not; absent without the descriptors, or when a file holds
 * no such line (or a malformed one); a counter that went down counts 0.
 * "oom_kill_disable" (v1's memory.oom_control) is not "oom_kill". */
static void test_exit_events(void)
{
	char dir[] = "/tmp/sandlot-init-ev-XXXXXX";
	REQUIRE(mkdtemp(dir));
	char oom[64], pids[64];
	snprintf(oom, sizeof(oom), "%s/oom", dir);
	snprintf(pids, sizeof(pids), "%s/pids", dir);
	put_file(oom, "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n");
	put_file(pids, "max 7\n");
	struct init_opts o = { .oom_events = oom, .pids_events = pids };
	struct client c;
	start_init_opts(&c, &o);
	skip_hello(&c);
	struct result r;

	/* Nothing happened. */
	run_cmd(&c, 1, (const char *[]){ "true", NULL }, &r);
	CHECK(r.exited && r.code == 0);
	CHECK(r.has_oom && r.oom == 0);
	CHECK(r.has_pids && r.pids == 0);
	result_free(&r);

	/* Three OOM kills while it ran (the disable flag changes too: not a
	 * count). */
	start_cat(&c, 2);
	put_file(oom, "oom_kill_disable 1\nunder_oom 0\noom_kill 8\n");
	end_cat(&c, 2, &r);
	CHECK(r.has_oom && r.oom == 3);
	CHECK(r.has_pids && r.pids == 0);
	result_free(&r);

	/* Two refused forks; a counter that went down counts nothing. */
	start_cat(&c, 3);
	put_file(pids, "max 9\n");
	put_file(oom, "oom_kill 1\n");
	end_cat(&c, 3, &r);
	CHECK(r.has_oom && r.oom == 0);
	CHECK(r.has_pids && r.pids == 2);
	result_free(&r);

	/* No such line, or a malformed number: not reported. */
	start_cat(&c, 4);
	put_file(oom, "low 0\nhigh 0\n");
	end_cat(&c, 4, &r);
	CHECK(!r.has_oom);
	CHECK(r.has_pids && r.pids == 0);
	result_free(&r);
	put_file(pids, "max 18446744073709551616\n"); /* 2^64 */
	run_cmd(&c, 5, (const char *[]){ "true", NULL }, &r);
	CHECK(!r.has_oom && !r.has_pids);
	result_free(&r);
	stop_init(&c);

	/* Without the descriptors: neither record. */
	start_init(&c);
	skip_hello(&c);
	run_cmd(&c, 1, (const char *[]){ "true", NULL }, &r);
	CHECK(r.exited && r.code == 0);
	CHECK(!r.has_oom && !r.has_pids);
	result_free(&r);
	stop_init(&c);
	unlink(oom);
	unlink(pids);
	rmdir(dir);
}

static void test_stdin_cat(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	send_exec(&c, 9, (const char *[]){ "cat", NULL }, 1, NULL);
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_STDIN, 0, 9);
	sl_msg_put_raw(&m, "hello ", 6);
	send_msg(&c, &m);
	sl_msg_begin(&m, SL_MSG_STDIN, SANDLOT_PROTO_FLAG_END, 9);
	sl_msg_put_raw(&m, "world", 5);
	send_msg(&c, &m);
	struct result r;
	run_to_exit(&c, 9, &r);
	CHECK(r.started);
	CHECK_STR(r.out, "hello world");
	CHECK(r.exited && r.code == 0);
	result_free(&r);

	/* 3 MiB through cat with credit in both directions. */
	size_t total = 3u << 20;
	uint8_t *data = malloc(total);
	for (size_t i = 0; i < total; i++)
		data[i] = (uint8_t)(i * 7 + i / 251);
	send_exec(&c, 10, (const char *[]){ "cat", NULL }, 1, NULL);
	size_t sent = 0, got_len = 0;
	uint64_t stdin_credit = SANDLOT_PROTO_WINDOW;
	uint8_t *got = malloc(total);
	int exited = 0, over = 0, end_sent = 0;
	while (!exited) {
		while (sent < total && stdin_credit > 0) {
			size_t n = total - sent;
			if (n > 32768)
				n = 32768;
			if (n > stdin_credit)
				n = (size_t)stdin_credit;
			sl_msg_begin(&m, SL_MSG_STDIN, sent + n == total ? SANDLOT_PROTO_FLAG_END : 0, 10);
			sl_msg_put_raw(&m, data + sent, n);
			send_msg(&c, &m);
			sent += n;
			stdin_credit -= n;
			end_sent = sent == total;
		}
		struct frame f;
		if (next_frame(&c, &f) != 1)
			break;
		if (f.type == SL_MSG_CREDIT)
			stdin_credit += rec_u32(&f, SL_TAG_CREDIT, 0);
		else if (f.type == SL_MSG_STDOUT && f.len) {
			if (got_len + f.len > total)
				over = 1;
			else
				memcpy(got + got_len, f.p, f.len);
			got_len += f.len;
			send_u32(&c, SL_MSG_CREDIT, 10, SL_TAG_CREDIT, f.len);
		} else if (f.type == SL_MSG_EXIT) {
			exited = 1;
			CHECK_EQ_INT(rec_u32(&f, SL_TAG_EXIT_CODE, 99), 0);
		} else if (f.type == SL_MSG_ERROR) {
			CHECK(!"ERROR during cat");
			exited = 1;
		}
		frame_free(&f);
	}
	CHECK(end_sent);
	CHECK(!over);
	CHECK_EQ_INT(got_len, total);
	CHECK(memcmp(got, data, total) == 0);
	free(got);
	free(data);
	stop_init(&c);
}

static long vm_kb(pid_t pid, const char *key)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	long v = -1;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			v = strtol(line + strlen(key), NULL, 10);
	if (f)
		fclose(f);
	return v;
}

static void test_flow_control(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	long rss0 = vm_kb(c.init, "VmRSS:");
	/* seq 1 1500000 prints 10,888,896 bytes. */
	const size_t expect_len = 10888896;
	char *expect = malloc(expect_len + 16);
	size_t el = 0;
	for (int i = 1; i <= 1500000; i++)
		el += (size_t)sprintf(expect + el, "%d\n", i);
	CHECK_EQ_INT(el, expect_len);

	send_exec(&c, 3, (const char *[]){ "seq", "1", "1500000", NULL }, 0, NULL);
	char *got = malloc(expect_len + 1);
	size_t got_len = 0, pending = 0;
	uint64_t granted = SANDLOT_PROTO_WINDOW;
	int exited = 0, over_credit = 0, paused = 0, mismatch = 0;
	while (!exited) {
		struct frame f;
		if (next_frame(&c, &f) != 1)
			break;
		if (f.type == SL_MSG_STDOUT && f.len) {
			if (got_len + f.len > expect_len || memcmp(expect + got_len, f.p, f.len))
				mismatch = 1;
			else
				memcpy(got + got_len, f.p, f.len);
			got_len += f.len;
			if (got_len > granted)
				over_credit = 1;
			pending += f.len;
		} else if (f.type == SL_MSG_EXIT) {
			exited = 1;
			CHECK_EQ_INT(rec_u32(&f, SL_TAG_EXIT_CODE, 99), 0);
		} else if (f.type == SL_MSG_ERROR) {
			exited = 1;
			CHECK(!"ERROR");
		}
		frame_free(&f);
		/* Once, past 1 MiB: withhold credit until init has used it all,
		 * then check that nothing more arrives while we wait. */
		if (!paused && !exited && got_len >= (1u << 20)) {
			if (got_len < granted)
				continue;
			paused = 1;
			CHECK_EQ_INT(next_frame_ms(&c, &f, 300), 0);
		}
		/* Grant slowly: in 64 KiB steps, a millisecond apart. */
		if (pending >= 65536) {
			usleep(1000);
			send_u32(&c, SL_MSG_CREDIT, 3, SL_TAG_CREDIT, (uint32_t)pending);
			granted += pending;
			pending = 0;
		} else if (!exited && got_len == granted && pending) {
			send_u32(&c, SL_MSG_CREDIT, 3, SL_TAG_CREDIT, (uint32_t)pending);
			granted += pending;
			pending = 0;
		}
	}
	CHECK(paused);
	CHECK(!over_credit);
	CHECK(!mismatch);
	CHECK_EQ_INT(got_len, expect_len);
	long hwm = vm_kb(c.init, "VmHWM:");
	printf("#   init RSS %ld kB at start, peak %ld kB\n", rss0, hwm);
#if defined(__SANITIZE_ADDRESS__)
	/* ASan's quarantine keeps freed memory resident: only the credit
	 * checks above apply in a sanitizer build. */
	printf("#   (RSS bound not checked under AddressSanitizer)\n");
#else
	CHECK(rss0 > 0 && hwm > 0 && hwm - rss0 < 8 * 1024);
#endif
	free(got);
	free(expect);
	stop_init(&c);
}

static void test_background_holder(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	uint64_t t0 = now_ms();
	send_exec(&c, 1, (const char *[]){ "sh", "-c", "sleep 30 & echo hi", NULL }, 0, NULL);
	struct result r;
	run_to_exit(&c, 1, &r);
	CHECK(r.exited && r.code == 0);
	CHECK_STR(r.out, "hi\n");
	CHECK(!r.bad_order);
	CHECK(r.exit_ms - t0 < 3000);
	result_free(&r);
	/* The same with a background child that escaped into its own session
	 * and keeps stdout open and busy. */
	t0 = now_ms();
	send_exec(&c, 2,
		  (const char *[]){ "sh", "-c", "setsid sh -c 'while :; do echo bg; sleep 0.01; done' & echo fg",
				    NULL },
		  0, NULL);
	run_to_exit(&c, 2, &r);
	CHECK(r.exited && r.code == 0);
	CHECK(strncmp(r.out, "fg\n", 3) == 0 || strstr(r.out, "fg\n") != NULL);
	CHECK(r.exit_ms - t0 < 3000);
	result_free(&r);
	/* Both background processes are still running: stop_init must
	 * kill them. */
	stop_init(&c);
}

/* --- files ---------------------------------------------------------------- */

static int fwrite_data(struct client *c, uint32_t id, const char *path, int has_mode,
		       uint32_t mode, uint32_t flags, const uint8_t *data, size_t len,
		       uint64_t *size_out)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_FWRITE, 0, id);
	sl_msg_put_str(&m, SL_TAG_PATH, path);
	if (has_mode)
		sl_msg_put_u32(&m, SL_TAG_MODE, mode);
	sl_msg_put_u32(&m, SL_TAG_FLAGS, flags);
	send_msg(c, &m);
	size_t off = 0;
	do {
		size_t n = len - off > 65536 ? 65536 : len - off;
		sl_msg_begin(&m, SL_MSG_DATA, off + n == len ? SANDLOT_PROTO_FLAG_END : 0, id);
		sl_msg_put_raw(&m, data + off, n);
		send_msg(c, &m);
		off += n;
	} while (off < len);
	struct frame ok;
	int r = expect_reply(c, id, &ok);
	if (r == 0) {
		if (size_out)
			*size_out = rec_u64(&ok, SL_TAG_SIZE, UINT64_MAX);
		frame_free(&ok);
	}
	return r;
}

/* FREAD into a new buffer, granting credit as data is consumed.  Returns
 * 0 or the errno of ERROR. */
static int fread_data(struct client *c, uint32_t id, const char *path, uint8_t **out,
		      size_t *len)
{
	send_path(c, SL_MSG_FREAD, id, path, 0, 0);
	*out = NULL;
	*len = 0;
	int ended = 0;
	for (;;) {
		struct frame f;
		if (next_frame(c, &f) != 1)
			return -1;
		CHECK_EQ_INT(f.stream, id);
		if (f.type == SL_MSG_DATA) {
			CHECK(!ended);
			char *buf = (char *)*out;
			append(&buf, len, f.p, f.len);
			*out = (uint8_t *)buf;
			if (f.flags & SANDLOT_PROTO_FLAG_END)
				ended = 1;
			else if (f.len)
				send_u32(c, SL_MSG_CREDIT, id, SL_TAG_CREDIT, f.len);
		} else if (f.type == SL_MSG_OK) {
			CHECK(ended);
			CHECK_EQ_INT(rec_u64(&f, SL_TAG_SIZE, UINT64_MAX), *len);
			frame_free(&f);
			return 0;
		} else if (f.type == SL_MSG_ERROR) {
			int e = (int)rec_u32(&f, SL_TAG_ERRNO, 0);
			frame_free(&f);
			return e;
		}
		frame_free(&f);
	}
}

static int count_tmp_files(const char *dir)
{
	DIR *d = opendir(dir);
	int n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n += strncmp(de->d_name, ".sandlot-tmp-", 13) == 0;
	if (d)
		closedir(d);
	return n;
}

static void test_fwrite_fread(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	size_t len = 3u << 20;
	uint8_t *data = malloc(len);
	uint64_t x = 0x1234567;
	for (size_t i = 0; i < len; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		data[i] = (uint8_t)(x >> 56);
	}
	uint64_t size = 0;
	CHECK_EQ_INT(fwrite_data(&c, 1, "out/blob.bin", 0, 0, 1, data, len, &size), 0);
	CHECK_EQ_INT(size, len);
	char p[160];
	path_in(&c, "out/blob.bin", p, sizeof(p));
	struct stat st = { 0 };
	CHECK_EQ_INT(stat(p, &st), 0);
	CHECK_EQ_INT(st.st_size, len);
	CHECK_EQ_INT(st.st_mode & 07777, 0644);
	CHECK_EQ_INT(st.st_uid, getuid());
	char dir[160];
	path_in(&c, "out", dir, sizeof(dir));
	CHECK_EQ_INT(stat(dir, &st), 0);
	CHECK_EQ_INT(st.st_mode & 07777, 0755);
	CHECK_EQ_INT(count_tmp_files(dir), 0);

	uint8_t *back;
	size_t back_len;
	/* Absolute path this time. */
	CHECK_EQ_INT(fread_data(&c, 2, p, &back, &back_len), 0);
	CHECK_EQ_INT(back_len, len);
	CHECK(back && memcmp(back, data, len) == 0);
	free(back);

	/* Overwrite with a mode; an empty file via an empty END frame. */
	CHECK_EQ_INT(fwrite_data(&c, 3, "out/blob.bin", 1, 0600, 0, (const uint8_t *)"abc", 3, NULL),
		     0);
	CHECK_EQ_INT(stat(p, &st), 0);
	CHECK(st.st_size == 3 && (st.st_mode & 07777) == 0600);
	CHECK_EQ_INT(fwrite_data(&c, 4, "empty", 0, 0, 0, NULL, 0, &size), 0);
	CHECK_EQ_INT(size, 0);
	CHECK_EQ_INT(fread_data(&c, 5, "empty", &back, &back_len), 0);
	CHECK_EQ_INT(back_len, 0);
	free(back);
	/* A file of exactly one credit window ends without further credit. */
	CHECK_EQ_INT(fwrite_data(&c, 6, "window", 0, 0, 0, data, SANDLOT_PROTO_WINDOW, NULL), 0);
	send_path(&c, SL_MSG_FREAD, 7, "window", 0, 0);
	size_t n = 0;
	for (;;) {
		struct frame f;
		if (next_frame(&c, &f) != 1)
			break;
		int t = f.type;
		n += f.type == SL_MSG_DATA ? f.len : 0;
		frame_free(&f);
		if (t != SL_MSG_DATA)
			break;
	}
	CHECK_EQ_INT(n, SANDLOT_PROTO_WINDOW);
	free(data);
	stop_init(&c);
}

/* FREAD with MAX_BYTES: a larger file is refused before any data (EFBIG,
 * naming both sizes); one that grows past the limit while it is read ends
 * with EFBIG once the limit is passed, after at most the limit's bytes. */
static void test_fread_max_bytes(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	char p[160];
	path_in(&c, "f", p, sizeof(p));
	size_t size = 3 * SANDLOT_PROTO_WINDOW;
	uint8_t *data = calloc(1, size);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && write(fd, data, size) == (ssize_t)size);

	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_FREAD, 0, 1);
	sl_msg_put_str(&m, SL_TAG_PATH, "f");
	sl_msg_put_u64(&m, SL_TAG_MAX_BYTES, size - 1);
	send_msg(&c, &m);
	struct frame f;
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_ERROR);
	CHECK_EQ_INT(rec_u32(&f, SL_TAG_ERRNO, 0), EFBIG);
	char msg[256];
	const char *text = rec_str(&f, SL_TAG_MESSAGE, msg, sizeof(msg));
	CHECK(text && strstr(text, "786432 bytes, over the limit of 786431 bytes"));
	frame_free(&f);

	/* Within the limit when opened; it grows past it while being read. */
	sl_msg_begin(&m, SL_MSG_FREAD, 0, 2);
	sl_msg_put_str(&m, SL_TAG_PATH, "f");
	sl_msg_put_u64(&m, SL_TAG_MAX_BYTES, size + 1000);
	send_msg(&c, &m);
	size_t got = 0;
	while (got < SANDLOT_PROTO_WINDOW && next_frame(&c, &f) == 1) {
		CHECK_EQ_INT(f.type, SL_MSG_DATA);
		got += f.len;
		frame_free(&f);
	}
	CHECK_EQ_INT(got, SANDLOT_PROTO_WINDOW); /* all the credit: init now waits */
	CHECK(write(fd, data, 4096) == 4096);
	close(fd);
	send_u32(&c, SL_MSG_CREDIT, 2, SL_TAG_CREDIT, 4 * SANDLOT_PROTO_WINDOW);
	int type = 0;
	while (next_frame(&c, &f) == 1) {
		type = f.type;
		if (type == SL_MSG_DATA)
			got += f.len;
		else if (type == SL_MSG_ERROR)
			CHECK_EQ_INT(rec_u32(&f, SL_TAG_ERRNO, 0), EFBIG);
		frame_free(&f);
		if (type != SL_MSG_DATA)
			break;
	}
	CHECK_EQ_INT(type, SL_MSG_ERROR);
	CHECK(got <= size + 1000);
	free(data);
	stop_init(&c);
}

static void test_fread_errors(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	char fifo[160];
	path_in(&c, "fifo", fifo, sizeof(fifo));
	CHECK_EQ_INT(mkfifo(fifo, 0644), 0);
	uint64_t t0 = now_ms();
	uint8_t *b;
	size_t n;
	CHECK_EQ_INT(fread_data(&c, 1, "fifo", &b, &n), EINVAL);
	CHECK(now_ms() - t0 < 1000);
	/* Writing over a FIFO is refused too, and it stays a FIFO. */
	CHECK_EQ_INT(fwrite_data(&c, 2, "fifo", 0, 0, 0, (const uint8_t *)"x", 1, NULL), EINVAL);
	struct stat st = { 0 };
	CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
	CHECK_EQ_INT(fread_data(&c, 3, ".", &b, &n), EISDIR);
	CHECK_EQ_INT(fread_data(&c, 4, "missing", &b, &n), ENOENT);
	CHECK_EQ_INT(fwrite_data(&c, 5, ".", 0, 0, 0, (const uint8_t *)"x", 1, NULL), EISDIR);
	/* Magic links are refused. */
	CHECK_EQ_INT(fread_data(&c, 6, "/proc/self/root/etc/hostname", &b, &n), ELOOP);
	/* Bad paths. */
	send_path(&c, SL_MSG_FREAD, 7, "", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 7, NULL), EINVAL);
	char *longp = malloc(5000);
	memset(longp, 'a', 4999);
	longp[4999] = '\0';
	send_path(&c, SL_MSG_STAT, 8, longp, 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 8, NULL), EINVAL);
	free(longp);
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_STAT, 0, 9);
	sl_msg_put_bytes(&m, SL_TAG_PATH, "a\0b", 3);
	send_msg(&c, &m);
	CHECK_EQ_INT(expect_reply(&c, 9, NULL), EINVAL);
	send_empty(&c, SL_MSG_STAT, 10);
	CHECK_EQ_INT(expect_reply(&c, 10, NULL), EINVAL);
	stop_init(&c);
}

static void test_fwrite_parents_and_abort(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	const uint8_t *d = (const uint8_t *)"data";
	CHECK_EQ_INT(fwrite_data(&c, 1, "a/b/c.txt", 0, 0, 0, d, 4, NULL), ENOENT);
	char p[160];
	path_in(&c, "a", p, sizeof(p));
	CHECK(access(p, F_OK) < 0);
	CHECK_EQ_INT(fwrite_data(&c, 2, "a/b/c.txt", 0, 0, 1, d, 4, NULL), 0);
	path_in(&c, "a/b/c.txt", p, sizeof(p));
	struct stat st = { 0 };
	CHECK(stat(p, &st) == 0 && st.st_size == 4);
	/* Unknown flag bits are refused. */
	CHECK_EQ_INT(fwrite_data(&c, 3, "x", 0, 0, 2, d, 4, NULL), EINVAL);

	/* KILL aborts a transfer: ECANCELED, no file, no temporary. */
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_FWRITE, 0, 4);
	sl_msg_put_str(&m, SL_TAG_PATH, "a/b/partial");
	send_msg(&c, &m);
	sl_msg_begin(&m, SL_MSG_DATA, 0, 4);
	sl_msg_put_raw(&m, "some", 4);
	send_msg(&c, &m);
	send_u32(&c, SL_MSG_KILL, 4, SL_TAG_SIGNAL, SIGKILL);
	CHECK_EQ_INT(expect_reply(&c, 4, NULL), ECANCELED);
	path_in(&c, "a/b", p, sizeof(p));
	CHECK_EQ_INT(count_tmp_files(p), 0);
	path_in(&c, "a/b/partial", p, sizeof(p));
	CHECK(access(p, F_OK) < 0);
	/* Its late DATA is dropped silently. */
	sl_msg_begin(&m, SL_MSG_DATA, SANDLOT_PROTO_FLAG_END, 4);
	send_msg(&c, &m);
	send_empty(&c, SL_MSG_PING, 5);
	CHECK_EQ_INT(expect_reply(&c, 5, NULL), 0);
	stop_init(&c);
}

/* A write error (here EFBIG from init's RLIMIT_FSIZE, standing in for
 * ENOSPC) leaves neither a partial file nor a temporary file. */
static void test_fwrite_error_atomic(void)
{
	struct client c;
	struct init_opts o = { .fsize = 1 << 20 };
	start_init_opts(&c, &o);
	skip_hello(&c);
	char p[160];
	path_in(&c, "old.txt", p, sizeof(p));
	int fd = open(p, O_WRONLY | O_CREAT, 0644);
	CHECK(fd >= 0 && write(fd, "old", 3) == 3);
	close(fd);
	size_t len = 3u << 20;
	uint8_t *data = calloc(1, len);
	CHECK_EQ_INT(fwrite_data(&c, 1, "old.txt", 0, 0, 0, data, len, NULL), EFBIG);
	struct stat st = { 0 };
	CHECK(stat(p, &st) == 0 && st.st_size == 3);
	CHECK_EQ_INT(fwrite_data(&c, 2, "new.txt", 0, 0, 0, data, len, NULL), EFBIG);
	path_in(&c, "new.txt", p, sizeof(p));
	CHECK(access(p, F_OK) < 0);
	CHECK_EQ_INT(count_tmp_files(c.home), 0);
	/* The connection is fine afterwards. */
	CHECK_EQ_INT(fwrite_data(&c, 3, "small.txt", 0, 0, 0, data, 1000, NULL), 0);
	free(data);
	stop_init(&c);
}

struct entry_seen {
	char name[64];
	int type;
	uint32_t mode;
	uint64_t size;
};

/* LIST path; returns the number of entries (or -errno) and how many
 * ENTRIES frames carried them. */
static int list_dir(struct client *c, uint32_t id, const char *path, struct entry_seen *v,
		    int max, int *frames)
{
	send_path(c, SL_MSG_LIST, id, path, 0, 0);
	int n = 0;
	*frames = 0;
	for (;;) {
		struct frame f;
		if (next_frame(c, &f) != 1)
			return -9999;
		CHECK_EQ_INT(f.stream, id);
		if (f.type == SL_MSG_OK) {
			frame_free(&f);
			return n;
		}
		if (f.type == SL_MSG_ERROR) {
			int e = (int)rec_u32(&f, SL_TAG_ERRNO, 0);
			frame_free(&f);
			return -e;
		}
		CHECK_EQ_INT(f.type, SL_MSG_ENTRIES);
		(*frames)++;
		struct sl_rec_iter it;
		struct sl_rec r;
		sl_rec_iter_init(&it, f.p, f.len);
		struct entry_seen *e = NULL;
		while (sl_rec_next(&it, &r) == 1) {
			if (r.tag == SL_TAG_NAME) {
				e = n < max ? &v[n] : NULL;
				n++;
				if (e) {
					memset(e, 0, sizeof(*e));
					snprintf(e->name, sizeof(e->name), "%.*s", (int)r.len,
						 (const char *)r.val);
				}
			} else if (e && r.tag == SL_TAG_FTYPE) {
				uint8_t t;
				sl_rec_u8(&r, &t);
				e->type = t;
			} else if (e && r.tag == SL_TAG_MODE) {
				sl_rec_u32(&r, &e->mode);
			} else if (e && r.tag == SL_TAG_SIZE) {
				sl_rec_u64(&r, &e->size);
			}
		}
		frame_free(&f);
	}
}

static const struct entry_seen *find_entry(const struct entry_seen *v, int n, const char *name)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(v[i].name, name))
			return &v[i];
	return NULL;
}

static void test_stat_list_mkdir_remove(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	send_path(&c, SL_MSG_MKDIR, 1, "d", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 1, NULL), 0);
	send_path(&c, SL_MSG_MKDIR, 2, "d", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 2, NULL), EEXIST);
	send_path(&c, SL_MSG_MKDIR, 3, "d", 1, 1);
	CHECK_EQ_INT(expect_reply(&c, 3, NULL), 0);
	send_path(&c, SL_MSG_MKDIR, 4, "x/y/z", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 4, NULL), ENOENT);
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_MKDIR, 0, 5);
	sl_msg_put_str(&m, SL_TAG_PATH, "x/y/z/");
	sl_msg_put_u32(&m, SL_TAG_MODE, 0700);
	sl_msg_put_u32(&m, SL_TAG_FLAGS, 1);
	send_msg(&c, &m);
	CHECK_EQ_INT(expect_reply(&c, 5, NULL), 0);
	char p[256];
	struct stat st = { 0 };
	path_in(&c, "x/y/z", p, sizeof(p));
	CHECK(stat(p, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700);
	path_in(&c, "x/y", p, sizeof(p));
	CHECK(stat(p, &st) == 0 && (st.st_mode & 07777) == 0755);

	CHECK_EQ_INT(fwrite_data(&c, 6, "d/f.txt", 0, 0, 0, (const uint8_t *)"12345", 5, NULL), 0);
	struct frame ok;
	send_path(&c, SL_MSG_STAT, 7, "d/f.txt", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 7, &ok), 0);
	CHECK_EQ_INT(rec_u8(&ok, SL_TAG_FTYPE, 0), 'f');
	CHECK_EQ_INT(rec_u32(&ok, SL_TAG_MODE, 0), 0644);
	CHECK_EQ_INT(rec_u64(&ok, SL_TAG_SIZE, 0), 5);
	path_in(&c, "d/f.txt", p, sizeof(p));
	stat(p, &st);
	CHECK_EQ_INT((int64_t)rec_u64(&ok, SL_TAG_MTIME_NS, 0),
		     (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec);
	frame_free(&ok);

	/* A symlink to a directory outside home: STAT does not follow it,
	 * recursive REMOVE removes the link and leaves the target alone. */
	char outside[] = "/tmp/sandlot-init-outside-XXXXXX";
	CHECK(mkdtemp(outside) != NULL);
	char keep[128];
	snprintf(keep, sizeof(keep), "%s/keep.txt", outside);
	int fd = open(keep, O_WRONLY | O_CREAT, 0644);
	close(fd);
	path_in(&c, "d/link", p, sizeof(p));
	CHECK_EQ_INT(symlink(outside, p), 0);
	send_path(&c, SL_MSG_STAT, 8, "d/link", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 8, &ok), 0);
	CHECK_EQ_INT(rec_u8(&ok, SL_TAG_FTYPE, 0), 'l');
	frame_free(&ok);

	struct entry_seen ents[16];
	int frames;
	int n = list_dir(&c, 9, "d", ents, 16, &frames);
	CHECK_EQ_INT(n, 2);
	const struct entry_seen *e = find_entry(ents, n, "f.txt");
	CHECK(e && e->type == 'f' && e->size == 5 && e->mode == 0644);
	e = find_entry(ents, n, "link");
	CHECK(e && e->type == 'l');
	CHECK_EQ_INT(list_dir(&c, 10, "d/f.txt", ents, 16, &frames), -ENOTDIR);
	CHECK_EQ_INT(list_dir(&c, 11, "nope", ents, 16, &frames), -ENOENT);

	/* A big directory is listed over several ENTRIES frames. */
	path_in(&c, "big", p, sizeof(p));
	mkdir(p, 0755);
	for (int i = 0; i < 3000; i++) {
		char q[300];
		snprintf(q, sizeof(q), "%s/file-with-a-longish-name-%05d", p, i);
		close(open(q, O_WRONLY | O_CREAT, 0644));
	}
	static struct entry_seen many[3100];
	n = list_dir(&c, 12, "big", many, 3100, &frames);
	CHECK_EQ_INT(n, 3000);
	CHECK(frames > 1);
	int all = 1;
	for (int i = 0; i < 3000 && all; i++) {
		char name[64];
		snprintf(name, sizeof(name), "file-with-a-longish-name-%05d", i);
		all = find_entry(many, n, name) != NULL;
	}
	CHECK(all);

	send_path(&c, SL_MSG_REMOVE, 13, "d", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 13, NULL), ENOTEMPTY);
	send_path(&c, SL_MSG_REMOVE, 14, "d", 1, 1);
	CHECK_EQ_INT(expect_reply(&c, 14, NULL), 0);
	path_in(&c, "d", p, sizeof(p));
	CHECK(access(p, F_OK) < 0);
	CHECK_EQ_INT(access(keep, F_OK), 0);
	send_path(&c, SL_MSG_REMOVE, 15, "d", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 15, NULL), ENOENT);
	send_path(&c, SL_MSG_REMOVE, 16, "big", 1, 1);
	CHECK_EQ_INT(expect_reply(&c, 16, NULL), 0);
	send_path(&c, SL_MSG_REMOVE, 17, "x/y/z", 0, 0); /* empty: no flag needed */
	CHECK_EQ_INT(expect_reply(&c, 17, NULL), 0);
	send_path(&c, SL_MSG_REMOVE, 18, "..", 1, 1);
	CHECK_EQ_INT(expect_reply(&c, 18, NULL), EINVAL);

	unlink(keep);
	rmdir(outside);
	stop_init(&c);
}

/* File operations have the sandbox user's rights (creds.c): init runs
 * them with the user's filesystem uid/gid and no effective capability, and
 * refuses its own /proc entries, which the kernel would let it read
 * whatever its credentials. */
static void test_file_ops_user_creds(void)
{
	if (geteuid() != 0)
		tap_skip("needs root: init must run as root with another --uid");
	const uid_t user = 65534;
	struct client c;
	start_init_opts(&c, &(struct init_opts){ .uid = user });
	CHECK_EQ_INT(chown(c.home, user, user), 0);
	skip_hello(&c);
	char p[200];
	path_in(&c, "secret", p, sizeof(p));
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0 && write(fd, "xyzzy", 5) == 5);
	close(fd);
	path_in(&c, "rootdir", p, sizeof(p));
	CHECK_EQ_INT(mkdir(p, 0755), 0);
	path_in(&c, "rootdir/f", p, sizeof(p));
	CHECK_EQ_INT(close(open(p, O_WRONLY | O_CREAT, 0644)), 0);
	path_in(&c, "closed", p, sizeof(p));
	CHECK_EQ_INT(mkdir(p, 0700), 0);
	char target[64];
	snprintf(target, sizeof(target), "/proc/%d/environ", (int)c.init);
	path_in(&c, "environ", p, sizeof(p));
	CHECK_EQ_INT(symlink(target, p), 0);
	path_in(&c, "selfmaps", p, sizeof(p));
	CHECK_EQ_INT(symlink("/proc/self/maps", p), 0);

	uint8_t *back = NULL;
	size_t len = 0;
	CHECK_EQ_INT(fread_data(&c, 1, "secret", &back, &len), EACCES);
	free(back);
	CHECK_EQ_INT(fread_data(&c, 2, "environ", &back, &len), EACCES);
	free(back);
	CHECK_EQ_INT(fread_data(&c, 3, "selfmaps", &back, &len), EACCES);
	free(back);
	CHECK_EQ_INT(fread_data(&c, 4, target, &back, &len), EACCES);
	free(back);
	snprintf(target, sizeof(target), "/proc/%d/fd", (int)c.init);
	struct entry_seen seen[8];
	int frames;
	CHECK_EQ_INT(list_dir(&c, 5, target, seen, 8, &frames), -EACCES);
	CHECK_EQ_INT(list_dir(&c, 6, "closed", seen, 8, &frames), -EACCES);
	CHECK_EQ_INT(list_dir(&c, 7, "rootdir", seen, 8, &frames), 1); /* 0755: readable */
	/* /proc entries that are nobody's own stay readable. */
	CHECK_EQ_INT(fread_data(&c, 8, "/proc/version", &back, &len), 0);
	CHECK(len > 0);
	free(back);

	CHECK_EQ_INT(fwrite_data(&c, 9, "rootdir/new", 0, 0, 0, (const uint8_t *)"x", 1, NULL),
		     EACCES);
	send_path(&c, SL_MSG_MKDIR, 10, "rootdir/sub", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 10, NULL), EACCES);
	send_path(&c, SL_MSG_REMOVE, 11, "rootdir/f", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 11, NULL), EACCES);
	send_path(&c, SL_MSG_REMOVE, 12, "rootdir", 1, 1);
	CHECK_EQ_INT(expect_reply(&c, 12, NULL), EACCES);
	path_in(&c, "rootdir/f", p, sizeof(p));
	CHECK_EQ_INT(access(p, F_OK), 0);

	/* What the user may do works, and belongs to the user. */
	CHECK_EQ_INT(fwrite_data(&c, 13, "mine/deep/file", 0, 0, 1, (const uint8_t *)"ok", 2, NULL), 0);
	send_path(&c, SL_MSG_MKDIR, 14, "made", 0, 0);
	CHECK_EQ_INT(expect_reply(&c, 14, NULL), 0);
	static const char *const made[] = { "mine", "mine/deep", "mine/deep/file", "made" };
	for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
		struct stat st = { 0 };
		path_in(&c, made[i], p, sizeof(p));
		CHECK_EQ_INT(stat(p, &st), 0);
		CHECK_EQ_INT(st.st_uid, user);
		CHECK_EQ_INT(st.st_gid, user);
	}
	CHECK_EQ_INT(fread_data(&c, 15, "mine/deep/file", &back, &len), 0);
	CHECK(len == 2 && back && memcmp(back, "ok", 2) == 0);
	free(back);
	send_path(&c, SL_MSG_REMOVE, 16, "mine", 1, 1);
	CHECK_EQ_INT(expect_reply(&c, 16, NULL), 0);
	/* Init itself is still root: it can start commands as before. */
	struct result r;
	run_cmd(&c, 17, (const char *const[]){ "true", NULL }, &r);
	CHECK_EQ_INT(r.code, 0);
	result_free(&r);
	stop_init(&c);
}

/* Mount points are not crossed by REMOVE (needs privilege to mount). */
static void test_remove_mount(void)
{
	if (geteuid() != 0)
		tap_skip("mounting a tmpfs needs root");
	if (unshare(CLONE_NEWNS) < 0)
		tap_skip("no mount namespaces");
	CHECK_EQ_INT(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
	struct client c;
	start_init(&c);
	skip_hello(&c);
	char p[160], f[200];
	path_in(&c, "t", p, sizeof(p));
	CHECK_EQ_INT(mkdir(p, 0755), 0);
	path_in(&c, "t/m", p, sizeof(p));
	CHECK_EQ_INT(mkdir(p, 0755), 0);
	CHECK_EQ_INT(mount("tmpfs", p, "tmpfs", 0, "size=1m"), 0);
	snprintf(f, sizeof(f), "%s/inside", p);
	close(open(f, O_WRONLY | O_CREAT, 0644));
	send_path(&c, SL_MSG_REMOVE, 1, "t", 1, 1);
	CHECK_EQ_INT(expect_reply(&c, 1, NULL), EXDEV);
	CHECK_EQ_INT(access(f, F_OK), 0);
	umount2(p, MNT_DETACH);
	stop_init(&c);
}

/* --- change tracking --------------------------------------------------- */

struct change_seen {
	char kind, type;
	char path[200];
	uint64_t size;
};

/* SCAN with MAX_BYTES and MEMORY records (0: left out); returns the
 * number of changes (or -errno), *truncated from OK, and if payload is not
 * NULL the bytes of CHANGES payload received. */
static int scan_limits(struct client *c, uint32_t id, int baseline, uint64_t max_bytes,
		       uint64_t memory, struct change_seen *v, int max, int *truncated,
		       uint64_t *payload)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_SCAN, 0, id);
	if (baseline)
		sl_msg_put_u32(&m, SL_TAG_FLAGS, 1);
	if (max_bytes)
		sl_msg_put_u64(&m, SL_TAG_MAX_BYTES, max_bytes);
	if (memory)
		sl_msg_put_u64(&m, SL_TAG_MEMORY, memory);
	send_msg(c, &m);
	if (payload)
		*payload = 0;
	int n = 0;
	for (;;) {
		struct frame f;
		if (next_frame(c, &f) != 1)
			return -9999;
		CHECK_EQ_INT(f.stream, id);
		if (f.type == SL_MSG_OK) {
			*truncated = rec_u8(&f, SL_TAG_TRUNCATED, 0);
			frame_free(&f);
			return n;
		}
		if (f.type == SL_MSG_ERROR) {
			int e = (int)rec_u32(&f, SL_TAG_ERRNO, 0);
			frame_free(&f);
			return -e;
		}
		CHECK_EQ_INT(f.type, SL_MSG_CHANGES);
		if (payload)
			*payload += f.len;
		struct sl_rec_iter it;
		struct sl_rec r;
		sl_rec_iter_init(&it, f.p, f.len);
		struct change_seen *e = NULL;
		while (sl_rec_next(&it, &r) == 1) {
			uint8_t u;
			if (r.tag == SL_TAG_KIND) {
				e = n < max ? &v[n] : NULL;
				n++;
				if (e) {
					memset(e, 0, sizeof(*e));
					sl_rec_u8(&r, &u);
					e->kind = (char)u;
				}
			} else if (e && r.tag == SL_TAG_PATH) {
				snprintf(e->path, sizeof(e->path), "%.*s", (int)r.len,
					 (const char *)r.val);
			} else if (e && r.tag == SL_TAG_FTYPE) {
				sl_rec_u8(&r, &u);
				e->type = (char)u;
			} else if (e && r.tag == SL_TAG_SIZE) {
				sl_rec_u64(&r, &e->size);
			}
		}
		frame_free(&f);
	}
}

static int scan(struct client *c, uint32_t id, int baseline, struct change_seen *v, int max,
		int *truncated)
{
	return scan_limits(c, id, baseline, 0, 0, v, max, truncated, NULL);
}

static const struct change_seen *find_change(const struct change_seen *v, int n,
					     const struct client *c, const char *rel)
{
	char want[200];
	path_in(c, rel, want, sizeof(want));
	for (int i = 0; i < n; i++)
		if (!strcmp(v[i].path, want))
			return &v[i];
	return NULL;
}

static void write_file(const struct client *c, const char *rel, const char *text)
{
	char p[200];
	path_in(c, rel, p, sizeof(p));
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0);
	CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
}

static void test_scan(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	write_file(&c, "keep.txt", "same");
	write_file(&c, "edit.txt", "before");
	write_file(&c, "gone.txt", "bye");
	char p[200];
	path_in(&c, "olddir", p, sizeof(p));
	mkdir(p, 0755);
	write_file(&c, "olddir/inner", "x");

	struct change_seen v[64];
	int trunc;
	/* The first SCAN reports everything since init started as created. */
	int n = scan(&c, 1, 0, v, 64, &trunc);
	CHECK_EQ_INT(n, 5);
	CHECK(!trunc);
	CHECK(find_change(v, n, &c, "olddir/inner") != NULL);
	/* Baseline only: nothing reported. */
	CHECK_EQ_INT(scan(&c, 2, 1, v, 64, &trunc), 0);

	write_file(&c, "new.txt", "hello");
	path_in(&c, "newdir/deeper", p, sizeof(p));
	char q[200];
	path_in(&c, "newdir", q, sizeof(q));
	mkdir(q, 0755);
	mkdir(p, 0755);
	write_file(&c, "newdir/deeper/f", "1234567");
	write_file(&c, "edit.txt", "after, longer");
	path_in(&c, "gone.txt", p, sizeof(p));
	unlink(p);
	write_file(&c, "olddir/inner2", "y"); /* olddir itself: not reported */
	path_in(&c, "link", p, sizeof(p));
	CHECK_EQ_INT(symlink("/etc", p), 0); /* never followed */

	n = scan(&c, 3, 0, v, 64, &trunc);
	for (int i = 0; i < n && i < 64; i++)
		printf("#   %c %c %s %llu\n", v[i].kind, v[i].type, v[i].path,
		       (unsigned long long)v[i].size);
	CHECK_EQ_INT(n, 8);
	const struct change_seen *e;
	e = find_change(v, n, &c, "new.txt");
	CHECK(e && e->kind == 'c' && e->type == 'f' && e->size == 5);
	e = find_change(v, n, &c, "newdir");
	CHECK(e && e->kind == 'c' && e->type == 'd');
	e = find_change(v, n, &c, "newdir/deeper");
	CHECK(e && e->kind == 'c' && e->type == 'd');
	e = find_change(v, n, &c, "newdir/deeper/f");
	CHECK(e && e->kind == 'c' && e->size == 7);
	e = find_change(v, n, &c, "edit.txt");
	CHECK(e && e->kind == 'm' && e->size == 13);
	e = find_change(v, n, &c, "gone.txt");
	CHECK(e && e->kind == 'd' && e->type == 'f' && e->size == 0);
	e = find_change(v, n, &c, "olddir/inner2");
	CHECK(e && e->kind == 'c');
	e = find_change(v, n, &c, "link");
	CHECK(e && e->kind == 'c' && e->type == 'l');
	CHECK(find_change(v, n, &c, "olddir") == NULL);
	CHECK(find_change(v, n, &c, "keep.txt") == NULL);

	/* Nothing changed since: nothing reported. */
	CHECK_EQ_INT(scan(&c, 4, 0, v, 64, &trunc), 0);
	/* A directory removed with its contents: each entry deleted. */
	send_path(&c, SL_MSG_REMOVE, 5, "newdir", 1, 1);
	CHECK_EQ_INT(expect_reply(&c, 5, NULL), 0);
	n = scan(&c, 6, 0, v, 64, &trunc);
	CHECK_EQ_INT(n, 3);
	for (int i = 0; i < n; i++)
		CHECK(v[i].kind == 'd');
	stop_init(&c);
}

/* More entries than INIT_SCAN_LIMIT: TRUNCATED, and what lies within the
 * part both scans saw is still compared correctly. */
static void test_scan_truncated(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	char p[200];
	path_in(&c, "a-first.txt", p, sizeof(p));
	close(open(p, O_WRONLY | O_CREAT, 0644));
	path_in(&c, "many", p, sizeof(p));
	CHECK_EQ_INT(mkdir(p, 0755), 0);
	int dfd = open(p, O_RDONLY | O_DIRECTORY);
	for (int i = 0; i < INIT_SCAN_LIMIT + 10; i++) {
		char name[32];
		snprintf(name, sizeof(name), "%06d", i);
		int fd = openat(dfd, name, O_WRONLY | O_CREAT, 0644);
		CHECK(fd >= 0);
		close(fd);
	}
	close(dfd);
	struct change_seen v[8];
	int trunc = 0;
	CHECK_EQ_INT(scan(&c, 1, 1, v, 8, &trunc), 0);
	CHECK_EQ_INT(trunc, 1);
	/* Within the part seen: a deletion is reported; past the cut
	 * ("zz-late.txt" sorts after "many/..."), nothing is. */
	path_in(&c, "a-first.txt", p, sizeof(p));
	unlink(p);
	write_file(&c, "zz-late.txt", "late");
	int n = scan(&c, 2, 0, v, 8, &trunc);
	CHECK_EQ_INT(trunc, 1);
	CHECK_EQ_INT(n, 1);
	const struct change_seen *e = find_change(v, n, &c, "a-first.txt");
	CHECK(e && e->kind == 'd');
	stop_init(&c);
}

/* nfiles files with names of about 250 bytes, in a chain of `depth`
 * directories with 250-byte names under dir (paths of about 3.7 KB with
 * depth 14): the tree of the attack that made init run out of memory. */
static void long_path_tree(const struct client *c, const char *dir, int depth, int nfiles)
{
	char p[4096];
	path_in(c, dir, p, sizeof(p));
	CHECK_EQ_INT(mkdir(p, 0755), 0);
	for (int i = 0; i < depth; i++) {
		size_t l = strlen(p);
		snprintf(p + l, sizeof(p) - l, "/d%02d", i);
		memset(p + l + 4, 'x', 246);
		p[l + 250] = '\0';
		CHECK_EQ_INT(mkdir(p, 0755), 0);
	}
	int dfd = open(p, O_RDONLY | O_DIRECTORY);
	CHECK(dfd >= 0);
	char name[256];
	memset(name, 'y', 250);
	name[250] = '\0';
	for (int i = 0; i < nfiles; i++) {
		snprintf(name, 9, "%08d", i);
		name[8] = 'y';
		int fd = openat(dfd, name, O_WRONLY | O_CREAT, 0644);
		CHECK(fd >= 0);
		close(fd);
	}
	close(dfd);
}

/* The walk keeps to MEMORY: a tree of long paths far bigger than it is
 * cut (TRUNCATED) and init's memory stays near the budget, not near the
 * tree's size; what lies before the cut is still compared, and a later
 * SCAN still finds later changes there. */
static void test_scan_memory_limit(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	write_file(&c, "a-first.txt", "x");
	/* 8,000 paths of ~3.7 KB: ~30 MB of paths (the snapshot of the old
	 * code was that, the baseline that again, the changes that again). */
	long_path_tree(&c, "deep", 14, 8000);
	long before = vm_kb(c.init, "VmHWM:");
	const uint64_t memory = 2u << 20;
	struct change_seen v[16];
	int trunc = 0;
	CHECK_EQ_INT(scan_limits(&c, 1, 1, 0, memory, v, 16, &trunc, NULL), 0);
	CHECK_EQ_INT(trunc, 1);
	uint64_t payload = 0;
	int n = scan_limits(&c, 2, 0, 0, memory, v, 16, &trunc, &payload);
	CHECK_EQ_INT(n, 0);
	CHECK_EQ_INT(trunc, 1);
	long grown = vm_kb(c.init, "VmHWM:") - before;
	printf("#   init peak RSS grew by %ld KiB scanning ~30 MB of paths with MEMORY %llu KiB\n",
	       grown, (unsigned long long)(memory >> 10));
#if defined(__SANITIZE_ADDRESS__)
	printf("#   (RSS bound not checked under AddressSanitizer: its quarantine keeps freed memory)\n");
#else
	CHECK(grown >= 0 && grown < 3 * (long)(memory >> 10) + 2048);
#endif
	/* Within the part walked, changes are still found. */
	char p[200];
	path_in(&c, "a-first.txt", p, sizeof(p));
	unlink(p);
	n = scan_limits(&c, 3, 0, 0, memory, v, 16, &trunc, NULL);
	CHECK_EQ_INT(n, 1);
	CHECK(n == 1 && v[0].kind == 'd');
	write_file(&c, "a-second.txt", "y");
	n = scan_limits(&c, 4, 0, 0, memory, v, 16, &trunc, NULL);
	CHECK_EQ_INT(n, 1);
	CHECK(n == 1 && v[0].kind == 'c');
	stop_init(&c);
}

/* One directory of many long names: reading it keeps only what can fit,
 * so init's memory does not grow with the directory either. */
static void test_scan_big_directory(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	long_path_tree(&c, "flat", 0, 40000); /* ~10 MB of names */
	long before = vm_kb(c.init, "VmHWM:");
	struct change_seen v[4];
	int trunc = 0;
	CHECK_EQ_INT(scan_limits(&c, 1, 1, 0, 1u << 20, v, 4, &trunc, NULL), 0);
	CHECK_EQ_INT(trunc, 1);
	long grown = vm_kb(c.init, "VmHWM:") - before;
	printf("#   init peak RSS grew by %ld KiB reading 40,000 names of 250 bytes\n", grown);
#if defined(__SANITIZE_ADDRESS__)
	printf("#   (RSS bound not checked under AddressSanitizer: its quarantine keeps freed memory)\n");
#else
	CHECK(grown >= 0 && grown < 4096);
#endif
	stop_init(&c);
}

/* MAX_BYTES bounds the report: at most that much CHANGES payload, then
 * TRUNCATED.  The new snapshot is the baseline all the same: the next
 * SCAN reports only what changed after this one — including a change to a
 * file this report left out. */
static void test_scan_report_limit(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	struct change_seen v[8];
	int trunc = 0;
	CHECK_EQ_INT(scan(&c, 1, 1, v, 8, &trunc), 0);
	long_path_tree(&c, "many", 2, 2000); /* 2,000 paths of ~800 bytes */
	uint64_t payload = 0;
	const uint64_t max = 64u << 10;
	int n = scan_limits(&c, 2, 0, max, 0, v, 8, &trunc, &payload);
	printf("#   %d changes, %llu payload bytes, truncated %d\n", n, (unsigned long long)payload,
	       trunc);
	CHECK_EQ_INT(trunc, 1);
	CHECK(n > 10 && n < 2000);
	/* Frames carry 12-byte headers; records are what the limit counts. */
	CHECK(payload <= max);
	CHECK_EQ_INT(scan_limits(&c, 3, 0, max, 0, v, 8, &trunc, NULL), 0);
	CHECK_EQ_INT(trunc, 0);
	/* The last file, never reported: modified now, reported now. */
	char p[4096];
	path_in(&c, "many", p, sizeof(p));
	for (int i = 0; i < 2; i++) {
		size_t l = strlen(p);
		snprintf(p + l, sizeof(p) - l, "/d%02d", i);
		memset(p + l + 4, 'x', 246);
		p[l + 250] = '\0';
	}
	size_t l = strlen(p);
	snprintf(p + l, sizeof(p) - l, "/%08d", 1999);
	memset(p + l + 9, 'y', 242);
	p[l + 251] = '\0';
	int fd = open(p, O_WRONLY | O_APPEND);
	CHECK(fd >= 0 && write(fd, "more", 4) == 4);
	close(fd);
	n = scan_limits(&c, 4, 0, max, 0, v, 8, &trunc, NULL);
	CHECK_EQ_INT(n, 1);
	CHECK(n == 1 && v[0].kind == 'm' && v[0].size == 4);
	CHECK_EQ_INT(trunc, 0);
	stop_init(&c);
}

/* Several streams at once: two commands and a file read, interleaved on
 * the one connection, each complete and in order. */
static void test_concurrent_streams(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	size_t flen = 1u << 20;
	uint8_t *fdata = malloc(flen);
	for (size_t i = 0; i < flen; i++)
		fdata[i] = (uint8_t)(i % 253);
	CHECK_EQ_INT(fwrite_data(&c, 1, "f.bin", 0, 0, 0, fdata, flen, NULL), 0);

	send_exec(&c, 10,
		  (const char *[]){ "sh", "-c", "for i in 1 2 3 4 5; do echo a$i; sleep 0.02; done", NULL },
		  0, NULL);
	send_exec(&c, 11,
		  (const char *[]){ "sh", "-c", "for i in 1 2 3 4 5; do echo b$i >&2; sleep 0.01; done",
				    NULL },
		  0, NULL);
	send_path(&c, SL_MSG_FREAD, 12, "f.bin", 0, 0);
	send_empty(&c, SL_MSG_PING, 13);
	char *out[2] = { calloc(1, 1), calloc(1, 1) };
	size_t outlen[2] = { 0, 0 };
	uint8_t *got = NULL;
	size_t got_len = 0;
	int done = 0, pinged = 0;
	while (done < 3) {
		struct frame f;
		if (next_frame(&c, &f) != 1)
			break;
		if (f.stream == 10 || f.stream == 11) {
			int k = (int)f.stream - 10;
			if ((f.type == SL_MSG_STDOUT || f.type == SL_MSG_STDERR) && f.len) {
				append(&out[k], &outlen[k], f.p, f.len);
				send_u32(&c, SL_MSG_CREDIT, f.stream, SL_TAG_CREDIT, f.len);
			} else if (f.type == SL_MSG_EXIT) {
				CHECK_EQ_INT(rec_u32(&f, SL_TAG_EXIT_CODE, 99), 0);
				done++;
			}
		} else if (f.stream == 12) {
			if (f.type == SL_MSG_DATA) {
				char *b = (char *)got;
				append(&b, &got_len, f.p, f.len);
				got = (uint8_t *)b;
				if (f.len)
					send_u32(&c, SL_MSG_CREDIT, 12, SL_TAG_CREDIT, f.len);
			} else {
				CHECK_EQ_INT(f.type, SL_MSG_OK);
				done++;
			}
		} else if (f.stream == 13) {
			CHECK_EQ_INT(f.type, SL_MSG_OK);
			pinged = 1;
		}
		frame_free(&f);
	}
	CHECK_EQ_INT(done, 3);
	CHECK(pinged);
	CHECK_STR(out[0], "a1\na2\na3\na4\na5\n");
	CHECK_STR(out[1], "b1\nb2\nb3\nb4\nb5\n");
	CHECK(got_len == flen && got && memcmp(got, fdata, flen) == 0);
	free(out[0]);
	free(out[1]);
	free(got);
	free(fdata);
	stop_init(&c);
}

/* --- the connection ---------------------------------------------------- */

/* --- CONFIG ------------------------------------------------------------------ */

/* HELLO, then init's ERROR on stream 0 (its errno, returned; the message
 * must hold needle), then EOF and exit status 1. */
static int expect_refused(struct client *c, const char *needle)
{
	struct frame f;
	int err = -1;
	CHECK_EQ_INT(next_frame(c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_HELLO);
	frame_free(&f);
	if (next_frame(c, &f) == 1) {
		char msg[512];
		CHECK_EQ_INT(f.type, SL_MSG_ERROR);
		CHECK_EQ_INT(f.stream, 0);
		err = (int)rec_u32(&f, SL_TAG_ERRNO, 0);
		rec_str(&f, SL_TAG_MESSAGE, msg, sizeof(msg));
		printf("#   (ERROR %d: %s)\n", err, msg);
		if (!strstr(msg, needle)) {
			printf("#   the message does not name \"%s\"\n", needle);
			CHECK(!"the ERROR names what was wrong");
		}
		frame_free(&f);
	} else {
		CHECK(!"an ERROR on stream 0");
	}
	CHECK_EQ_INT(next_frame(c, &f), -1);
	stop_init_status(c, 1);
	return err;
}

/* A CONFIG that is malformed (EPROTO) or holds a bad value (EINVAL) is
 * answered with an ERROR naming the record, and init exits 1 without
 * serving anything. */
static void test_config_refused(void)
{
	static const char nul_host[] = { 'a', 0, 'b' };
	static const uint8_t half[] = { 0x01 };
	static const struct sock_filter one_insn[1];
	enum { U32, U64, STR, BYTES, RAW, NET };
	static const struct bad {
		int kind;
		uint16_t tag;
		uint64_t n;
		const void *p;
		size_t len;
		int err;
		const char *needle;
	} cases[] = {
		{ U32, SL_TAG_FLAGS, SL_CONFIG_NO_SECCOMP | 0x10, NULL, 0, EINVAL, "FLAGS" },
		{ U32, SL_TAG_UID, UINT32_MAX, NULL, 0, EINVAL, "UID" },
		{ U32, SL_TAG_GID, UINT32_MAX, NULL, 0, EINVAL, "GID" },
		{ U32, SL_TAG_NOFILE, 1024, NULL, 0, EPROTO, "NOFILE" },
		{ U64, SL_TAG_PIDS, 64, NULL, 0, EPROTO, "PIDS" },
		{ STR, SL_TAG_USER, 0, "a:b", 0, EINVAL, "USER" },
		{ STR, SL_TAG_USER, 0, "", 0, EINVAL, "USER" },
		{ STR, SL_TAG_HOSTNAME, 0, "", 0, EINVAL, "HOSTNAME" },
		{ BYTES, SL_TAG_HOSTNAME, 0, nul_host, sizeof(nul_host), EPROTO, "HOSTNAME" },
		{ STR, SL_TAG_HOME, 0, "home/user", 0, EINVAL, "HOME" },
		{ STR, SL_TAG_HOME, 0, "/home/user/", 0, EINVAL, "HOME" },
		{ STR, SL_TAG_WORKDIR, 0, "src", 0, EINVAL, "WORKDIR" },
		{ BYTES, SL_TAG_SECCOMP, 0, "0123456789ab", 12, EINVAL, "SECCOMP record of 12 bytes" },
		{ BYTES, SL_TAG_SECCOMP, 0, one_insn, sizeof(one_insn), EINVAL, "NO_SECCOMP" },
		{ U32, SL_TAG_FLAGS, 0, NULL, 0, EINVAL, "no SECCOMP record" },
		{ U32, SL_TAG_FLAGS, SL_CONFIG_NO_SECCOMP | SL_CONFIG_TMPFS, NULL, 0, EINVAL, "DISK" },
		{ RAW, 0, 0, half, sizeof(half), EPROTO, "truncated record" },
		/* A VM guest's NIC: complete, and only for a VM's guest. */
		{ U32, SL_TAG_NET_ADDR, 0x0a00020f, NULL, 0, EINVAL, "NET_ADDR needs NET_PREFIX" },
		{ U32, SL_TAG_NET_DNS, 0x0a000203, NULL, 0, EINVAL, "NET_* records without NET_ADDR" },
		{ U64, SL_TAG_NET_RELAY, 1, NULL, 0, EPROTO, "NET_*" },
		{ NET, 0, 0, NULL, 0, EINVAL, "for a VM's guest" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct bad *b = &cases[i];
		struct client c;
		struct init_opts o = { .no_config = 1 };
		start_init_opts(&c, &o);
		struct sl_msg extra;
		sl_msg_begin(&extra, SL_MSG_CONFIG, 0, 0);
		switch (b->kind) {
		case U32:
			sl_msg_put_u32(&extra, b->tag, (uint32_t)b->n);
			break;
		case U64:
			sl_msg_put_u64(&extra, b->tag, b->n);
			break;
		case STR:
			sl_msg_put_str(&extra, b->tag, b->p);
			break;
		case BYTES:
			sl_msg_put_bytes(&extra, b->tag, b->p, b->len);
			break;
		case NET:
			sl_msg_put_u32(&extra, SL_TAG_NET_ADDR, 0x0a00020f);
			sl_msg_put_u32(&extra, SL_TAG_NET_PREFIX, 24);
			sl_msg_put_u32(&extra, SL_TAG_NET_GATEWAY, 0x0a000202);
			sl_msg_put_u32(&extra, SL_TAG_NET_DNS, 0x0a000203);
			break;
		default:
			sl_msg_put_raw(&extra, b->p, b->len);
		}
		send_config_with(&c, getuid(), &extra);
		sl_msg_free(&extra);
		printf("# case %zu\n", i);
		CHECK_EQ_INT(expect_refused(&c, b->needle), b->err);
	}
}

/* The host's first frame must be CONFIG: anything else (a PING here) is
 * refused and init exits 1. */
static void test_config_first(void)
{
	struct client c;
	struct init_opts o = { .no_config = 1 };
	start_init_opts(&c, &o);
	send_empty(&c, SL_MSG_PING, 0);
	CHECK_EQ_INT(expect_refused(&c, "first frame was not CONFIG"), EPROTO);
}

/* What CONFIG says is applied (WORKDIR: the working directory of a
 * command without CWD; unknown tags ignored), requests sent in the same
 * write as CONFIG are served without waiting for more input, and a second
 * CONFIG is refused without harm. */
static void test_config_applied_pipelined(void)
{
	struct client c;
	struct init_opts o = { .no_config = 1 };
	start_init_opts(&c, &o);
	char work[128];
	path_in(&c, "work", work, sizeof(work));
	CHECK(mkdir(work, 0755) == 0);

	struct sl_msg extra, exec;
	sl_msg_begin(&extra, SL_MSG_CONFIG, 0, 0);
	sl_msg_put_str(&extra, SL_TAG_WORKDIR, work);
	sl_msg_put_str(&extra, 999, "a record of a later version");
	struct sl_msg cfg;
	sl_msg_begin(&cfg, SL_MSG_CONFIG, 0, 0);
	sl_msg_put_u32(&cfg, SL_TAG_FLAGS, SL_CONFIG_NO_SECCOMP | SL_CONFIG_NO_WARM);
	sl_msg_put_str(&cfg, SL_TAG_HOME, c.home);
	sl_msg_put_u32(&cfg, SL_TAG_UID, (uint32_t)getuid());
	sl_msg_put_u32(&cfg, SL_TAG_GID, (uint32_t)getgid());
	sl_msg_put_raw(&cfg, extra.buf + SANDLOT_PROTO_HEADER, extra.len - SANDLOT_PROTO_HEADER);
	sl_msg_free(&extra);
	sl_msg_begin(&exec, SL_MSG_EXEC, 0, 1);
	sl_msg_put_str(&exec, SL_TAG_ARG, "pwd");
	sl_msg_put_str(&exec, SL_TAG_ENV, TEST_PATH);
	CHECK(sl_msg_finish(&cfg) == 0 && sl_msg_finish(&exec) == 0);
	/* Both in one write: init reads them together. */
	uint8_t both[4096];
	if (cfg.len + exec.len > sizeof(both))
		abort();
	memcpy(both, cfg.buf, cfg.len);
	memcpy(both + cfg.len, exec.buf, exec.len);
	CHECK(send(c.fd, both, cfg.len + exec.len, MSG_NOSIGNAL) == (ssize_t)(cfg.len + exec.len));
	sl_msg_free(&cfg);
	sl_msg_free(&exec);

	struct frame f;
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_HELLO);
	frame_free(&f);
	CHECK_EQ_INT(expect_reply(&c, 0, NULL), 0);
	struct result r;
	run_to_exit(&c, 1, &r);
	CHECK(r.exited && r.code == 0);
	char want[160];
	snprintf(want, sizeof(want), "%s\n", work);
	CHECK_STR(r.out, want);
	result_free(&r);

	send_config_with(&c, getuid(), NULL);
	CHECK_EQ_INT(expect_reply(&c, 0, NULL), EINVAL);
	send_empty(&c, SL_MSG_PING, 9);
	CHECK_EQ_INT(expect_reply(&c, 9, NULL), 0);
	stop_init(&c);
}

static void test_malformed_frame(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	send_exec(&c, 1, (const char *[]){ "sleep", "30", NULL }, 0, NULL);
	struct frame f;
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_STARTED);
	frame_free(&f);
	/* Reserved bits set: fatal.  Init closes the connection, kills the
	 * running command and exits 1. */
	uint8_t h[SANDLOT_PROTO_HEADER];
	sl_header_encode(h, 0, SL_MSG_PING, 0, 2);
	h[6] = 1;
	CHECK(send(c.fd, h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h));
	CHECK_EQ_INT(next_frame(&c, &f), -1);
	stop_init_status(&c, 1);
}

static void test_oversized_frame(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	uint8_t h[SANDLOT_PROTO_HEADER];
	sl_header_encode(h, SANDLOT_PROTO_MAX_PAYLOAD + 1, SL_MSG_DATA, 0, 2);
	CHECK(send(c.fd, h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h));
	struct frame f;
	CHECK_EQ_INT(next_frame(&c, &f), -1);
	stop_init_status(&c, 1);
}

static void test_shutdown(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	/* The session leader says it runs (after setsid) before the shutdown. */
	send_exec(&c, 1,
		  (const char *[]){ "sh", "-c", "setsid sh -c 'echo ready; exec sleep 30' & sleep 30",
				    NULL },
		  0, NULL);
	struct frame f;
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_STARTED);
	frame_free(&f);
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_STDOUT);
	CHECK(f.len == 6 && memcmp(f.p, "ready\n", 6) == 0);
	frame_free(&f);
	send_empty(&c, SL_MSG_SHUTDOWN, 0);
	CHECK_EQ_INT(next_frame(&c, &f), -1);
	stop_init(&c);
}

/* Sending STDIN beyond the credit window is a protocol violation. */
static void test_stdin_overrun(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	/* A command that never reads stdin. */
	send_exec(&c, 1, (const char *[]){ "sleep", "30", NULL }, 1, NULL);
	struct frame f;
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK_EQ_INT(f.type, SL_MSG_STARTED);
	frame_free(&f);
	static uint8_t junk[65536];
	for (size_t sent = 0; sent <= SANDLOT_PROTO_WINDOW + 2 * sizeof(junk); sent += sizeof(junk)) {
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_STDIN, 0, 1);
		sl_msg_put_raw(&m, junk, sizeof(junk));
		send_msg(&c, &m);
	}
	int r;
	while ((r = next_frame(&c, &f)) == 1)
		frame_free(&f); /* CREDITs for what the pipe took */
	CHECK_EQ_INT(r, -1);
	stop_init_status(&c, 1);
}


/* DETACH (spec/protocol.md, "Detaching"): refused outside a VM; in one,
 * answered last, then nothing is sent (the output of running commands is
 * read and dropped) and nothing but CONFIG is answered, until a CONFIG
 * re-attaches: HELLO, OK, and the commands of before still run, their
 * stream ids free.  (No TIME or SEED here: they would set this host's
 * clock.) */
static void test_detach_reattach(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	send_empty(&c, SL_MSG_DETACH, 5);
	CHECK_EQ_INT(expect_reply(&c, 5, NULL), ENOTSUP);
	stop_init(&c);

	init__vm_mode = 1; /* inherited by the init the case forks */
	start_init(&c);
	skip_hello(&c);
	/* A command that writes all the time. */
	send_exec(&c, 1, (const char *[]){ "sh", "-c", "while :; do echo x; sleep 0.01; done", NULL },
		  0, NULL);
	struct frame f;
	int pid = 0;
	while (!pid) {
		REQUIRE(next_frame(&c, &f) == 1);
		if (f.stream == 1 && f.type == SL_MSG_STARTED)
			pid = (int)rec_u32(&f, SL_TAG_PID, 0);
		frame_free(&f);
	}
	REQUIRE(pid > 0);
	send_empty(&c, SL_MSG_DETACH, 2);
	/* Its output may come before the OK, never after it. */
	for (;;) {
		REQUIRE(next_frame(&c, &f) == 1);
		int ok = f.stream == 2 && f.type == SL_MSG_OK;
		CHECK(ok || (f.stream == 1 && f.type == SL_MSG_STDOUT));
		frame_free(&f);
		if (ok)
			break;
	}
	send_empty(&c, SL_MSG_PING, 3);
	CHECK_EQ_INT(next_frame_ms(&c, &f, 300), 0); /* silence */
	CHECK_EQ_INT(kill(pid, 0), 0);

	send_config_with(&c, getuid(), NULL);
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK(f.type == SL_MSG_HELLO && f.stream == 0);
	CHECK_EQ_INT(rec_u32(&f, SL_TAG_VERSION, 0), SANDLOT_PROTO_VERSION);
	frame_free(&f);
	CHECK_EQ_INT(expect_reply(&c, 0, NULL), 0);
	/* Stream 1 is free again; the old command runs on, unheard. */
	struct result r;
	run_cmd(&c, 1, (const char *[]){ "echo", "again", NULL }, &r);
	CHECK_STR(r.out, "again\n");
	CHECK(!r.bad_order);
	result_free(&r);
	CHECK_EQ_INT(kill(pid, 0), 0);
	/* Re-attached, a second CONFIG is refused as before. */
	send_config_with(&c, getuid(), NULL);
	CHECK_EQ_INT(expect_reply(&c, 0, NULL), EINVAL);
	/* (In a VM a closed connection is a host away, not gone: SHUTDOWN.) */
	send_empty(&c, SL_MSG_SHUTDOWN, 0);
	stop_init(&c);
}

static void send_attach(struct client *c, uint32_t id, uint32_t pid)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_ATTACH, 0, id);
	if (pid)
		sl_msg_put_u32(&m, SL_TAG_PID, pid);
	send_msg(c, &m);
}

/* ATTACH (spec/protocol.md, "Detaching"): after a re-attach, the next host
 * takes over a command the DETACH left running by its pid: STARTED on the
 * new stream, then its stdin, output and exit as for EXEC.  Refused for no
 * PID, a pid no earlier host left, a command taken over already or ended;
 * outside a VM nothing is ever detached (ESRCH). */
static void test_detach_attach(void)
{
	struct client c;
	start_init(&c);
	skip_hello(&c);
	send_attach(&c, 3, 1);
	CHECK_EQ_INT(expect_reply(&c, 3, NULL), ESRCH);
	stop_init(&c);

	init__vm_mode = 1;
	start_init(&c);
	skip_hello(&c);
	/* An interpreter-like command: reads stdin, answers each line. */
	send_exec(&c, 1, (const char *[]){ "sh", "-c", "while read l; do echo got $l; done", NULL },
		  1, NULL);
	struct frame f;
	int pid = 0;
	while (!pid) {
		REQUIRE(next_frame(&c, &f) == 1);
		if (f.stream == 1 && f.type == SL_MSG_STARTED)
			pid = (int)rec_u32(&f, SL_TAG_PID, 0);
		frame_free(&f);
	}
	send_empty(&c, SL_MSG_DETACH, 2);
	for (;;) {
		REQUIRE(next_frame(&c, &f) == 1);
		int ok = f.stream == 2 && f.type == SL_MSG_OK;
		frame_free(&f);
		if (ok)
			break;
	}
	/* Detached, ATTACH is not answered either. */
	send_attach(&c, 3, (uint32_t)pid);
	CHECK_EQ_INT(next_frame_ms(&c, &f, 300), 0);
	send_config_with(&c, getuid(), NULL);
	CHECK_EQ_INT(next_frame(&c, &f), 1);
	CHECK(f.type == SL_MSG_HELLO);
	frame_free(&f);
	CHECK_EQ_INT(expect_reply(&c, 0, NULL), 0);

	send_attach(&c, 4, 0);
	CHECK_EQ_INT(expect_reply(&c, 4, NULL), EINVAL);
	send_attach(&c, 4, (uint32_t)pid + 100000);
	CHECK_EQ_INT(expect_reply(&c, 4, NULL), ESRCH);
	send_attach(&c, 5, (uint32_t)pid);
	REQUIRE(next_frame(&c, &f) == 1);
	CHECK(f.stream == 5 && f.type == SL_MSG_STARTED);
	CHECK_EQ_INT((int)rec_u32(&f, SL_TAG_PID, 0), pid);
	frame_free(&f);
	/* Taken over already. */
	send_attach(&c, 6, (uint32_t)pid);
	CHECK_EQ_INT(expect_reply(&c, 6, NULL), ESRCH);
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_STDIN, SANDLOT_PROTO_FLAG_END, 5);
	sl_msg_put_raw(&m, "a\nb\n", 4);
	send_msg(&c, &m);
	struct result r;
	run_to_exit(&c, 5, &r);
	CHECK_STR(r.out, "got a\ngot b\n");
	CHECK(r.exited && r.code == 0);
	result_free(&r);
	/* Ended: nothing to take over. */
	send_attach(&c, 7, (uint32_t)pid);
	CHECK_EQ_INT(expect_reply(&c, 7, NULL), ESRCH);
	send_empty(&c, SL_MSG_SHUTDOWN, 0);
	stop_init(&c);
}

int main(void)
{
	tap_timeout_s = 60;
	TAP_RUN(test_hello_ping);
	TAP_RUN(test_detach_reattach);
	TAP_RUN(test_detach_attach);
	TAP_RUN(test_exec_echo);
	TAP_RUN(test_exit_codes);
	TAP_RUN(test_killed_signal);
	TAP_RUN(test_start_errors);
	TAP_RUN(test_stdin_cat);
	TAP_RUN(test_exit_events);
	TAP_RUN(test_flow_control);
	TAP_RUN(test_background_holder);
	TAP_RUN(test_fwrite_fread);
	TAP_RUN(test_fread_errors);
	TAP_RUN(test_fread_max_bytes);
	TAP_RUN(test_file_ops_user_creds);
	TAP_RUN(test_fwrite_parents_and_abort);
	TAP_RUN(test_fwrite_error_atomic);
	TAP_RUN(test_stat_list_mkdir_remove);
	TAP_RUN(test_remove_mount);
	TAP_RUN(test_scan);
	TAP_RUN(test_scan_truncated);
	TAP_RUN(test_scan_memory_limit);
	TAP_RUN(test_scan_big_directory);
	TAP_RUN(test_scan_report_limit);
	TAP_RUN(test_concurrent_streams);
	TAP_RUN(test_config_refused);
	TAP_RUN(test_config_first);
	TAP_RUN(test_config_applied_pipelined);
	TAP_RUN(test_malformed_frame);
	TAP_RUN(test_oversized_frame);
	TAP_RUN(test_shutdown);
	TAP_RUN(test_stdin_overrun);
	return tap_done();
}
