/* The protocol connection to a sandbox's init and the process-wide I/O
 * thread that reads every connection (see internal.h for the model). */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "linux/seccomp.h"

static pthread_once_t io_once = PTHREAD_ONCE_INIT;
static int io_epoll = -1, io_wake = -1;
static int io_start_errno;

static pthread_mutex_t timers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sl_timer *timers;

static void *io_main(void *arg);

static void io_init(void)
{
	io_epoll = epoll_create1(EPOLL_CLOEXEC);
	io_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (io_epoll < 0 || io_wake < 0) {
		io_start_errno = errno;
		return;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	if (epoll_ctl(io_epoll, EPOLL_CTL_ADD, io_wake, &ev) < 0) {
		io_start_errno = errno;
		return;
	}
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	/* The I/O thread never needs signals; the process keeps its own. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&t, &attr, io_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0)
		io_start_errno = rc;
}

static void io_wakeup(void)
{
	uint64_t one = 1;
	if (write(io_wake, &one, sizeof(one)) < 0) {
		/* EAGAIN: a wakeup is already pending, which is all we need. */
	}
}

/* ---- timers ------------------------------------------------------------- */

void sandlot__timer_arm(struct sl_timer *t)
{
	pthread_mutex_lock(&timers_lock);
	if (!t->armed) {
		t->next = timers;
		timers = t;
		t->armed = 1;
	}
	pthread_mutex_unlock(&timers_lock);
	io_wakeup();
}

void sandlot__timer_disarm(struct sl_timer *t)
{
	pthread_mutex_lock(&timers_lock);
	if (t->armed) {
		for (struct sl_timer **pp = &timers; *pp; pp = &(*pp)->next) {
			if (*pp == t) {
				*pp = t->next;
				break;
			}
		}
		t->armed = 0;
	}
	pthread_mutex_unlock(&timers_lock);
}

/* Fire expired timers; return ms until the next one (-1: none). */
static int run_timers(void)
{
	uint64_t now = sandlot__now_ms();
	int64_t next = -1;
	pthread_mutex_lock(&timers_lock);
	struct sl_timer **pp = &timers;
	while (*pp) {
		struct sl_timer *t = *pp;
		if (t->deadline_ms <= now) {
			*pp = t->next;
			t->armed = 0;
			/* Fired under timers_lock so a concurrent disarm+free
			 * cannot race with it (lock order allows conn locks). */
			t->fire(t);
			continue;
		}
		int64_t left = (int64_t)(t->deadline_ms - now);
		if (next < 0 || left < next)
			next = left;
		pp = &t->next;
	}
	pthread_mutex_unlock(&timers_lock);
	return next > INT32_MAX ? INT32_MAX : (int)next;
}

/* ---- sending ------------------------------------------------------------ */

int sandlot__conn_send(struct sl_conn *c, struct sl_msg *m, sandlot_error_t **err)
{
	if (sl_msg_finish(m) < 0) {
		int e = errno;
		sl_msg_free(m);
		return sandlot__error_errno(err, e, "encode request");
	}
	pthread_mutex_lock(&c->wlock);
	int rc = 0, e = 0;
	int last = m->len > 4 && m->buf[4] == SL_MSG_DETACH;
	if (c->dead || c->wclosed) {
		rc = -1;
		e = EPIPE;
	} else {
		const uint8_t *p = m->buf;
		size_t left = m->len;
		while (left > 0) {
			ssize_t n = send(c->fd, p, left, MSG_NOSIGNAL);
			if (n < 0) {
				if (errno == EINTR)
					continue;
				rc = -1;
				e = errno;
				break;
			}
			p += n;
			left -= (size_t)n;
		}
		/* Nothing may follow DETACH: a frame cut in two by the VM's
		 * save would reach the restored guest as garbage. */
		if (last)
			c->wclosed = 1;
	}
	pthread_mutex_unlock(&c->wlock);
	sl_msg_free(m);
	if (rc < 0)
		return sandlot__error(err, e == EPIPE || e == ECONNRESET ? EPIPE : e,
				      "sandbox connection lost (the sandbox is gone)");
	return 0;
}

int sandlot__conn_send_u32(struct sl_conn *c, uint8_t type, uint32_t stream, uint16_t tag,
			   uint32_t v, sandlot_error_t **err)
{
	struct sl_msg m;
	sl_msg_begin(&m, type, 0, stream);
	sl_msg_put_u32(&m, tag, v);
	return sandlot__conn_send(c, &m, err);
}

