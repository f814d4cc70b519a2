/* sandlotd's worker pool and parking lot (contract in workq.h). */
#include "daemon/workq.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"
#include "daemon/daemon.h"

#define WORKER_STACK (1u << 20)   /* handlers ran on 1 MiB connection threads before */

/* ---- the pools ---------------------------------------------------------------- */

struct pool {
	const char *name;           /* of its threads */
	pthread_mutex_t lock;
	pthread_cond_t work;        /* a job was queued, or stopping */
	pthread_cond_t idle;        /* busy and queue went to 0, or a thread left */
	struct workq_job *head, *tail;
	unsigned queued, threads, waiting, busy;
	unsigned starting;          /* counted in threads, not yet in worker_main */
	int stopping;
};

/* [WORKQ_SHORT]: every handler call; [WORKQ_LONG]: calls that may wait for
 * a command (feeding its stdin), so that those can never take every thread
 * the others need. */
static struct pool pools[2] = {
	{ .name = "sandlotd-work", .lock = PTHREAD_MUTEX_INITIALIZER,
	  .work = PTHREAD_COND_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER },
	{ .name = "sandlotd-feed", .lock = PTHREAD_MUTEX_INITIALIZER,
	  .work = PTHREAD_COND_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER },
};

static void *worker_main(void *arg)
{
	struct pool *q = arg;
	pthread_mutex_lock(&q->lock);
	q->starting--;
	for (;;) {
		while (!q->head && !q->stopping) {
			q->waiting++;
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += WORKQ_IDLE_MS / 1000;
			int rc = pthread_cond_timedwait(&q->work, &q->lock, &ts);
			q->waiting--;
			if (rc == ETIMEDOUT && !q->head)
				goto leave;
		}
		if (!q->head)
			goto leave; /* stopping and nothing left */
		struct workq_job *j = q->head;
		q->head = j->next;
		if (!q->head)
			q->tail = NULL;
		q->queued--;
		q->busy++;
		pthread_mutex_unlock(&q->lock);
		j->run(j);
		pthread_mutex_lock(&q->lock);
		q->busy--;
		if (q->busy == 0 && q->queued == 0)
			pthread_cond_broadcast(&q->idle);
	}
leave:
	q->threads--;
	pthread_cond_broadcast(&q->idle);
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

/* q->lock held, the job queued.  1 when a thread is to be started: the
 * queue holds more jobs than there are idle or starting threads to take
 * them, and there is room; its place is counted (threads, starting), and
 * the caller starts it with spawn() once it has let go of q->lock.  (Not
 * "if none is idle": a thread just signalled counts as idle until it runs,
 * so two submits in a row would both leave their jobs to it, and with
 * jobs that wait long, as a stdin feed does, the second one waited for the
 * first to end.) */
static int spawn_wanted(struct pool *q)
{
	if (q->queued <= q->waiting + q->starting || q->threads >= WORKQ_MAX_THREADS)
		return 0;
	q->threads++;
	q->starting++;
	return 1;
}

/* Start the thread spawn_wanted() counted, without q->lock: pthread_create()
 * maps a stack and clones under glibc's own process-wide lock, and under a
 * burst of requests (200 at once: a thread each) every submit and every
 * worker ending a job waited for that behind q->lock. */
static void spawn(struct pool *q)
{
	pthread_attr_t a;
	pthread_t t;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&a, WORKER_STACK);
	int rc = pthread_create(&t, &a, worker_main, q);
	pthread_attr_destroy(&a);
	if (rc == 0) {
		pthread_setname_np(t, q->name);
		return;
	}
	pthread_mutex_lock(&q->lock);
	q->threads--;
	q->starting--;
	unsigned left = q->threads;
	pthread_cond_broadcast(&q->idle);
	pthread_mutex_unlock(&q->lock);
	/* The job waits in the queue for a thread that ends its own. */
	if (left == 0)
		daemon_log("workers", "level=error msg=\"cannot start a worker thread: %s\"",
			   strerror(rc));
}

void workq_submit_to(int which, struct workq_job *job, void (*run)(struct workq_job *job))
{
	struct pool *q = &pools[which];
	job->run = run;
	job->next = NULL;
	pthread_mutex_lock(&q->lock);
	if (q->tail)
		q->tail->next = job;
	else
		q->head = job;
	q->tail = job;
	q->queued++;
	int more = spawn_wanted(q);
	pthread_cond_signal(&q->work);
	pthread_mutex_unlock(&q->lock);
	if (more)
		spawn(q);
}

void workq_submit(struct workq_job *job, void (*run)(struct workq_job *job))
{
	workq_submit_to(WORKQ_SHORT, job, run);
}

void workq_counts(unsigned *threads, unsigned *busy, unsigned *queued)
{
	*threads = *busy = *queued = 0;
	for (int i = 0; i < 2; i++) {
		struct pool *q = &pools[i];
		pthread_mutex_lock(&q->lock);
		*threads += q->threads;
		*busy += q->busy;
		*queued += q->queued;
		pthread_mutex_unlock(&q->lock);
	}
}

