/* Minimal TAP test harness.  Each case runs in its own forked process with a
 * timeout, so a crash or hang fails that case only.
 *
 *   static void test_something(void) { CHECK(1 + 1 == 2); }
 *   int main(void) {
 *       TAP_RUN(test_something);
 *       return tap_done();
 *   }
 *
 * CHECK failures print the expression and location and fail the case (the
 * case keeps running so several failures show at once).  tap_skip(reason)
 * ends the case as a skip and prints the reason — use it only when the
 * machine truly lacks a feature.
 */
#ifndef SANDLOT_TAP_H
#define SANDLOT_TAP_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int tap_n, tap_failed_cases;
static int tap_case_failed;
static unsigned tap_timeout_s = 30;

#define TAP_SKIP_EXIT 77

#define CHECK(expr)                                                                   \
	do {                                                                          \
		if (!(expr)) {                                                        \
			printf("#   check failed: %s (%s:%d)\n", #expr, __FILE__, __LINE__); \
			fflush(stdout);                                               \
			tap_case_failed = 1;                                          \
		}                                                                     \
	} while (0)

#define CHECK_EQ_INT(a, b)                                                            \
	do {                                                                          \
		long long _a = (long long)(a), _b = (long long)(b);                   \
		if (_a != _b) {                                                       \
			printf("#   check failed: %s == %s (%lld != %lld) (%s:%d)\n", #a, #b, \
			       _a, _b, __FILE__, __LINE__);                           \
			fflush(stdout);                                               \
			tap_case_failed = 1;                                          \
		}                                                                     \
	} while (0)

#define CHECK_STR(a, b)                                                               \
	do {                                                                          \
		const char *_a = (a), *_b = (b);                                      \
		if (!_a || !_b || strcmp(_a, _b) != 0) {                              \
			printf("#   check failed: %s == %s (\"%s\" != \"%s\") (%s:%d)\n", #a, #b, \
			       _a ? _a : "(null)", _b ? _b : "(null)", __FILE__, __LINE__); \
			fflush(stdout);                                               \
			tap_case_failed = 1;                                          \
		}                                                                     \
	} while (0)

static inline void tap_skip(const char *reason)
{
	printf("#   skip reason: %s\n", reason);
	fflush(stdout);
	_exit(TAP_SKIP_EXIT);
}

/* Under SANDLOT_MUST_WORK=1 (CI) a skip is a failure unless the file named
 * by SANDLOT_MUST_WORK_SKIPS (tests/must-work-skips.txt) has a line
 * "unit:NAME  # reason" for the case. */
static inline int tap_skip_allowed(const char *name)
{
	const char *must = getenv("SANDLOT_MUST_WORK");
	if (!must || strcmp(must, "1") != 0)
		return 1;
	const char *list = getenv("SANDLOT_MUST_WORK_SKIPS");
	FILE *f = list ? fopen(list, "r") : NULL;
	if (!f)
		return 0;
	char line[512];
	int ok = 0;
	size_t n = strlen(name);
	while (!ok && fgets(line, sizeof(line), f)) {
		const char *p = line + strspn(line, " \t");
		if (strncmp(p, "unit:", 5) == 0 && strncmp(p + 5, name, n) == 0 &&
		    (p[5 + n] == ' ' || p[5 + n] == '\t') && strchr(p + 5 + n, '#'))
			ok = 1;
	}
	fclose(f);
	return ok;
}

static inline void tap_run(const char *name, void (*fn)(void))
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		alarm(tap_timeout_s);
		tap_case_failed = 0;
		fn();
		fflush(stdout);
		_exit(tap_case_failed ? 1 : 0);
	}
	int st = 0;
	tap_n++;
	if (pid < 0 || waitpid(pid, &st, 0) < 0) {
		printf("not ok %d - %s # could not fork\n", tap_n, name);
		tap_failed_cases++;
		return;
	}
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
		printf("ok %d - %s\n", tap_n, name);
	} else if (WIFEXITED(st) && WEXITSTATUS(st) == TAP_SKIP_EXIT && tap_skip_allowed(name)) {
		printf("ok %d - %s # SKIP see reason above\n", tap_n, name);
	} else if (WIFEXITED(st) && WEXITSTATUS(st) == TAP_SKIP_EXIT) {
		printf("not ok %d - %s # skipped (reason above), and SANDLOT_MUST_WORK=1: a skip "
		       "must be listed in tests/must-work-skips.txt\n", tap_n, name);
		tap_failed_cases++;
	} else {
		if (WIFSIGNALED(st))
			printf("not ok %d - %s # died with signal %d%s\n", tap_n, name,
			       WTERMSIG(st), WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
		else
			printf("not ok %d - %s\n", tap_n, name);
		tap_failed_cases++;
	}
	fflush(stdout);
}

#define TAP_RUN(fn) tap_run(#fn, fn)

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed_cases ? 1 : 0;
}

#endif
