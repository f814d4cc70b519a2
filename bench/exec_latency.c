/* Exec round trip inside one live sandbox through libsandlot, side by side
 * with fork+exec of the same program on the host:
 *   build/bench/exec-latency [N] [PROGRAM]     (default 500 /bin/true)
 * Needs root and SANDLOT_INIT (or sandlot-init next to the binary). */
#include <sandlot.h>

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void report(const char *what, double *v, int n)
{
	qsort(v, (size_t)n, sizeof(double), cmp);
	printf("%-28s p50 %7.3f ms   p90 %7.3f ms   p99 %7.3f ms\n", what, v[n / 2], v[n * 9 / 10],
	       v[n * 99 / 100]);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 500;
	const char *prog = argc > 2 ? argv[2] : "/bin/true";
	if (n < 10)
		n = 10;
	double *host = calloc((size_t)n, sizeof(double)), *sb = calloc((size_t)n, sizeof(double));
	char *const pargv[] = { (char *)prog, NULL };
	for (int i = 0; i < n; i++) {
		double t = now_ms();
		pid_t pid;
		if (posix_spawn(&pid, prog, NULL, NULL, pargv, environ) != 0)
			return 1;
		waitpid(pid, NULL, 0);
		host[i] = now_ms() - t;
	}
	sandlot_error_t *err = NULL;
	double t0 = now_ms();
	sandlot_t *s = sandlot_create(NULL, &err);
	if (!s) {
		fprintf(stderr, "create: %s\n", sandlot_error_message(err));
		return 1;
	}
	double created = now_ms() - t0;
	const char *const eargv[] = { prog, NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = eargv };
	for (int i = 0; i < n; i++) {
		double t = now_ms();
		sandlot_proc_t *p = sandlot_exec(s, &spec, NULL, &err);
		if (!p) {
			fprintf(stderr, "exec: %s\n", sandlot_error_message(err));
			return 1;
		}
		sandlot_proc_wait(p, NULL, NULL);
		sandlot_proc_free(p);
		sb[i] = now_ms() - t;
	}
	t0 = now_ms();
	sandlot_destroy(s);
	double destroyed = now_ms() - t0;
	printf("%d runs of %s\n", n, prog);
	report("host fork+exec", host, n);
	report("sandbox exec (libsandlot)", sb, n);
	printf("sandbox create %.3f ms, destroy %.3f ms\n", created, destroyed);
	return 0;
}
