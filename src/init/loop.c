/* sandlot-init's serving loop: one thread, one poll() loop, non-blocking
 * descriptors everywhere (spec/protocol.md is the contract).
 *
 * Each iteration: let pumps produce (FREAD, LIST, SCAN) while the outgoing
 * queue is short, poll the connection (read always; write when frames are
 * queued), the SIGCHLD signalfd and the pipes of running commands, then
 * handle what is ready.  Init never blocks on the host: frames go into a
 * queue that is written as the socket accepts them, and the queue stays
 * bounded because every producer of bulk data stops at INIT_QUEUE_HIGH or
 * when its stream runs out of credit.
 */
#include "loop.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/cleanup.h"

/* One frame waiting to be written; buf is the finished sl_msg buffer. */
struct qframe {
	struct qframe *next;
	uint8_t *buf;
	size_t len, off;
};

void init__log(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* Best effort: init's stderr may be gone. */
	ssize_t w = write(STDERR_FILENO, "sandlot-init: ", 14);
	if (w > 0)
		w = write(STDERR_FILENO, line, (size_t)n);
	(void)w;
}

void init__fail(struct loop *l, int status, const char *why)
{
	if (!l->done) {
		if (status)
			init__log("%s", why);
		l->done = 1;
		l->status = status;
	}
}

/* Whatever the host left ignored (an execve keeps SIG_IGN) goes back to
 * the default, once, before init forks any command's process: a command's
 * child then has only what prepare() ignores to undo (child_signals() in
 * exec.c).  After OK, off the host's wait. */
static void reset_inherited_signals(void)
{
	static int done; /* by init_start_early() */
	if (done)
		return;
	done = 1;
	/* The kernel's sigaction, not libc's: musl refuses signals 32 to 34
	 * (its own), which a host may have left ignored all the same.  Only
	 * ignored ones are touched (a handler cannot be inherited). */
	struct {
		void (*handler)(int);
		unsigned long flags;
		void (*restorer)(void);
		uint64_t mask;
	} act, dfl = { .handler = SIG_DFL };
	for (int sig = 1; sig <= 64; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP || sig == SIGPIPE || sig == SIGXFSZ)
			continue;
		if (syscall(SYS_rt_sigaction, sig, NULL, &act, sizeof(act.mask)) == 0 &&
		    act.handler == SIG_IGN)
			syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof(dfl.mask));
	}
}

/* --- outgoing queue ----------------------------------------------------- */

void init__queue(struct loop *l, struct sl_msg *m)
{
	if (sl_msg_finish(m) < 0) {
		init__fail(l, 1, "cannot build a frame (out of memory)");
		return;
	}
	/* Detached, nothing goes out; the processes of an earlier host's
	 * commands (their streams' id is 0: detach()) are never heard of
	 * again.  Only HELLO, OK and ERROR are ever sent on stream 0. */
	uint8_t type = m->buf[4];
	uint32_t stream = (uint32_t)m->buf[8] | (uint32_t)m->buf[9] << 8 |
			  (uint32_t)m->buf[10] << 16 | (uint32_t)m->buf[11] << 24;
	if (l->detached || (stream == 0 && type != SL_MSG_HELLO && type != SL_MSG_OK &&
			    type != SL_MSG_ERROR)) {
		sl_msg_free(m);
		return;
	}
	struct qframe *q = malloc(sizeof(*q));
	if (!q) {
		sl_msg_free(m);
		init__fail(l, 1, "cannot queue a frame (out of memory)");
		return;
	}
	q->next = NULL;
	q->buf = m->buf;
	q->len = m->len;
	q->off = 0;
	m->buf = NULL;
	m->len = m->cap = 0;
	if (l->qtail)
		l->qtail->next = q;
	else
		l->qhead = q;
	l->qtail = q;
	l->qbytes += q->len;
}

static void queue_free(struct loop *l)
{
	while (l->qhead) {
		struct qframe *q = l->qhead;
		l->qhead = q->next;
		free(q->buf);
		free(q);
	}
	l->qtail = NULL;
	l->qbytes = 0;
}