/* ---- the parking lot ------------------------------------------------------------- */

static struct {
	pthread_mutex_t lock;
	int ep, wake;
	pthread_cond_t none;        /* parked went to 0 */
	struct park **heap;         /* min-heap on deadline_ms */
	size_t n, cap;
	struct park *all;           /* every park waiting */
	unsigned parked;
	int stopping;
	pthread_t thread;
	int started;
} w = { .lock = PTHREAD_MUTEX_INITIALIZER, .none = PTHREAD_COND_INITIALIZER, .ep = -1,
	.wake = -1 };

static void heap_swap(size_t a, size_t b)
{
	struct park *t = w.heap[a];
	w.heap[a] = w.heap[b];
	w.heap[b] = t;
	w.heap[a]->heap_i = a;
	w.heap[b]->heap_i = b;
}

static void heap_up(size_t i)
{
	while (i > 0 && w.heap[(i - 1) / 2]->deadline_ms > w.heap[i]->deadline_ms) {
		heap_swap(i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void heap_down(size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < w.n && w.heap[l]->deadline_ms < w.heap[m]->deadline_ms)
			m = l;
		if (r < w.n && w.heap[r]->deadline_ms < w.heap[m]->deadline_ms)
			m = r;
		if (m == i)
			return;
		heap_swap(i, m);
		i = m;
	}
}

static int heap_add(struct park *p)
{
	if (w.n == w.cap) {
		size_t cap = w.cap ? w.cap * 2 : 256;
		struct park **nh = realloc(w.heap, cap * sizeof(*nh));
		if (!nh)
			return -1;
		w.heap = nh;
		w.cap = cap;
	}
	p->heap_i = w.n;
	w.heap[w.n++] = p;
	heap_up(p->heap_i);
	return 0;
}

static void heap_remove(struct park *p)
{
	size_t i = p->heap_i;
	if (i == SIZE_MAX)
		return;
	p->heap_i = SIZE_MAX;
	w.n--;
	if (i == w.n)
		return;
	w.heap[i] = w.heap[w.n];
	w.heap[i]->heap_i = i;
	heap_up(i);
	heap_down(w.heap[i]->heap_i);
}

static void run_fire(struct workq_job *j)
{
	struct park *p = (struct park *)((char *)j - offsetof(struct park, job));
	p->fire(p, p->why);
}

/* w.lock held: take p off every list and queue it on *fired. */
static void fire_locked(struct park *p, int why, struct park **fired)
{
	if (p->fired)
		return;
	p->fired = 1;
	p->why = why;
	if (p->fd >= 0)
		epoll_ctl(w.ep, EPOLL_CTL_DEL, p->fd, NULL);
	if (p->client_fd >= 0)
		epoll_ctl(w.ep, EPOLL_CTL_DEL, p->client_fd, NULL);
	heap_remove(p);
	if (p->prev)
		p->prev->next = p->next;
	else
		w.all = p->next;
	if (p->next)
		p->next->prev = p->prev;
	if (--w.parked == 0)
		pthread_cond_broadcast(&w.none);
	p->job.next = (struct workq_job *)*fired;
	*fired = p;
}

static void submit_fired(struct park *p)
{
	while (p) {
		struct park *next = (struct park *)p->job.next;
		workq_submit(&p->job, run_fire);
		p = next;
	}
}

void park_start(struct park *p, int fd, int client_fd, int timeout_ms,
		void (*fire)(struct park *p, int why))
{
	struct park *fired = NULL;
	p->fire = fire;
	p->fd = fd;
	p->client_fd = client_fd;
	p->fired = 0;
	p->heap_i = SIZE_MAX;
	p->ev_fd.p = p;
	p->ev_client.p = p;
	p->deadline_ms = timeout_ms >= 0 ? sandlot__now_ms() + (uint64_t)timeout_ms : 0;
	pthread_mutex_lock(&w.lock);
	w.parked++;
	p->prev = NULL;
	p->next = w.all;
	if (w.all)
		w.all->prev = p;
	w.all = p;
	int early = 0;
	if (w.stopping) {
		fire_locked(p, PARK_STOP, &fired);
		goto out;
	}
	if (timeout_ms >= 0) {
		early = w.n == 0 || p->deadline_ms < w.heap[0]->deadline_ms;
		if (heap_add(p) < 0) {
			/* No memory for the heap: fire at once (callers re-check and
			 * park again, which is a busy wait, never a lost wake-up). */
			fire_locked(p, PARK_TIMEOUT, &fired);
			goto out;
		}
	}
	if (fd >= 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &p->ev_fd };
		if (epoll_ctl(w.ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
			p->fd = -1;
			fire_locked(p, PARK_READY, &fired);
			goto out;
		}
	}
	if (client_fd >= 0) {
		/* Not EPOLLIN: a pipelined request is not a hang-up; HUP and
		 * ERR are always reported. */
		struct epoll_event ev = { .events = EPOLLRDHUP, .data.ptr = &p->ev_client };
		if (epoll_ctl(w.ep, EPOLL_CTL_ADD, client_fd, &ev) < 0) {
			p->client_fd = -1;
			fire_locked(p, PARK_GONE, &fired);
			goto out;
		}
	}
out:
	pthread_mutex_unlock(&w.lock);
	if (early && !fired) {
		uint64_t one = 1;
		if (write(w.wake, &one, sizeof(one)) < 0) {
			/* the counter is full: the thread is awake anyway */
		}
	}
	submit_fired(fired);
}

unsigned park_count(void)
{
	pthread_mutex_lock(&w.lock);
	unsigned n = w.parked;
	pthread_mutex_unlock(&w.lock);
	return n;
}

static void *waiter_main(void *arg)
{
	(void)arg;
	struct epoll_event evs[128];
	for (;;) {
		pthread_mutex_lock(&w.lock);
		int timeout = -1;
		if (w.n > 0) {
			uint64_t now = sandlot__now_ms(), d = w.heap[0]->deadline_ms;
			timeout = d <= now ? 0 : d - now > 60000 ? 60000 : (int)(d - now);
		}
		int done = w.stopping && w.parked == 0;
		pthread_mutex_unlock(&w.lock);
		if (done)
			return NULL;
		int n = epoll_wait(w.ep, evs, 128, timeout);
		if (n < 0 && errno != EINTR)
			n = 0;
		struct park *fired = NULL;
		pthread_mutex_lock(&w.lock);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == NULL) {
				uint64_t v;
				if (read(w.wake, &v, sizeof(v)) < 0) {
					/* EAGAIN: already drained */
				}
				continue;
			}
			struct park_ev *pe = evs[i].data.ptr;
			struct park *p = pe->p;
			/* Events of one batch may name a park fired earlier in it:
			 * fire_locked() ignores those (p is not freed before its
			 * fire job runs, which is after this loop). */
			fire_locked(p, pe == &p->ev_client ? PARK_GONE : PARK_READY, &fired);
		}
		uint64_t now = sandlot__now_ms();
		while (w.n > 0 && w.heap[0]->deadline_ms <= now)
			fire_locked(w.heap[0], PARK_TIMEOUT, &fired);
		if (w.stopping) {
			while (w.all)
				fire_locked(w.all, PARK_STOP, &fired);
		}
		pthread_mutex_unlock(&w.lock);
		submit_fired(fired);
	}
}