/* ---- streams ------------------------------------------------------------ */

int sandlot__stream_register(struct sl_conn *c, struct sl_stream *s, sl_frame_fn on_frame,
			     sl_lost_fn on_lost)
{
	pthread_mutex_lock(&c->lock);
	if (c->dead) {
		pthread_mutex_unlock(&c->lock);
		errno = EPIPE;
		return -1;
	}
	/* Ids wrap after 4 billion streams; skip 0 and any still open. */
	for (;;) {
		uint32_t id = ++c->next_id;
		if (id == 0)
			continue;
		int used = 0;
		for (struct sl_stream *o = c->streams; o; o = o->next)
			if (o->id == id)
				used = 1;
		if (!used) {
			s->id = id;
			break;
		}
	}
	s->conn = c;
	s->on_frame = on_frame;
	s->on_lost = on_lost;
	s->next = c->streams;
	c->streams = s;
	s->registered = 1;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

void sandlot__stream_unregister_locked(struct sl_stream *s)
{
	if (!s->registered)
		return;
	for (struct sl_stream **pp = &s->conn->streams; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	}
	s->registered = 0;
}

/* ---- receiving (I/O thread) ------------------------------------------- */

/* init's ERROR on stream 0: what failed in its set-up (the first one only:
 * init exits after it). */
static void config_failed(struct sl_conn *c, const uint8_t *payload, uint32_t len)
{
	if (c->configured)
		return;
	struct sl_rec_iter it;
	struct sl_rec r;
	uint32_t status = 0;
	char *msg = NULL;
	sl_rec_iter_init(&it, payload, len);
	while (sl_rec_next(&it, &r) == 1) {
		if (r.tag == SL_TAG_ERRNO)
			sl_rec_u32(&r, &status);
		else if (r.tag == SL_TAG_MESSAGE && !msg)
			msg = sl_rec_str(&r);
	}
	c->configured = -1;
	c->config_errno = status > 0 && status < 4096 ? (int)status : EIO;
	c->config_msg = msg;
}

static void conn_dispatch(struct sl_conn *c, const struct sl_frame_header *h, const uint8_t *payload)
{
	if (h->stream == 0) {
		if (h->type == SL_MSG_HELLO) {
			struct sl_rec_iter it;
			struct sl_rec r;
			uint32_t version = 0;
			sl_rec_iter_init(&it, payload, h->length);
			while (sl_rec_next(&it, &r) == 1)
				if (r.tag == SL_TAG_VERSION)
					sl_rec_u32(&r, &version);
			c->hello = version == SANDLOT_PROTO_VERSION ? 1 : -1;
		} else if (h->type == SL_MSG_OK && !c->configured) {
			c->configured = 1;
		} else if (h->type == SL_MSG_ERROR) {
			config_failed(c, payload, h->length);
		}
		return;
	}
	for (struct sl_stream *s = c->streams; s; s = s->next) {
		if (s->id == h->stream) {
			s->on_frame(s, h, payload);
			return;
		}
	}
	/* A frame for a stream we already closed: dropped, as the spec says. */
}

static void conn_kill(struct sl_conn *c)
{
	epoll_ctl(io_epoll, EPOLL_CTL_DEL, c->fd, NULL);
	pthread_mutex_lock(&c->wlock);
	c->dead = 1;
	pthread_mutex_unlock(&c->wlock);
	while (c->streams) {
		struct sl_stream *s = c->streams;
		sandlot__stream_unregister_locked(s);
		if (s->on_lost)
			s->on_lost(s);
	}
	c->io_done = 1;
	pthread_cond_broadcast(&c->cond);
}

static void conn_readable(struct sl_conn *c)
{
	pthread_mutex_lock(&c->lock);
	for (;;) {
		size_t avail;
		uint8_t *space = sl_reader_space(&c->reader, &avail);
		if (!space) {
			conn_kill(c);
			break;
		}
		ssize_t n = recv(c->fd, space, avail, MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			conn_kill(c);
			break;
		}
		sl_reader_commit(&c->reader, (size_t)n);
		struct sl_frame_header h;
		const uint8_t *payload;
		int r;
		while ((r = sl_reader_next(&c->reader, &h, &payload)) == 1)
			conn_dispatch(c, &h, payload);
		if (r < 0) {
			conn_kill(c);
			break;
		}
	}
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

static void *io_main(void *arg)
{
	struct epoll_event evs[64];
	for (;;) {
		int timeout = run_timers();
		int n = epoll_wait(io_epoll, evs, 64, timeout);
		if (n < 0 && errno != EINTR)
			abort(); /* epoll itself failing means memory corruption */
		for (int i = 0; i < n; i++) {
			if (!evs[i].data.ptr) {
				uint64_t v;
				while (read(io_wake, &v, sizeof(v)) > 0)
					;
				continue;
			}
			conn_readable(evs[i].data.ptr);
		}
	}
	return arg;
}

/* ---- lifecycle ---------------------------------------------------------- */

int sandlot__conn_open(struct sl_conn *c, int fd, sandlot_error_t **err)
{
	pthread_once(&io_once, io_init);
	if (io_start_errno)
		return sandlot__error_errno(err, io_start_errno, "start the I/O thread");
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	/* Recursive: callbacks run with the lock held and may call the
	 * non-blocking API functions (kill, resume, close_stdin, exec), which
	 * take it again. */
	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&c->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	pthread_mutex_init(&c->wlock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	sl_reader_init(&c->reader);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = c };
	if (epoll_ctl(io_epoll, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int e = errno;
		sl_reader_free(&c->reader);
		return sandlot__error_errno(err, e, "watch sandbox connection");
	}
	return 0;
}

int sandlot__init_config_fill(struct sandlot *sb, sandlot_error_t **err)
{
	struct sandlot_init_config *ic = &sb->init_cfg;
	memset(ic, 0, sizeof(*ic));
	ic->nofile = sb->opts.nofile;
	ic->pids = sb->opts.pids;
	ic->scan_memory = sb->opts.scan_memory_bytes;
	ic->hostname = sb->hostname;
	ic->workdir = sb->img.workdir;
	ic->user = sb->img.user;
	char cache_dir[4200];
	if (snprintf(cache_dir, sizeof(cache_dir), "%s/cache", sb->data_dir) >= (int)sizeof(cache_dir))
		return sandlot__error(err, ENAMETOOLONG, "data directory path too long");
	return sandlot__seccomp_program(cache_dir, &ic->seccomp, &ic->seccomp_len, err);
}

int sandlot__conn_configure(struct sl_conn *c, const struct sandlot_init_config *ic,
			    sandlot_error_t **err)
{
	struct sl_msg m;
	sl_msg_begin(&m, SL_MSG_CONFIG, 0, 0);
	if (ic->flags)
		sl_msg_put_u32(&m, SL_TAG_FLAGS, ic->flags);
	if (ic->nofile)
		sl_msg_put_u64(&m, SL_TAG_NOFILE, ic->nofile);
	if (ic->fsize)
		sl_msg_put_u64(&m, SL_TAG_FSIZE, ic->fsize);
	if (ic->flags & SL_CONFIG_TMPFS)
		sl_msg_put_u64(&m, SL_TAG_DISK, ic->disk);
	if (ic->scan_memory)
		sl_msg_put_u64(&m, SL_TAG_MEMORY, ic->scan_memory);
	if (ic->pids)
		sl_msg_put_u32(&m, SL_TAG_PIDS, ic->pids);
	if (ic->hostname)
		sl_msg_put_str(&m, SL_TAG_HOSTNAME, ic->hostname);
	if (ic->workdir)
		sl_msg_put_str(&m, SL_TAG_WORKDIR, ic->workdir);
	if (ic->user)
		sl_msg_put_str(&m, SL_TAG_USER, ic->user);
	if (ic->seccomp)
		sl_msg_put_bytes(&m, SL_TAG_SECCOMP, ic->seccomp, ic->seccomp_len);
	if (ic->send_time) {
		/* Now, not when the sandbox was started: a restored VM's clock
		 * must not lag by the restore's time. */
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		sl_msg_put_u64(&m, SL_TAG_TIME,
			       (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec);
	}
	if (ic->seed_len)
		sl_msg_put_bytes(&m, SL_TAG_SEED, ic->seed, ic->seed_len);
	if (ic->hello_before) {
		/* Its version was checked when it was read (vm-template.c). */
		pthread_mutex_lock(&c->lock);
		c->hello = 1;
		pthread_mutex_unlock(&c->lock);
	}
	if (ic->net_addr) {
		sl_msg_put_u32(&m, SL_TAG_NET_ADDR, ic->net_addr);
		sl_msg_put_u32(&m, SL_TAG_NET_PREFIX, ic->net_prefix);
		sl_msg_put_u32(&m, SL_TAG_NET_GATEWAY, ic->net_gateway);
		sl_msg_put_u32(&m, SL_TAG_NET_DNS, ic->net_dns);
		sl_msg_put_u32(&m, SL_TAG_NET_RELAY, ic->net_relay);
	}
	if (sandlot__conn_send(c, &m, err) < 0)
		return sandlot__error_wrap(err, "configure sandlot-init");
	return 0;
}

int sandlot__conn_wait_ready(struct sl_conn *c, uint64_t timeout_ms, sandlot_error_t **err)
{
	struct timespec dl;
	sandlot__deadline_in(&dl, CLOCK_MONOTONIC, timeout_ms);
	pthread_mutex_lock(&c->lock);
	int rc = 0;
	/* HELLO comes first, then the answer to CONFIG: an ERROR ends the
	 * wait even without HELLO (an init that refused its first frame). */
	while (c->hello >= 0 && !(c->hello && c->configured) && c->configured >= 0 && !c->dead &&
	       rc == 0)
		rc = pthread_cond_timedwait(&c->cond, &c->lock, &dl);
	int hello = c->hello, configured = c->configured, dead = c->dead;
	int cerr = c->config_errno;
	char *cmsg = c->config_msg ? strdup(c->config_msg) : NULL;
	pthread_mutex_unlock(&c->lock);
	if (hello < 0) {
		free(cmsg);
		return sandlot__error(err, EPROTO, "sandlot-init speaks another protocol version");
	}
	if (configured < 0) {
		rc = sandlot__error(err, cerr, "%s", cmsg ? cmsg : "sandlot-init refused its configuration");
		free(cmsg);
		return rc;
	}
	free(cmsg);
	if (hello == 1 && configured == 1)
		return 0;
	if (dead)
		return sandlot__error(err, EPIPE, "sandlot-init exited before it was ready");
	return sandlot__error(err, ETIMEDOUT, "sandlot-init was not ready after %llu ms",
			      (unsigned long long)timeout_ms);
}

void sandlot__conn_shutdown(struct sl_conn *c)
{
	shutdown(c->fd, SHUT_RDWR);
	pthread_mutex_lock(&c->lock);
	/* The shutdown makes the socket readable with EOF; the I/O thread sees
	 * it, fails every open stream and lets go. */
	while (!c->io_done)
		pthread_cond_wait(&c->cond, &c->lock);
	pthread_mutex_unlock(&c->lock);
}

void sandlot__conn_free(struct sl_conn *c)
{
	close(c->fd);
	c->fd = -1;
	free(c->config_msg);
	c->config_msg = NULL;
	sl_reader_free(&c->reader);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->wlock);
}

int sandlot__error_from_frame(sandlot_error_t **err, const uint8_t *payload, uint32_t len,
			      const char *what)
{
	struct sl_rec_iter it;
	struct sl_rec r;
	uint32_t status = EIO;
	char *msg = NULL;
	sl_rec_iter_init(&it, payload, len);
	while (sl_rec_next(&it, &r) == 1) {
		if (r.tag == SL_TAG_ERRNO)
			sl_rec_u32(&r, &status);
		else if (r.tag == SL_TAG_MESSAGE && !msg)
			msg = sl_rec_str(&r);
	}
	if (status == 0 || status > 4095)
		status = EIO;
	/* Init names the operation itself ("write /home/user/x: ..."); do not
	 * say it twice. */
	size_t wl = strcspn(what, " ");
	if (msg && *msg && strncmp(msg, what, wl) == 0 && (msg[wl] == ' ' || msg[wl] == ':'))
		sandlot__error(err, (int)status, "%s", msg);
	else if (msg && *msg)
		sandlot__error(err, (int)status, "%s: %s", what, msg);
	else
		sandlot__error(err, (int)status, "%s: %s", what, strerror((int)status));
	free(msg);
	return -1;
}