/* Write queued frames until the socket would block.  A write error means
 * the host is gone. */
static void queue_flush(struct loop *l)
{
	while (l->qhead) {
		struct iovec iov[64];
		int n = 0;
		for (struct qframe *q = l->qhead; q && n < 64; q = q->next, n++) {
			iov[n].iov_base = q->buf + q->off;
			iov[n].iov_len = q->len - q->off;
		}
		ssize_t w = writev(l->fd, iov, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				init__fail(l, 0, "connection lost");
			return;
		}
		size_t left = (size_t)w;
		l->qbytes -= left;
		while (left > 0) {
			struct qframe *q = l->qhead;
			size_t part = q->len - q->off;
			if (left < part) {
				q->off += left;
				break;
			}
			left -= part;
			l->qhead = q->next;
			free(q->buf);
			free(q);
		}
		if (!l->qhead)
			l->qtail = NULL;
	}
}

void init__send_errorv(struct loop *l, uint32_t id, int err, char stage, const char *fmt,
		       va_list ap)
{
	char msg[INIT_PATH_MAX + 256];
	if (vsnprintf(msg, sizeof(msg), fmt, ap) < 0)
		msg[0] = '\0';
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_ERROR, 0, id);
	sl_msg_put_u32(&m, SL_TAG_ERRNO, (uint32_t)(err > 0 ? err : EIO));
	sl_msg_put_str(&m, SL_TAG_MESSAGE, msg);
	if (stage)
		sl_msg_put_u8(&m, SL_TAG_STAGE, (uint8_t)stage);
	init__queue(l, &m);
}

void init__send_error(struct loop *l, uint32_t id, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	init__send_errorv(l, id, err, 0, fmt, ap);
	va_end(ap);
}

void init__send_ok(struct loop *l, uint32_t id)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_OK, 0, id);
	init__queue(l, &m);
}

void init__send_data(struct loop *l, uint8_t type, uint8_t flags, uint32_t id, const void *p,
		     size_t n)
{
	struct sl_msg m;
	sl_msg_begin(&m, type, flags, id);
	sl_msg_put_raw(&m, p, n);
	init__queue(l, &m);
}

void init__send_credit(struct loop *l, uint32_t id, uint32_t n)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_CREDIT, 0, id);
	sl_msg_put_u32(&m, SL_TAG_CREDIT, n);
	init__queue(l, &m);
}

/* --- streams ------------------------------------------------------------ */

