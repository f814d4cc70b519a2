/* sandlotd's worker threads and its parking lot: where request handlers run
 * and where they wait without a thread.
 *
 * Worker pool.  Jobs (a function and its embedded struct workq_job) run on
 * a pool of threads made on demand, at most WORKQ_MAX_THREADS, that leave
 * after WORKQ_IDLE_MS without work; jobs beyond the threads wait in a FIFO
 * queue.  A job may block for as long as a call into libsandlot takes (a
 * sandbox round trip, a workspace scan, a creation), never for as long as a
 * user's command runs: such waits are parked.
 *
 * Parking.  park_start() hands a wait to one thread (epoll over the
 * waited-for descriptors, a heap of deadlines): when `fd` becomes readable,
 * the timeout passes, or `client_fd` reports a hang-up (POLLRDHUP, POLLHUP,
 * POLLERR: the HTTP client went away), the park's fire function is run as
 * a worker job with the reason.  Each park fires exactly once; a parked
 * wait costs a few bytes and one or two epoll registrations, no thread.
 * fd and client_fd may be -1.  The descriptors must stay open until the
 * park fired.
 */
#ifndef SANDLOT_DAEMON_WORKQ_H
#define SANDLOT_DAEMON_WORKQ_H

#include <stddef.h>
#include <stdint.h>

#define WORKQ_MAX_THREADS 256
#define WORKQ_IDLE_MS 30000

struct workq_job {
	struct workq_job *next;
	void (*run)(struct workq_job *job);
};

/* Start the pool and the parking thread (once, before any submit).  0 or
 * -1 with errno. */
int workq_start(void);
/* Run job->run(job) on a worker thread.  Never fails: the job waits in the
 * queue if no thread can be made. */
void workq_submit(struct workq_job *job, void (*run)(struct workq_job *job));
/* The same on one of the two pools, each of WORKQ_MAX_THREADS: SHORT for
 * every handler call, LONG for those that may wait for a command (feeding a
 * stdin the command does not read), so that these can hold up only each
 * other. */
enum { WORKQ_SHORT = 0, WORKQ_LONG = 1 };
void workq_submit_to(int which, struct workq_job *job, void (*run)(struct workq_job *job));
/* Wait (up to timeout_ms) for every queued and running job to end and for
 * every park to fire, then stop the threads.  Parks still waiting are
 * fired first with PARK_STOP. */
void workq_stop(unsigned timeout_ms);
/* Threads now / busy now / queued jobs, both pools (metrics). */
void workq_counts(unsigned *threads, unsigned *busy, unsigned *queued);

enum park_why { PARK_READY = 1, PARK_TIMEOUT = 2, PARK_GONE = 3, PARK_STOP = 4 };

struct park {
	/* private to workq.c */
	struct workq_job job;
	void (*fire)(struct park *p, int why);
	int fd, client_fd;
	uint64_t deadline_ms;       /* 0: none */
	size_t heap_i;              /* position in the deadline heap, or SIZE_MAX */
	struct park *prev, *next;   /* every park waiting */
	int why;
	int fired;
	struct park_ev {
		struct park *p;
	} ev_fd, ev_client;
};

/* Wait for fd to be readable (-1: none), timeout_ms to pass (<0: none) or
 * client_fd to hang up (-1: not watched); then fire(p, why) runs on a
 * worker.  p must stay valid until fire is called. */
void park_start(struct park *p, int fd, int client_fd, int timeout_ms,
		void (*fire)(struct park *p, int why));
/* Parks waiting now (metrics). */
unsigned park_count(void);

#endif
