/* A sandbox's first commands through libsandlot, the sandbox side of
 * start-up (sandlot-init's set-up and its first exec), with a baseline
 * build of sandlot-init in the same run:
 *
 *   build/bench/first-exec [-n N] [--baseline-init PATH] [--delay-us U]
 *
 * Per round and per init (this build's, then the baseline's): create a
 * sandbox (the library's defaults: namespaces, cgroup limits, a quota'd
 * workspace, seccomp), exec `/bin/echo hi` at once ("exec 1", the command
 * a `sandlot run` or a daemon's first exec gives init while it may still
 * be finishing its set-up), then twice more ("exec 2", "exec 3": the
 * spare process init keeps for the next command), then destroy it.  Rounds
 * alternate the inits (and which goes first) so that the machine's load,
 * and the previous sandbox's teardown, hit both alike.  With
 * --delay-us, that long a pause before each exec (init idle first).
 *
 * Prints p50 / p90 per row and the ratio of this build to the baseline,
 * with the load average.  Needs root; SANDLOT_INIT (or sandlot-init next
 * to this program's build) names this build's init.  Exit status 0
 * whatever the numbers: a measurement, not a test. */
#include <sandlot.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* TTFE: create + exec 1, what a caller waits for before the first
 * command's output. */
enum { CREATE, EXEC1, EXEC2, EXEC3, TTFE, ROWS };
static const char *const row_names[ROWS] = { "create", "exec 1 (first)", "exec 2", "exec 3",
					      "create+exec 1" };

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

static double quantile(double *v, int n, double q)
{
	qsort(v, (size_t)n, sizeof(double), cmp);
	return v[(int)(q * (n - 1))];
}

/* One round with `init` (NULL: the library's default); 0 or -1. */
static int round_once(const char *init, int delay_us, double out[ROWS])
{
	sandlot_error_t *err = NULL;
	sandlot_options_t opts;
	sandlot_options_init(&opts);
	opts.init_path = init;
	const char *const argv[] = { "/bin/echo", "hi", NULL };
	sandlot_exec_spec_t spec = { .size = sizeof(spec), .argv = argv };

	double t = now_ms();
	sandlot_t *s = sandlot_create(&opts, &err);
	if (!s) {
		fprintf(stderr, "create: %s\n", sandlot_error_message(err));
		sandlot_error_free(err);
		return -1;
	}
	out[CREATE] = now_ms() - t;
	for (int k = EXEC1; k <= EXEC3; k++) {
		if (delay_us)
			usleep((useconds_t)delay_us);
		t = now_ms();
		sandlot_proc_t *p = sandlot_exec(s, &spec, NULL, &err);
		sandlot_exit_t ex = { .size = sizeof(ex), .exit_code = -1 };
		if (!p || sandlot_proc_wait(p, &ex, &err) < 0 || ex.exit_code != 0) {
			fprintf(stderr, "exec: %s\n", err ? sandlot_error_message(err) : "failed");
			sandlot_error_free(err);
			sandlot_proc_free(p);
			sandlot_destroy(s);
			return -1;
		}
		sandlot_proc_free(p);
		out[k] = now_ms() - t;
	}
	sandlot_destroy(s);
	out[TTFE] = out[CREATE] + out[EXEC1];
	return 0;
}

int main(int argc, char **argv)
{
	int n = 100, delay_us = 0;
	const char *base = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-n") == 0 && i + 1 < argc)
			n = atoi(argv[++i]);
		else if (strcmp(argv[i], "--baseline-init") == 0 && i + 1 < argc)
			base = argv[++i];
		else if (strcmp(argv[i], "--delay-us") == 0 && i + 1 < argc)
			delay_us = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [-n N] [--baseline-init PATH] [--delay-us U]\n",
				argv[0]);
			return 2;
		}
	}
	if (n < 10)
		n = 10;
	int kinds = base ? 2 : 1;
	double *v[2][ROWS];
	for (int b = 0; b < kinds; b++)
		for (int r = 0; r < ROWS; r++)
			if (!(v[b][r] = calloc((size_t)n, sizeof(double))))
				return 1;
	/* Warm-up: the page cache, the library's cached seccomp program. */
	double scratch[ROWS];
	for (int b = 0; b < kinds; b++)
		if (round_once(b ? base : NULL, 0, scratch) < 0)
			return 1;
	for (int i = 0; i < n; i++) {
		/* Which init goes first alternates too: the one after the other
		 * meets what is left of the previous sandbox's teardown. */
		for (int j = 0; j < kinds; j++) {
			int b = (i + j) % kinds;
			double out[ROWS];
			if (round_once(b ? base : NULL, delay_us, out) < 0)
				return 1;
			for (int r = 0; r < ROWS; r++)
				v[b][r][i] = out[r];
		}
	}
	double load[3] = { 0 };
	if (getloadavg(load, 3) < 0)
		load[0] = load[1] = load[2] = -1;
	printf("first-exec: %d rounds, /bin/echo hi, delay %d us, load average %.2f %.2f %.2f\n", n,
	       delay_us, load[0], load[1], load[2]);
	printf("%-16s %12s %12s", "", "p50 ms", "p90 ms");
	if (base)
		printf(" %12s %12s %10s", "base p50", "base p90", "p50 ratio");
	printf("\n");
	for (int r = 0; r < ROWS; r++) {
		double p50 = quantile(v[0][r], n, 0.5), p90 = quantile(v[0][r], n, 0.9);
		printf("%-16s %12.3f %12.3f", row_names[r], p50, p90);
		if (base) {
			double b50 = quantile(v[1][r], n, 0.5), b90 = quantile(v[1][r], n, 0.9);
			printf(" %12.3f %12.3f %10.2f", b50, b90, p50 / b50);
		}
		printf("\n");
	}
	return 0;
}