static struct stream *stream_find(struct loop *l, uint32_t id)
{
	for (struct stream *s = l->streams; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

struct stream *init__stream_new(struct loop *l, uint32_t id, const struct stream_ops *ops,
				void *data)
{
	struct stream *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->id = id;
	s->ops = ops;
	s->data = data;
	s->credit = SANDLOT_PROTO_WINDOW;
	s->next = l->streams;
	if (l->streams)
		l->streams->prev = s;
	l->streams = s;
	return s;
}

void init__stream_close(struct loop *l, struct stream *s)
{
	if (s->prev)
		s->prev->next = s->next;
	else
		l->streams = s->next;
	if (s->next)
		s->next->prev = s->prev;
	if (s->ops->destroy) {
		if (!s->ops->as_user || init__as_user(l) == 0) {
			s->ops->destroy(s);
			if (s->ops->as_user)
				init__as_init(l);
		}
	}
	free(s);
}

/* --- helpers for request handlers ---------------------------------------- */

char *init__rec_string(const struct sl_rec *r, int path)
{
	if (path && (r->len == 0 || r->len > INIT_PATH_MAX)) {
		errno = EINVAL;
		return NULL;
	}
	char *s = sl_rec_str(r);
	if (!s && path && errno == EPROTO)
		errno = EINVAL;
	return s;
}

int init__find_u32(const struct sl_frame_header *h, const uint8_t *payload, uint16_t tag,
		   uint32_t *out)
{
	struct sl_rec_iter it;
	struct sl_rec r;
	int rc, found = 0;
	sl_rec_iter_init(&it, payload, h->length);
	while ((rc = sl_rec_next(&it, &r)) == 1) {
		if (r.tag != tag || found)
			continue;
		if (sl_rec_u32(&r, out) < 0)
			return -1;
		found = 1;
	}
	return rc < 0 ? -1 : found;
}

void init__add_credit(struct stream *s, const struct sl_frame_header *h, const uint8_t *payload)
{
	uint32_t c;
	if (init__find_u32(h, payload, SL_TAG_CREDIT, &c) == 1)
		s->credit = s->credit > UINT64_MAX - c ? UINT64_MAX : s->credit + c;
}

char *init__abs_path(const struct loop *l, const char *path)
{
	if (path[0] == '/')
		return strdup(path);
	size_t hl = strlen(l->cfg->home), pl = strlen(path);
	if (hl == 1) /* home is "/" */
		hl = 0;
	if (hl + 1 + pl > INIT_PATH_MAX) {
		errno = ENAMETOOLONG;
		return NULL;
	}
	char *s = malloc(hl + 1 + pl + 1);
	if (!s)
		return NULL;
	memcpy(s, l->cfg->home, hl);
	s[hl] = '/';
	memcpy(s + hl + 1, path, pl + 1);
	return s;
}

/* --- dispatch ----------------------------------------------------------- */

static void ping_request(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	init__send_ok(l, h->stream);
}

typedef void (*request_fn)(struct loop *l, const struct sl_frame_header *h,
			   const uint8_t *payload);

/* The file operations the API asks for: with the sandbox user's
 * credentials (creds.c). */
static int request_as_user(uint8_t type)
{
	switch (type) {
	case SL_MSG_FWRITE:
	case SL_MSG_FREAD:
	case SL_MSG_STAT:
	case SL_MSG_LIST:
	case SL_MSG_MKDIR:
	case SL_MSG_REMOVE:
		return 1;
	default:
		return 0;
	}
}

static request_fn request_handler(uint8_t type)
{
	switch (type) {
	case SL_MSG_PING:
		return ping_request;
	case SL_MSG_ATTACH:
		return init__attach_request;
	case SL_MSG_EXEC:
		return init__exec_request;
	case SL_MSG_FWRITE:
		return init__fwrite_request;
	case SL_MSG_FREAD:
		return init__fread_request;
	case SL_MSG_STAT:
		return init__stat_request;
	case SL_MSG_LIST:
		return init__list_request;
	case SL_MSG_MKDIR:
		return init__mkdir_request;
	case SL_MSG_REMOVE:
		return init__remove_request;
	case SL_MSG_SCAN:
		return init__scan_request;
	default:
		return NULL;
	}
}

/* DETACH (a VM's host before it saves the VM, spec/protocol.md): the
 * guest's files reach its disks, every stream's host side ends without a
 * frame (commands keep running: their streams get id 0, unlimited credit,
 * and their output is read and dropped until a later host's ATTACH takes
 * one over: exec.c), OK goes out last, and from then on nothing is sent
 * until the next host's CONFIG. */
static void detach(struct loop *l, const struct sl_frame_header *h)
{
	if (!init__vm_mode) {
		init__send_error(l, h->stream, ENOTSUP, "only a VM's sandlot-init detaches");
		return;
	}
	sync();
	struct stream *next;
	for (struct stream *s = l->streams; s; s = next) {
		next = s->next;
		if (s->ops->poll_fds) {
			s->id = 0;
			s->credit = UINT64_MAX;
		} else {
			init__stream_close(l, s);
		}
	}
	init__send_ok(l, h->stream);
	l->detached = 1;
}

/* A detached init's next host: its CONFIG is a re-attach.  The sandbox is
 * set up already, so only TIME and SEED take effect (a restored VM's clock
 * and RNG); the answer is HELLO, then OK, as for a first CONFIG. */
static void reattach(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	struct init_config cfg;
	char why[256];
	int e = init_config_decode(payload, h->length, &cfg, why, sizeof(why));
	l->detached = 0;
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_HELLO, 0, 0);
	sl_msg_put_u32(&m, SL_TAG_VERSION, SANDLOT_PROTO_VERSION);
	init__queue(l, &m);
	if (e == 0) {
		/* (decode failures free cfg themselves) */
		e = init_vm_clock_and_seed(&cfg, why, sizeof(why));
		init_config_free(&cfg);
	}
	if (e == 0) {
		init__send_ok(l, 0);
		return;
	}
	init__send_error(l, 0, e, "%s", why);
	init__log("re-attach: %s", why);
}

/* Act on one well-formed frame.  The header has been validated by the
 * reader; everything about the payload is checked by the handlers. */
static void dispatch(struct loop *l, const struct sl_frame_header *h, const uint8_t *payload)
{
	if (l->detached) {
		/* Nothing of the earlier host's is left to answer. */
		if (h->type == SL_MSG_CONFIG && h->stream == 0)
			reattach(l, h, payload);
		return;
	}
	if (h->type == SL_MSG_DETACH) {
		if (h->stream && stream_find(l, h->stream))
			init__send_error(l, h->stream, EBUSY, "stream %u is already open", h->stream);
		else
			detach(l, h);
		return;
	}
	if (h->type == SL_MSG_SHUTDOWN) {
		init__fail(l, 0, "shutdown");
		return;
	}
	if (h->type == SL_MSG_CONFIG) {
		init__send_error(l, 0, EINVAL, "the sandbox is configured already");
		return;
	}
	struct stream *s = h->stream ? stream_find(l, h->stream) : NULL;
	request_fn fn = request_handler(h->type);
	if (fn) {
		if (s) {
			init__send_error(l, h->stream, EBUSY, "stream %u is already open", h->stream);
		} else if (h->stream == 0 && h->type != SL_MSG_PING) {
			init__send_error(l, 0, EINVAL, "a request needs a non-zero stream id");
		} else if (!request_as_user(h->type)) {
			fn(l, h, payload);
		} else if (init__as_user(l) == 0) {
			fn(l, h, payload);
			init__as_init(l);
		}
		return;
	}
	switch (h->type) {
	case SL_MSG_DATA:
	case SL_MSG_STDIN:
	case SL_MSG_KILL:
	case SL_MSG_CREDIT:
		/* For a stream that is not open these race with its end: drop. */
		if (!s || !s->ops->frame)
			return;
		if (!s->ops->as_user) {
			s->ops->frame(l, s, h, payload);
		} else if (init__as_user(l) == 0) {
			s->ops->frame(l, s, h, payload);
			init__as_init(l);
		}
		return;
	default:
		/* Types that only flow from init to the host: ignored. */
		return;
	}
}

/* Act on every whole frame read so far. */
static void dispatch_buffered(struct loop *l)
{
	struct sl_frame_header h;
	const uint8_t *payload;
	int r = 0;
	while (!l->done && (r = sl_reader_next(&l->rd, &h, &payload)) == 1)
		dispatch(l, &h, payload);
	if (!l->done && r < 0)
		init__fail(l, 1, "malformed frame from the host: closing the connection");
}

static void read_input(struct loop *l)
{
	size_t avail;
	uint8_t *p = sl_reader_space(&l->rd, &avail);
	if (!p) {
		init__fail(l, 1, "cannot buffer input (out of memory)");
		return;
	}
	ssize_t n = read(l->fd, p, avail);
	if (n < 0) {
		if (errno != EINTR && errno != EAGAIN)
			init__fail(l, 0, "connection lost");
		return;
	}
	if (n == 0) {
		/* A VM's port reads 0 while its host is not connected: wait for
		 * it to come back (SIGIO on the signalfd). */
		if (init__vm_host_away(l->fd)) {
			l->host_away = 1;
			return;
		}
		init__fail(l, 0, "host closed the connection");
		return;
	}
	sl_reader_commit(&l->rd, (size_t)n);
	dispatch_buffered(l);
}

/* --- the loop ----------------------------------------------------------- */

/* Let pumps produce while the queue is short.  Returns 1 if some stream is
 * still ready (poll must not sleep then). */
static int run_pumps(struct loop *l)
{
	int again = 0;
	struct stream *next;
	for (struct stream *s = l->streams; s && !l->done; s = next) {
		next = s->next;
		if (!s->ready || !s->ops->pump)
			continue;
		if (l->qbytes >= INIT_QUEUE_HIGH)
			return 0;
		if (!s->ops->as_user) {
			s->ops->pump(l, s);
		} else if (init__as_user(l) == 0) {
			s->ops->pump(l, s); /* may close s: as_user was read before */
			init__as_init(l);
		}
	}
	for (struct stream *s = l->streams; s; s = s->next)
		if (s->ready && s->ops->pump)
			again = 1;
	return again && l->qbytes < INIT_QUEUE_HIGH;
}

int64_t init__now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* poll()'s timeout: 0 while pumps have work, else until a deferred warm
 * child is due, else none. */
static int poll_timeout(const struct loop *l, int busy)
{
	if (busy)
		return 0;
	if (!l->warm_at_ms)
		return -1;
	int64_t left = l->warm_at_ms - init__now_ms();
	return left <= 0 ? 0 : (int)left;
}

static void serve(struct loop *l)
{
	struct pollfd *fds = NULL;
	size_t cap = 0;
	while (!l->done) {
		int busy = run_pumps(l);
		if (l->done)
			break;

		size_t want = 2;
		for (struct stream *s = l->streams; s; s = s->next)
			if (s->ops->poll_fds)
				want += 3;
		if (want > cap) {
			struct pollfd *f = realloc(fds, want * sizeof(*f));
			if (!f) {
				init__fail(l, 1, "out of memory");
				break;
			}
			fds = f;
			cap = want;
		}
		fds[0] = (struct pollfd){ .fd = l->host_away ? -1 : l->fd,
					  .events = POLLIN | (l->qhead ? POLLOUT : 0) };
		fds[1] = (struct pollfd){ .fd = l->sigfd, .events = POLLIN };
		size_t n = 2;
		/* Streams are only added at the head, and only while handling
		 * the connection below, so `first` and the order stay valid. */
		struct stream *first = l->streams;
		for (struct stream *s = first; s; s = s->next)
			if (s->ops->poll_fds)
				s->ops->poll_fds(l, s, fds, &n);

		if (poll(fds, n, poll_timeout(l, busy)) < 0) {
			if (errno == EINTR)
				continue;
			init__fail(l, 1, "poll failed");
			break;
		}

		/* Pipes first, then exits (so output read above precedes EXIT),
		 * then the host. */
		size_t i = 2;
		struct stream *next;
		for (struct stream *s = first; s; s = next) {
			next = s->next;
			if (!s->ops->poll_fds)
				continue;
			const struct pollfd *mine = &fds[i];
			i += 3;
			s->ops->on_poll(l, s, mine);
		}
		if (fds[1].revents & POLLIN) {
			init__reap(l);
			if (l->host_away)
				l->host_away = init__vm_host_away(l->fd);
		}
		if (fds[0].revents & POLLOUT)
			queue_flush(l);
		if (!l->done && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
			read_input(l);
		if (!l->done && l->qhead)
			queue_flush(l); /* answers usually fit right away */
		if (!l->done && l->warm_at_ms && init__now_ms() >= l->warm_at_ms) {
			l->warm_at_ms = 0;
			init__warm_prepare(l);
		}
	}
	free(fds);
}

/* Descriptors 0-2 must be open, or pipes created for commands could land
 * there and be clobbered by the child's dup2 calls. */
static void ensure_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF)
			continue;
		int n = open("/dev/null", O_RDWR);
		if (n < 0)
			n = open("/", O_RDONLY | O_DIRECTORY);
		if (n >= 0 && n != fd)
			close(n); /* cannot happen: open returns the lowest free fd */
	}
}

