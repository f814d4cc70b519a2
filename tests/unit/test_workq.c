/* sandlotd's worker pool (src/daemon/workq.c): jobs that block must each get
 * a thread of their own while there is room, however fast they come. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "daemon/workq.h"
#include "tap.h"

/* workq.c logs through sandlotd's logger (daemon/daemon.h). */
void daemon_log(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void daemon_log(const char *event, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "%s: ", event);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int started, released;

/* A job that waits until the test releases it, as a stdin feed waits for a
 * command that does not read. */
static void blocking_job(struct workq_job *job)
{
	(void)job;
	pthread_mutex_lock(&lock);
	started++;
	pthread_cond_broadcast(&cond);
	while (!released)
		pthread_cond_wait(&cond, &lock);
	started--;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

static void quick_job(struct workq_job *job)
{
	(void)job;
	pthread_mutex_lock(&lock);
	started++;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
}

/* Wait (up to 5 s) until `started` is n; its value then. */
static int wait_started(int n)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 5;
	pthread_mutex_lock(&lock);
	while (started != n && pthread_cond_timedwait(&cond, &lock, &ts) == 0)
		;
	int got = started;
	pthread_mutex_unlock(&lock);
	return got;
}

static void test_jobs_submitted_back_to_back_each_get_a_thread(void)
{
	CHECK_EQ_INT(workq_start(), 0);
	/* One thread made and idle again. */
	struct workq_job warm;
	workq_submit_to(WORKQ_LONG, &warm, quick_job);
	CHECK_EQ_INT(wait_started(1), 1);
	pthread_mutex_lock(&lock);
	started = 0;
	pthread_mutex_unlock(&lock);
	unsigned threads, busy, queued;
	for (int i = 0; i < 500; i++) {
		workq_counts(&threads, &busy, &queued);
		if (busy == 0)
			break;
		usleep(1000);
	}
	CHECK_EQ_INT((int)busy, 0);
	/* Many blocking jobs at once, while that thread is still idle: every
	 * one runs, none waits for another to end. */
	enum { N = 40 };
	static struct workq_job jobs[N];
	for (int i = 0; i < N; i++)
		workq_submit_to(WORKQ_LONG, &jobs[i], blocking_job);
	CHECK_EQ_INT(wait_started(N), N);
	workq_counts(&threads, &busy, &queued);
	CHECK_EQ_INT((int)queued, 0);
	CHECK_EQ_INT((int)busy, N);
	pthread_mutex_lock(&lock);
	released = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	CHECK_EQ_INT(wait_started(0), 0);
	workq_stop(5000);
}

int main(void)
{
	TAP_RUN(test_jobs_submitted_back_to_back_each_get_a_thread);
	return tap_done();
}