int workq_start(void)
{
	w.ep = epoll_create1(EPOLL_CLOEXEC);
	w.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w.ep < 0 || w.wake < 0)
		return -1;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	if (epoll_ctl(w.ep, EPOLL_CTL_ADD, w.wake, &ev) < 0)
		return -1;
	if (pthread_create(&w.thread, NULL, waiter_main, NULL) != 0)
		return -1;
	pthread_setname_np(w.thread, "sandlotd-park");
	w.started = 1;
	return 0;
}

/* Wait on c until the monotonic-ms deadline: 0 when woken, -1 past it. */
static int timed_wait(pthread_cond_t *c, pthread_mutex_t *m, uint64_t deadline)
{
	uint64_t now = sandlot__now_ms();
	if (now >= deadline)
		return -1;
	uint64_t left = deadline - now;
	struct timespec ts;
	sandlot__deadline_in(&ts, CLOCK_REALTIME, left);
	pthread_cond_timedwait(c, m, &ts);
	return 0;
}

void workq_stop(unsigned timeout_ms)
{
	uint64_t deadline = sandlot__now_ms() + timeout_ms;
	/* Parks still waiting (parked requests whose sandbox survived the
	 * shutdown, which cannot happen, or whose client is slow) fire now
	 * with PARK_STOP; waits without a deadline are fired too. */
	pthread_mutex_lock(&w.lock);
	w.stopping = 1;
	pthread_mutex_unlock(&w.lock);
	if (w.started) {
		uint64_t one = 1;
		if (write(w.wake, &one, sizeof(one)) < 0) {
			/* full: awake anyway */
		}
	}
	pthread_mutex_lock(&w.lock);
	while (w.parked > 0 && timed_wait(&w.none, &w.lock, deadline) == 0)
		;
	pthread_mutex_unlock(&w.lock);
	int clean = 1;
	for (int i = 0; i < 2; i++) {
		struct pool *q = &pools[i];
		pthread_mutex_lock(&q->lock);
		while ((q->busy > 0 || q->queued > 0) && timed_wait(&q->idle, &q->lock, deadline) == 0)
			;
		clean &= q->busy == 0 && q->queued == 0;
		pthread_mutex_unlock(&q->lock);
	}
	for (int i = 0; clean && i < 2; i++) {
		struct pool *q = &pools[i];
		pthread_mutex_lock(&q->lock);
		q->stopping = 1;
		pthread_cond_broadcast(&q->work);
		pthread_mutex_unlock(&q->lock);
	}
	if (w.started && clean) {
		pthread_mutex_lock(&w.lock);
		int parked = w.parked;
		pthread_mutex_unlock(&w.lock);
		if (parked == 0) {
			pthread_join(w.thread, NULL);
			w.started = 0;
		}
	}
}