void init_start_early(const struct init_config *cfg)
{
	/* Before any descriptor is made, and the umask the commands get (the
	 * warm child's is theirs). */
	ensure_std_fds();
	umask(022);
	reset_inherited_signals();
	if (init_setup_early(cfg) < 0 || init_setup_children(cfg) < 0)
		return;
	init__warm_early(cfg);
}

static int prepare(struct loop *l)
{
	ensure_std_fds();
	umask(022);
	/* Writes to a pipe whose reader exited or to a host that went away
	 * must fail with EPIPE, not kill PID 1; a file written past an
	 * RLIMIT_FSIZE init runs under must fail with EFBIG.  (The two that
	 * child_signals() undoes.) */
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN);

	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (init__vm_mode)
		sigaddset(&chld, SIGIO); /* the host (dis)connected: vm.c */
	if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0)
		return -1;
	l->sigfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
	if (l->sigfd < 0)
		return -1;

	/* Outside production (unit tests run init as an ordinary process),
	 * become the reaper of our descendants so orphans come back to us as
	 * they would to PID 1, and can be killed at the end. */
	if (getpid() != 1)
		prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

	/* REMOVE and SCAN hold one descriptor per directory level. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}

	init__events_setup();

	int fl = fcntl(l->fd, F_GETFL);
	if (fl < 0 || fcntl(l->fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	if (fcntl(l->fd, F_SETFD, FD_CLOEXEC) < 0)
		return -1;
	l->scratch = malloc(SANDLOT_PROTO_MAX_DATA);
	if (!l->scratch)
		return -1;
	return 0;
}

int init_serve(const struct init_config *cfg, struct sl_reader *rd)
{
	struct loop l;
	memset(&l, 0, sizeof(l));
	l.cfg = cfg;
	l.fd = INIT_FD_PROTO;
	l.sigfd = -1;
	l.rd = *rd; /* what the host sent after CONFIG */
	sl_reader_init(rd);

	if (prepare(&l) < 0) {
		int e = errno;
		init__log("cannot start serving: %s", init__strerror(e));
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_ERROR, 0, 0);
		sl_msg_put_u32(&m, SL_TAG_ERRNO, (uint32_t)e);
		sl_msg_put_str(&m, SL_TAG_MESSAGE, "sandlot-init cannot start serving");
		if (init_write_frame(l.fd, &m) < 0) {
			/* the host is gone */
		}
		l.status = 1;
	} else {
		/* The answer to CONFIG: the sandbox is set up. */
		struct sl_msg m;
		sl_msg_begin(&m, SL_MSG_OK, 0, 0);
		init__queue(&l, &m);
		/* OK out first (the host is waiting for it), then ready the
		 * first command's process while the host does its own side
		 * (uploads), and take the change-tracking baseline the host
		 * would otherwise have to ask for.  In an ns sandbox the first
		 * command's process was forked before the set-up already
		 * (init_start_early()), else it is forked here, before the old
		 * root is detached: it drops its privileges and loads the
		 * seccomp filter on the other CPU while init builds the root or
		 * waits out the detach's RCU grace period.  It shares init's
		 * mount namespace, so it loses the host's view with init, and
		 * it runs nothing before its command comes, which is read only
		 * after init_setup_finish() succeeded (on failure
		 * init__kill_all() ends it). */
		queue_flush(&l);
		reset_inherited_signals();
		int err = 0;
		if (init_setup_children(cfg) < 0) {
			const char *why = init_setup_error(&err);
			init__log("cannot prepare the commands' credentials: %s", why);
			l.status = 1;
		} else {
			init__warm_prepare(&l);
			if (init_setup_finish(cfg) < 0) {
				init__log("cannot finish the setup: %s", init__strerror(errno));
				l.status = 1;
			}
		}
		if (l.status == 0) {
			init__scan_baseline(&l);
			/* Requests that came with CONFIG (poll() will not
			 * say they are there). */
			dispatch_buffered(&l);
			serve(&l);
		}
	}

	init__kill_all(&l);
	while (l.streams)
		init__stream_close(&l, l.streams);
	init__snapshot_free(l.baseline);
	queue_free(&l);
	sl_reader_free(&l.rd);
	free(l.scratch);
	if (l.sigfd >= 0)
		close(l.sigfd);
	return l.status;
}
