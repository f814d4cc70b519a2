/* The seccomp policy (spec/seccomp-policy.txt) and its compiler
 * (src/linux/seccomp.c): the shipped policy compiles into a sealed program;
 * bad policies are refused with the line number; and, loaded for real in a
 * forked child the way sandlot-init loads it (no_new_privs, pread from the
 * memfd, prctl), it allows what shells, python and node need, refuses what
 * it must with EPERM/ENOSYS, and kills foreign-architecture system calls.
 *
 * The denied calls below are made with arguments that would be harmless even
 * if the filter let them through: these tests may run as root. */
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/filter.h>
#include <linux/kcmp.h>
#include <linux/futex.h>
#include <linux/keyctl.h>
#include <linux/openat2.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"
#include "linux/seccomp.h"
#include "tap.h"

#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT 0x40000000
#endif

/* clone3's argument block, first version (<linux/sched.h> clashes with <sched.h>). */
struct clone3_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
};

/* ---- helpers ------------------------------------------------------------- */

static int program_fd(void)
{
	sandlot_error_t *err = NULL;
	int fd = sandlot__seccomp_program_fd(NULL, &err);
	if (fd < 0) {
		printf("#   %s\n", sandlot_error_message(err));
		sandlot_error_free(err);
	}
	return fd;
}

/* What sandlot-init does in a command's process: read the program from the
 * memfd with pread, set no_new_privs, load it.  No core dumps: a SIGSYS kill
 * is expected in some tests. */
static int load_program(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -1;
	size_t n = (size_t)st.st_size;
	struct sock_filter *insns = malloc(n);
	if (!insns || pread(fd, insns, n, 0) != (ssize_t)n)
		return -1;
	struct sock_fprog prog = { .len = (unsigned short)(n / sizeof(*insns)), .filter = insns };
	struct rlimit no_core = { 0, 0 };
	setrlimit(RLIMIT_CORE, &no_core);
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* Run fn in a forked child under the shipped filter.  Returns the child's
 * wait status; the child exits 0 when none of fn's CHECKs failed. */
static int run_filtered(void (*fn)(void))
{
	int fd = program_fd();
	if (fd < 0)
		return -1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (load_program(fd) < 0) {
			printf("#   loading the filter failed: %s\n", strerror(errno));
			fflush(stdout);
			_exit(99);
		}
		tap_case_failed = 0;
		fn();
		fflush(stdout);
		_exit(tap_case_failed ? 1 : 0);
	}
	int st = -1;
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return st;
}

static void check_exited_ok(int st)
{
	CHECK(st != -1);
	if (WIFSIGNALED(st))
		printf("#   filtered child died with signal %d\n", WTERMSIG(st));
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A call made under the filter must fail with `want`. */
#define EXPECT_ERRNO(want, call)                                                              \
	do {                                                                                  \
		errno = 0;                                                                    \
		long _r = (long)(call);                                                       \
		int _e = errno;                                                               \
		if (_r != -1 || _e != (want)) {                                               \
			printf("#   %s: returned %ld, errno %d (%s), wanted errno %d (%s)\n", \
			       #call, _r, _e, strerror(_e), (want), strerror(want));          \
			tap_case_failed = 1;                                                  \
		}                                                                             \
		if (_r == 0 && getpid() != self) /* a clone the filter let through */        \
			_exit(0);                                                             \
	} while (0)

/* A call made under the filter must not be refused by it (it may still fail
 * for its own reasons, e.g. ENOTTY). */
#define EXPECT_NOT_FILTERED(call)                                                             \
	do {                                                                                  \
		errno = 0;                                                                    \
		long _r = (long)(call);                                                       \
		int _e = errno;                                                               \
		if (_r == -1 && (_e == EPERM || _e == ENOSYS)) {                              \
			printf("#   %s: refused with %s\n", #call, strerror(_e));                 \
			tap_case_failed = 1;                                                  \
		}                                                                             \
	} while (0)

/* ---- the shipped policy and the program memfd ------------------------- */

static void test_shipped_policy_compiles(void)
{
	scmp_filter_ctx ctx = NULL;
	sandlot_error_t *err = NULL;
	int n = sandlot__seccomp_compile(sandlot__seccomp_policy_text, &ctx, &err);
	if (n < 0)
		printf("#   %s\n", sandlot_error_message(err));
	CHECK(n > 300);
	CHECK(ctx != NULL);
	printf("#   %d rules\n", n);
	if (ctx) {
		uint32_t act = 0;
		CHECK_EQ_INT(seccomp_attr_get(ctx, SCMP_FLTATR_ACT_BADARCH, &act), 0);
		CHECK_EQ_INT(act, SCMP_ACT_KILL_PROCESS);
		CHECK_EQ_INT(seccomp_attr_get(ctx, SCMP_FLTATR_ACT_DEFAULT, &act), 0);
		CHECK_EQ_INT(act, SCMP_ACT_ERRNO(ENOSYS));
		seccomp_release(ctx);
	}
}

static void test_program_fd_is_sealed(void)
{
	int fd = program_fd();
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK_EQ_INT(program_fd(), fd); /* cached */
	CHECK_EQ_INT(fcntl(fd, F_GET_SEALS),
		     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	struct stat st;
	CHECK_EQ_INT(fstat(fd, &st), 0);
	CHECK(st.st_size > 0);
	CHECK_EQ_INT(st.st_size % (off_t)sizeof(struct sock_filter), 0);
	CHECK(st.st_size / (off_t)sizeof(struct sock_filter) <= BPF_MAXINSNS);
	printf("#   %lld BPF instructions\n", (long long)(st.st_size / 8));
	struct sock_filter insn;
	errno = 0;
	CHECK_EQ_INT(pwrite(fd, &insn, sizeof(insn), 0), -1);
	CHECK_EQ_INT(errno, EPERM);
	CHECK_EQ_INT(ftruncate(fd, 0), -1);
	CHECK_EQ_INT(fcntl(fd, F_ADD_SEALS, 0), -1); /* F_SEAL_SEAL */
	/* The first instruction loads the architecture (offset 4 of seccomp_data). */
	CHECK_EQ_INT(pread(fd, &insn, sizeof(insn), 0), (ssize_t)sizeof(insn));
	CHECK_EQ_INT(insn.code, BPF_LD | BPF_W | BPF_ABS);
	CHECK_EQ_INT(insn.k, 4);
}

static void *fd_thread(void *arg)
{
	*(int *)arg = program_fd();
	return NULL;
}

static void test_program_fd_thread_safe(void)
{
	/* Each case is a fresh process, so nothing is cached yet: eight threads
	 * race to build it and must all get the same descriptor. */
	pthread_t t[8];
	int fds[8];
	for (int i = 0; i < 8; i++)
		CHECK_EQ_INT(pthread_create(&t[i], NULL, fd_thread, &fds[i]), 0);
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		CHECK(fds[i] >= 0);
		CHECK_EQ_INT(fds[i], fds[0]);
	}
}

/* ---- the compiler refuses bad policies, naming the line ---------------- */

#define HEAD "# comment\ndefault errno ENOSYS # d\n" /* policy lines 1-2 */

static const struct {
	const char *text;
	const char *message; /* substring of the error message */
} bad_policies[] = {
	{ HEAD "allow nosuchcall # r\n", "line 3: unknown system call 'nosuchcall'" },
	{ HEAD "\nallow read\n", "line 4: no reason given" },
	{ HEAD "allow read #   \n", "line 3: no reason given" },
	{ "allow read # r\n", "line 1: rule before the 'default' line" },
	{ "# nothing but comments\n\n", "no 'default' line" },
	{ "", "no 'default' line" },
	{ "default allow # everything\n", "line 1: 'default allow' is not accepted" },
	{ HEAD "default errno EPERM # again\n", "line 3: second 'default' line" },
	{ HEAD "allow read read # r\n", "line 3: unexpected 'read'" },
	{ HEAD "allow read if arg6 == 1 # r\n", "line 3: expected arg0 .. arg5, found 'arg6'" },
	{ HEAD "allow read if arg0 = 1 # r\n", "line 3: unexpected character '='" },
	{ HEAD "allow read if arg0 == # r\n", "line 3: expected a value, found 'end of rule'" },
	{ HEAD "allow read if arg0 == 12abc # r\n", "line 3: bad number '12abc'" },
	{ HEAD "allow read if arg0 == 0x1ffffffffffffffff # r\n", "line 3: bad number" },
	{ HEAD "allow read if arg0 == AF_NOPE # r\n", "line 3: unknown constant 'AF_NOPE'" },
	{ HEAD "allow read if arg0 $ 1 # r\n", "line 3: unexpected character '$'" },
	{ HEAD "allow read if arg0 > 1 and arg0 < 5 # r\n", "line 3: arg0 is compared more than once" },
	{ HEAD "allow read if arg0 & 0xf == 0x10 # r\n", "line 3: value 0x10 has bits outside the mask" },
	{ HEAD "allow read if arg0 & 1 < 1 # r\n", "line 3: after '&' only == and != compare" },
	{ HEAD "allow read if arg0 & 0 == 0 # r\n", "line 3: mask is 0" },
	{ HEAD "allow read if arg0 & 0xf != 1 and arg0 & 0xff != 2 # r\n", "line 3: the != comparisons of arg0 must use the same mask" },
	{ HEAD "allow read if arg0 == 1 or arg0 == 2 # r\n", "line 3: unexpected 'or'" },
	{ HEAD "errno EFOO read # r\n", "line 3: unknown errno 'EFOO'" },
	{ HEAD "errno 5000 read # r\n", "line 3: errno 5000 is out of range" },
	{ HEAD "permit read # r\n", "line 3: expected allow, deny, errno or kill, found 'permit'" },
	{ HEAD "allow socketcall # r\n", "line 3: 'socketcall' is not a system call on this architecture" },
	{ HEAD "allow read # r\nallow write # w\nallow read if arg0 == 0 # r\n", "line 5: 'read' already has a rule at line 3" },
	{ HEAD "deny read if arg0 == 0 # r\nallow read # r\n", "line 4: 'read' already has a rule at line 3" },
	{ HEAD "allow read # r\nallow read # r\n", "line 4: 'read' already has a rule at line 3" },
	{ HEAD "define X 1 # x\ndefine X 2 # x\n", "line 4: 'X' is already defined" },
	{ HEAD "define AF_INET 1 # x\n", "line 3: 'AF_INET' is a built-in constant" },
	{ HEAD "define allow 1 # x\n", "line 3: expected a name to define, found 'allow'" },
	{ HEAD "allow ioctl if arg1 != 1 << 63 # r\n", "line 3: unexpected '<'" },
	{ HEAD "allow ioctl if arg1 != 0x8000000000000000 and arg1 != 0x4000000000000000 and "
	       "arg1 != 0x2000000000000000 and arg1 != 0x1000000000000000 and arg1 != 0x800000000000000 # r\n",
	  "line 3: conditions expand to more than 256 rules" },
};

static void test_bad_policies_are_refused(void)
{
	for (size_t i = 0; i < sizeof(bad_policies) / sizeof(bad_policies[0]); i++) {
		scmp_filter_ctx ctx = (scmp_filter_ctx)&ctx; /* must stay untouched */
		sandlot_error_t *err = NULL;
		int rc = sandlot__seccomp_compile(bad_policies[i].text, &ctx, &err);
		if (rc != -1)
			printf("#   policy %zu was accepted: %s", i, bad_policies[i].text);
		CHECK_EQ_INT(rc, -1);
		CHECK(ctx == (scmp_filter_ctx)&ctx);
		if (!err)
			continue;
		CHECK_EQ_INT(sandlot_error_status(err), EINVAL);
		const char *msg = sandlot_error_message(err);
		if (!strstr(msg, bad_policies[i].message)) {
			printf("#   policy %zu: got \"%s\", wanted \"%s\"\n", i, msg,
			       bad_policies[i].message);
			tap_case_failed = 1;
		}
		sandlot_error_free(err);
	}
}

static void test_good_policy_syntax(void)
{
	static const char text[] =
		"default kill # unlisted\n"
		"\n"
		"  # indented comment\n"
		"define TWO 2 # a name\n"
		"define BOTH TWO|0x4 # names and numbers\n"
		"allow read # r\n"
		"allow write if arg0 == 1 and arg2 <= 0x100 # w\n"
		"allow write if arg0 == TWO and arg2 > 0 # w\n"
		"errno EACCES getpriority if arg0 & BOTH == BOTH # e\r\n"
		"errno 13 setpriority if arg1 & 0xff != 1 and arg1 & 0xff != 2 # e\n"
		"kill clone3 # default, documented\n"
		"deny mount # m"; /* no final newline */
	scmp_filter_ctx ctx = NULL;
	sandlot_error_t *err = NULL;
	int n = sandlot__seccomp_compile(text, &ctx, &err);
	if (n < 0)
		printf("#   %s\n", sandlot_error_message(err));
	CHECK_EQ_INT(n, 7);
	if (ctx)
		seccomp_release(ctx);
}

/* ---- the compiler's semantics, checked by the kernel ---------------------- */

/* A tiny policy whose only interesting rules give distinct errnos, so
 * every case is observable without running anything. */
static const char semantics_policy[] =
	"default errno ENOSYS # d\n"
	"allow write # report\n"
	"allow exit_group # finish\n"
	"allow exit # finish\n"
	/* what stdio and the sanitizer runtime of an ASan build may need */
	"allow brk # r\nallow mmap # r\nallow munmap # r\nallow mprotect # r\nallow madvise # r\n"
	"allow newfstatat # r\nallow fstat # r\nallow read # r\nallow openat # r\nallow close # r\n"
	"allow readlink # r\nallow rt_sigaction # r\nallow rt_sigprocmask # r\nallow sigaltstack # r\n"
	"allow getpid # r\nallow gettid # r\nallow tgkill # r\nallow futex # r\nallow sched_yield # r\n"
	"allow prctl # r\nallow prlimit64 # r\nallow getrlimit # r\n"
	"errno EACCES getpriority if arg0 & 0xff != 1 and arg0 & 0xff != 2 # not 1, not 2\n"
	"errno EINVAL getpriority if arg0 & 0xff == 1 # 1\n"
	"errno ENOENT setpriority if arg0 > 10 and arg1 == 7 # two args\n"
	"errno EPERM ioprio_get if arg0 & 0xffffffff != 5 # one exclusion\n";

static int load_text(const char *text)
{
	scmp_filter_ctx ctx = NULL;
	sandlot_error_t *err = NULL;
	if (sandlot__seccomp_compile(text, &ctx, &err) < 0) {
		printf("#   %s\n", sandlot_error_message(err));
		return -1;
	}
	seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1);
	int rc = seccomp_load(ctx);
	seccomp_release(ctx);
	return rc;
}

static void test_compiled_semantics(void)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		struct rlimit no_core = { 0, 0 };
		setrlimit(RLIMIT_CORE, &no_core);
		if (load_text(semantics_policy) < 0)
			_exit(99);
		/* "!=" pair: every low byte but 1 and 2 → EACCES, whatever else is set. */
		uint64_t highs[] = { 0, 0x100, 0xff00, 0x80000000, 0x100000000ULL, UINT64_MAX << 8 };
		for (size_t h = 0; h < sizeof(highs) / sizeof(highs[0]); h++) {
			for (unsigned lo = 0; lo < 256; lo++) {
				uint64_t v = highs[h] | lo;
				errno = 0;
				long r = syscall(SYS_getpriority, v, 0);
				int want = lo == 1 ? EINVAL : lo == 2 ? ENOSYS : EACCES;
				if (r != -1 || errno != want) {
					printf("#   getpriority(0x%llx): errno %d, wanted %d\n",
					       (unsigned long long)v, errno, want);
					tap_case_failed = 1;
				}
			}
		}
		/* Conditions on two arguments are and-ed. */
		errno = 0;
		CHECK(syscall(SYS_setpriority, 11, 7, 0) == -1 && errno == ENOENT);
		errno = 0;
		CHECK(syscall(SYS_setpriority, 10, 7, 0) == -1 && errno == ENOSYS);
		errno = 0;
		CHECK(syscall(SYS_setpriority, 11, 8, 0) == -1 && errno == ENOSYS);
		/* One 32-bit exclusion: the high half is ignored. */
		errno = 0;
		CHECK(syscall(SYS_ioprio_get, 5, 0) == -1 && errno == ENOSYS);
		errno = 0;
		CHECK(syscall(SYS_ioprio_get, 0x700000005ULL, 0) == -1 && errno == ENOSYS);
		errno = 0;
		CHECK(syscall(SYS_ioprio_get, 4, 0) == -1 && errno == EPERM);
		errno = 0;
		CHECK(syscall(SYS_ioprio_get, 0x500000000ULL, 0) == -1 && errno == EPERM);
		fflush(stdout);
		_exit(tap_case_failed ? 1 : 0);
	}
	int st = -1;
	waitpid(pid, &st, 0);
	check_exited_ok(st);
}

/* ---- the shipped filter: what must work --------------------------------- */

static void *thread_fn(void *arg)
{
	return (char *)arg + 1;
}

static void allowed_calls(void)
{
	pid_t self = getpid();
	(void)self;
	CHECK(syscall(SYS_getpid) == self);

	/* read/write/open */
	int p[2];
	CHECK_EQ_INT(pipe2(p, O_CLOEXEC), 0);
	CHECK_EQ_INT(write(p[1], "abc", 3), 3);
	int avail = -1;
	CHECK_EQ_INT(ioctl(p[0], FIONREAD, &avail), 0);
	CHECK_EQ_INT(avail, 3);
	char buf[8];
	CHECK_EQ_INT(read(p[0], buf, sizeof(buf)), 3);
	int fd = (int)syscall(SYS_open, "/proc/self/status", O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0);
	CHECK(read(fd, buf, sizeof(buf)) > 0);
	close(fd);
	fd = openat(AT_FDCWD, "/dev/null", O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0);
	struct statx stx;
	CHECK_EQ_INT(statx(AT_FDCWD, "/", 0, STATX_BASIC_STATS, &stx), 0);
	EXPECT_NOT_FILTERED(syscall(SYS_faccessat2, AT_FDCWD, "/", R_OK, AT_EACCESS));
	struct open_how how = { .flags = O_RDONLY | O_CLOEXEC };
	long fd2 = syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));
	CHECK(fd2 >= 0);
	close((int)fd2);

	/* terminal ioctls are allowed (and fail for their own reason on /dev/null) */
	struct termios tio;
	errno = 0;
	CHECK(ioctl(fd, TCGETS, &tio) == -1 && errno == ENOTTY);
	struct winsize ws;
	errno = 0;
	CHECK(ioctl(fd, TIOCGWINSZ, &ws) == -1 && errno == ENOTTY);
	/* a request with bit 31 set, passed through an int, arrives sign-extended */
	errno = 0;
	CHECK(syscall(SYS_ioctl, fd, (unsigned long)(long)(int)0x80086601, &avail) == -1 &&
	      errno == ENOTTY);

	/* memory, as python and V8 use it */
	char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(m != MAP_FAILED);
	m = mremap(m, 1 << 20, 2 << 20, MREMAP_MAYMOVE);
	CHECK(m != MAP_FAILED);
	CHECK_EQ_INT(madvise(m, 1 << 20, MADV_DONTNEED), 0);
	CHECK_EQ_INT(mprotect(m, 4096, PROT_READ), 0);
	CHECK_EQ_INT(munmap(m, 2 << 20), 0);
	int futex_word = 0;
	CHECK(syscall(SYS_futex, &futex_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0) == 0);
	CHECK(syscall(SYS_membarrier, 0 /* MEMBARRIER_CMD_QUERY */, 0) >= 0);
	int mfd = memfd_create("t", MFD_CLOEXEC);
	CHECK(mfd >= 0);
	close(mfd);

	/* threads: glibc tries clone3 (ENOSYS) and falls back to clone */
	pthread_t t;
	void *ret = NULL;
	char c;
	CHECK_EQ_INT(pthread_create(&t, NULL, thread_fn, &c), 0);
	CHECK_EQ_INT(pthread_join(t, &ret), 0);
	CHECK(ret == &c + 1);

	/* processes */
	pid_t kid = fork();
	if (kid == 0)
		_exit(7);
	int st = 0;
	CHECK(kid > 0 && waitpid(kid, &st, 0) == kid && WIFEXITED(st) && WEXITSTATUS(st) == 7);
	kid = (pid_t)syscall(SYS_clone, CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD, 0, 0,
			     &futex_word, 0);
	if (kid == 0)
		_exit(8);
	CHECK(kid > 0 && waitpid(kid, &st, 0) == kid && WIFEXITED(st) && WEXITSTATUS(st) == 8);
	int pidfd = (int)syscall(SYS_pidfd_open, self, 0);
	CHECK(pidfd >= 0);
	CHECK_EQ_INT(syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0), 0);
	close(pidfd);

	/* limits, identity, misc */
	struct rlimit rl;
	CHECK_EQ_INT(getrlimit(RLIMIT_NOFILE, &rl), 0);
	CHECK_EQ_INT(setrlimit(RLIMIT_NOFILE, &rl), 0);
	CHECK_EQ_INT(syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &rl), 0);
	CHECK_EQ_INT(syscall(SYS_prlimit64, getppid(), RLIMIT_NOFILE, NULL, &rl), 0);
	EXPECT_ERRNO(ENOSYS, syscall(SYS_prlimit64, getppid(), RLIMIT_NOFILE, &rl, NULL));
	CHECK(personality(0xffffffff) != -1);
	CHECK_EQ_INT(personality(PER_LINUX), PER_LINUX);
	char name[16];
	CHECK_EQ_INT(prctl(PR_SET_NAME, "filtered", 0, 0, 0), 0);
	CHECK_EQ_INT(prctl(PR_GET_NAME, name, 0, 0, 0), 0);
	EXPECT_ERRNO(ENOSYS, prctl(PR_SET_MM, PR_SET_MM_START_CODE, 0, 0, 0));
	CHECK(getrandom(buf, sizeof(buf), 0) == sizeof(buf));
	CHECK_EQ_INT(syscall(SYS_sync), 0); /* reported as done, not run */

	/* sockets agents use */
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	CHECK(s >= 0);
	close(s);
	s = socket(AF_INET6, SOCK_DGRAM, 0);
	CHECK(s >= 0 || errno == EAFNOSUPPORT);
	close(s);
	s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	CHECK(s >= 0);
	close(s);
	s = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, 0 /* NETLINK_ROUTE */);
	CHECK(s >= 0);
	close(s);
	s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0 /* NETLINK_ROUTE, as getifaddrs asks */);
	CHECK(s >= 0);
	close(s);
	struct ifaddrs *ifa = NULL;
	CHECK_EQ_INT(getifaddrs(&ifa), 0);
	freeifaddrs(ifa);
	int sp[2];
	CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sp), 0);
	close(fd);
}

static void test_filter_allows_normal_calls(void)
{
	check_exited_ok(run_filtered(allowed_calls));
}

/* ---- the shipped filter: what must fail ---------------------------------- */

static void denied_calls(void)
{
	pid_t self = getpid();
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	char c = 'x';

	EXPECT_ERRNO(EPERM, syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_add_key, NULL, NULL, NULL, 0, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_request_key, NULL, NULL, NULL, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_bpf, 0 /* BPF_MAP_CREATE */, NULL, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_userfaultfd, ~0));
	EXPECT_ERRNO(EPERM, syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_io_uring_setup, 1, NULL));
	EXPECT_ERRNO(EPERM, syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_io_uring_register, -1, 0, NULL, 0));

	/* namespaces */
	EXPECT_ERRNO(EPERM, unshare(CLONE_NEWUSER));
	EXPECT_ERRNO(EPERM, unshare(CLONE_FS));
	EXPECT_ERRNO(EPERM, syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_clone, CLONE_NEWNS | CLONE_VM | CLONE_VFORK | SIGCHLD,
				    0, 0, 0, 0));
	EXPECT_ERRNO(EPERM, setns(-1, 0));
	struct clone3_args ca = { .flags = CLONE_NEWUSER, .exit_signal = SIGCHLD };
	EXPECT_ERRNO(ENOSYS, syscall(SYS_clone3, &ca, sizeof(ca)));
	ca.flags = 0;
	EXPECT_ERRNO(ENOSYS, syscall(SYS_clone3, &ca, sizeof(ca)));

	/* mounts (the paths do not exist, in case the filter failed) */
	EXPECT_ERRNO(EPERM, mount(NULL, "/nonexistent-sandlot", NULL, MS_REMOUNT, NULL));
	EXPECT_ERRNO(EPERM, umount2("/nonexistent-sandlot", 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_pivot_root, "/nonexistent-sandlot", "/nonexistent-sandlot"));
	EXPECT_ERRNO(EPERM, syscall(SYS_open_tree, -1, "/nonexistent-sandlot", 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_move_mount, -1, "", -1, "", 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_fsopen, "nonexistent-fs", 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_fsconfig, -1, 0, NULL, NULL, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_fsmount, -1, 0, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_fspick, -1, "", 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_mount_setattr, -1, "", 0, NULL, 0));
	EXPECT_ERRNO(EPERM, chroot("/nonexistent-sandlot"));

	/* other processes */
	EXPECT_ERRNO(EPERM, syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0));
	struct iovec iov = { &c, 1 };
	EXPECT_ERRNO(EPERM, syscall(SYS_process_vm_readv, getppid(), &iov, 1, &iov, 1, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_process_vm_writev, getppid(), &iov, 1, &iov, 1, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_kcmp, self, self, KCMP_FILE, 0, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_pidfd_getfd, -1, 0, 0));

	/* the host: modules, kexec, reboot, swap, clock, accounting, quotas */
	EXPECT_ERRNO(EPERM, syscall(SYS_init_module, NULL, 0, ""));
	EXPECT_ERRNO(EPERM, syscall(SYS_finit_module, -1, "", 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_delete_module, "nonexistent_sandlot", 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_kexec_load, 0, 0, NULL, 0xdeadbeefUL));
	EXPECT_ERRNO(EPERM, syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0xdeadbeefUL));
	EXPECT_ERRNO(EPERM, syscall(SYS_reboot, 0, 0, 0, NULL)); /* bad magic */
	EXPECT_ERRNO(EPERM, syscall(SYS_swapon, "/nonexistent-sandlot", 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_swapoff, "/nonexistent-sandlot"));
	EXPECT_ERRNO(EPERM, syscall(SYS_settimeofday, NULL, NULL));
	EXPECT_ERRNO(EPERM, syscall(SYS_clock_settime, CLOCK_REALTIME, NULL));
	EXPECT_ERRNO(EPERM, syscall(SYS_clock_adjtime, CLOCK_REALTIME, NULL));
	EXPECT_ERRNO(EPERM, syscall(SYS_adjtimex, NULL));
	EXPECT_ERRNO(EPERM, syscall(SYS_acct, "/nonexistent-sandlot"));
	EXPECT_ERRNO(EPERM, syscall(SYS_quotactl, 0, NULL, 0, NULL));
	EXPECT_ERRNO(EPERM, syscall(SYS_open_by_handle_at, -1, NULL, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_name_to_handle_at, -1, "", NULL, NULL, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_lookup_dcookie, 0, NULL, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_sethostname, "x", 100000));
	EXPECT_ERRNO(EPERM, syscall(SYS_syslog, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_iopl, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_modify_ldt, 0, NULL, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_mknod, "/nonexistent-sandlot/x", S_IFCHR | 0600, 0));
	EXPECT_ERRNO(EPERM, syscall(SYS_mknodat, AT_FDCWD, "/nonexistent-sandlot/x", S_IFBLK, 0));
	if (setsid() >= 0) /* no controlling terminal to hang up, should it get through */
		EXPECT_ERRNO(EPERM, syscall(SYS_vhangup));

	/* personality: only the harmless values */
	EXPECT_ERRNO(EPERM, personality(ADDR_NO_RANDOMIZE));
	EXPECT_ERRNO(EPERM, personality(READ_IMPLIES_EXEC));
	EXPECT_ERRNO(EPERM, personality(PER_BSD));

	/* sockets */
	EXPECT_ERRNO(EPERM, socket(AF_PACKET, SOCK_RAW, 0));
	EXPECT_ERRNO(EPERM, socket(AF_PACKET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
	EXPECT_ERRNO(EPERM, socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
	EXPECT_ERRNO(EPERM, socket(AF_INET6, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	EXPECT_ERRNO(EPERM, socket(AF_INET, SOCK_PACKET, 0));
	EXPECT_ERRNO(EPERM, socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 9 /* NETLINK_AUDIT */));
	EXPECT_ERRNO(EPERM, socket(AF_NETLINK, SOCK_DGRAM, 12 /* NETLINK_NETFILTER */));
	EXPECT_ERRNO(EPERM, socket(AF_NETLINK, SOCK_RAW, 15 /* NETLINK_KOBJECT_UEVENT */));
	EXPECT_ERRNO(EPERM, syscall(SYS_socket, 0x100000000UL | AF_NETLINK, SOCK_RAW, 0));
	EXPECT_ERRNO(EPERM, socket(AF_ALG, SOCK_SEQPACKET, 0));
	EXPECT_ERRNO(EPERM, socket(AF_VSOCK, SOCK_STREAM, 0));
	EXPECT_ERRNO(EPERM, socket(AF_KEY, SOCK_RAW, 2 /* PF_KEY_V2 */));
	EXPECT_ERRNO(ENOSYS, socket(AF_BLUETOOTH, SOCK_STREAM, 0));
	EXPECT_ERRNO(ENOSYS, socket(AF_NETLINK, SOCK_SEQPACKET, 0));
	EXPECT_ERRNO(ENOSYS, syscall(SYS_socket, 0x100000000UL | AF_INET, SOCK_STREAM, 0));
	EXPECT_ERRNO(ENOSYS, socketpair(AF_INET, SOCK_STREAM, 0, NULL));

	/* terminal injection, however the request is spelled */
	EXPECT_ERRNO(EPERM, ioctl(devnull, TIOCSTI, &c));
	EXPECT_ERRNO(EPERM, syscall(SYS_ioctl, devnull, 0x100000000UL | TIOCSTI, &c));
	EXPECT_ERRNO(EPERM, syscall(SYS_ioctl, devnull, 0xffffffff00000000UL | TIOCSTI, &c));
	EXPECT_ERRNO(EPERM, ioctl(devnull, TIOCLINUX, &c));
	EXPECT_ERRNO(EPERM, ioctl(devnull, TIOCSETD, &c));

	/* not listed: the default */
	EXPECT_ERRNO(ENOSYS, syscall(SYS_io_setup, 1, NULL));
	EXPECT_ERRNO(ENOSYS, syscall(SYS_msgget, 0, 0));
	EXPECT_ERRNO(ENOSYS, syscall(SYS_fanotify_init, 0, 0));
	EXPECT_ERRNO(ENOSYS, syscall(SYS_vmsplice, -1, NULL, 0, 0));
	EXPECT_ERRNO(ENOSYS, syscall(SYS_mbind, NULL, 0, 0, NULL, 0, 0));
	EXPECT_ERRNO(ENOSYS, syscall(SYS_process_madvise, -1, NULL, 0, 0, 0));
	EXPECT_ERRNO(ENOSYS, syscall(SYS_memfd_secret, 0));
	EXPECT_ERRNO(ENOSYS, syscall(SYS_sched_setscheduler, 0, SCHED_FIFO, NULL));
	EXPECT_ERRNO(ENOSYS, syscall(SYS_capset, NULL, NULL));
	EXPECT_ERRNO(ENOSYS, syscall(460 /* lsm_set_self_attr, unknown to libseccomp 2.5 */, 0, NULL, 0, 0));
	EXPECT_ERRNO(ENOSYS, syscall(1000));
}

static void test_filter_refuses_dangerous_calls(void)
{
	check_exited_ok(run_filtered(denied_calls));
}

/* ---- foreign architectures are killed ---------------------------------- */

static long i386_getpid(void)
{
	long ret = 20; /* __NR_getpid on i386 */
	__asm__ volatile("int $0x80" : "+a"(ret) : : "memory");
	return ret;
}

static void i386_call(void)
{
	i386_getpid();
	printf("#   the i386 system call returned\n");
}

static void x32_call(void)
{
	syscall(__X32_SYSCALL_BIT | SYS_getpid);
	printf("#   the x32 system call returned\n");
}

static void x32_call_unknown(void)
{
	syscall(__X32_SYSCALL_BIT | 999);
	printf("#   the x32 system call returned\n");
}

static void check_sigsys(int st)
{
	if (WIFEXITED(st))
		printf("#   filtered child exited %d instead of being killed\n", WEXITSTATUS(st));
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS);
}

static void test_i386_syscall_is_killed(void)
{
	/* Without the filter an i386 getpid works where the kernel has IA32
	 * emulation (without it, int $0x80 faults before seccomp sees it). */
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0)
		_exit(i386_getpid() == getpid() ? 0 : 1);
	int st = 0;
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		tap_skip("the kernel runs no i386 system calls (no IA32 emulation)");
	check_sigsys(run_filtered(i386_call));
}

static void test_x32_syscall_is_killed(void)
{
	check_sigsys(run_filtered(x32_call));
	check_sigsys(run_filtered(x32_call_unknown));
}

/* ---- real programs under the filter ------------------------------------ */

/* Run argv under the shipped filter with a fixed environment; collect
 * stdout+stderr.  Returns the wait status. */
static int run_program(const char *const argv[], char *out, size_t outsz)
{
	static const char *const envp[] = {
		"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "TMPDIR=/tmp", NULL,
	};
	int fd = program_fd();
	int p[2];
	if (fd < 0 || pipe2(p, O_CLOEXEC) < 0)
		return -1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int devnull = open("/dev/null", O_RDONLY);
		dup2(devnull, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		if (load_program(fd) < 0)
			_exit(126);
		execve(argv[0], (char *const *)argv, (char *const *)envp);
		_exit(127);
	}
	close(p[1]);
	/* Keep reading past a full buffer (dropping the rest) so the child
	 * never blocks on the pipe. */
	size_t len = 0;
	char sink[4096];
	ssize_t n;
	do {
		if (len < outsz - 1)
			n = read(p[0], out + len, outsz - 1 - len);
		else
			n = read(p[0], sink, sizeof(sink));
		if (n > 0 && len < outsz - 1)
			len += (size_t)n;
	} while (n > 0 || (n < 0 && errno == EINTR));
	out[len] = '\0';
	close(p[0]);
	int st = -1;
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return st;
}

static void expect_program(const char *const argv[], const char *want_out)
{
	if (access(argv[0], X_OK) != 0) {
		char reason[256];
		snprintf(reason, sizeof(reason), "%s is not installed", argv[0]);
		tap_skip(reason);
	}
	static char out[65536];
	int st = run_program(argv, out, sizeof(out));
	bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0 && strcmp(out, want_out) == 0;
	if (!ok) {
		printf("#   %s: status 0x%x, output:\n", argv[0], st);
		for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
			printf("#     %s\n", line);
	}
	CHECK(ok);
}

static void test_sh_runs(void)
{
	const char *const argv[] = { "/bin/sh", "-c", "echo ok", NULL };
	expect_program(argv, "ok\n");
}

static void test_shell_tools_run(void)
{
	const char *const argv[] = {
		"/bin/sh", "-c",
		"set -e; d=$(mktemp -d); cd \"$d\"; echo hi > a; cp -a a b; mv b c; ln -s c d; "
		"mkfifo f; ls -la >/dev/null; cat a | sort | uniq | wc -l >/dev/null; "
		"find . -type f | xargs grep -l hi >/dev/null; tar czf t.tgz a c && tar tzf t.tgz >/dev/null; "
		"sleep 0.01 & wait; x=$(date); id >/dev/null; uname -a >/dev/null; nproc >/dev/null; "
		"ps >/dev/null; df . >/dev/null; chmod 600 a; touch -d @0 a; sed -i s/hi/ho/ a; "
		"awk '{print $1}' a >/dev/null; timeout 5 true; env >/dev/null; cd /; rm -rf \"$d\"; echo done",
		NULL,
	};
	expect_program(argv, "done\n");
}

static void test_python_runs(void)
{
	const char *const argv[] = {
		"/usr/bin/python3", "-c",
		"import json,ssl,subprocess,threading,multiprocessing; print(1)", NULL,
	};
	expect_program(argv, "1\n");
}

static void test_python_workload_runs(void)
{
	const char *const argv[] = {
		"/usr/bin/python3", "-c",
		"import os, socket, subprocess, tempfile, shutil, sqlite3, threading, asyncio, ssl\n"
		"import multiprocessing as mp, concurrent.futures as cf\n"
		"def sq(x): return x * x\n"
		"if __name__ == '__main__':\n"
		"    t = threading.Thread(target=lambda: None); t.start(); t.join()\n"
		"    assert subprocess.run(['/bin/echo', 'x'], capture_output=True).stdout == b'x\\n'\n"
		"    with mp.Pool(2) as p: assert p.map(sq, range(4)) == [0, 1, 4, 9]\n"
		"    sp = mp.get_context('spawn').Process(target=os.getpid); sp.start(); sp.join(); assert sp.exitcode == 0\n"
		"    with cf.ThreadPoolExecutor(4) as ex: assert list(ex.map(sq, [2])) == [4]\n"
		"    from multiprocessing import shared_memory\n"
		"    s = shared_memory.SharedMemory(create=True, size=64); s.close(); s.unlink()\n"
		"    d = tempfile.mkdtemp(); open(d + '/a', 'w').write('x')\n"
		"    shutil.copytree(d, d + '2'); shutil.rmtree(d); shutil.rmtree(d + '2')\n"
		"    db = sqlite3.connect(d + '.db'); db.execute('create table t(x)'); db.commit(); db.close(); os.unlink(d + '.db')\n"
		"    srv = socket.create_server(('127.0.0.1', 0)); c = socket.create_connection(srv.getsockname())\n"
		"    a, _ = srv.accept(); c.sendall(b'hi'); assert a.recv(2) == b'hi'\n"
		"    socket.getaddrinfo('localhost', 80)\n"
		"    asyncio.run(asyncio.sleep(0.01))\n"
		"    ssl.create_default_context()\n"
		"    os.cpu_count(); os.sched_getaffinity(0); os.getloadavg()\n"
		"    print('done')\n",
		NULL,
	};
	expect_program(argv, "done\n");
}

static void test_python_data_science_runs(void)
{
	static const char *const probe[] = { "/usr/bin/python3", "-c", "import numpy, pandas, matplotlib", NULL };
	static char out[4096];
	int st = run_program(probe, out, sizeof(out));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		/* Tell "not installed" from "broken by the filter". */
		pid_t pid = fork();
		if (pid == 0) {
			int devnull = open("/dev/null", O_WRONLY);
			dup2(devnull, 1);
			dup2(devnull, 2);
			execv(probe[0], (char *const *)probe);
			_exit(127);
		}
		waitpid(pid, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			tap_skip("numpy, pandas or matplotlib is not installed for /usr/bin/python3");
	}
	const char *const argv[] = {
		"/usr/bin/python3", "-c",
		"import os, tempfile\n"
		"d = tempfile.mkdtemp(); os.environ['MPLCONFIGDIR'] = d\n"
		"import numpy as np, pandas as pd, matplotlib\n"
		"matplotlib.use('Agg')\n"
		"import matplotlib.pyplot as plt\n"
		"a = np.random.rand(200, 200); assert (a @ a).shape == (200, 200)\n"
		"pd.DataFrame({'x': range(5)}).to_csv(d + '/o.csv'); assert pd.read_csv(d + '/o.csv').shape == (5, 2)\n"
		"plt.plot([1, 2, 3]); plt.savefig(d + '/o.png'); assert os.path.getsize(d + '/o.png') > 0\n"
		"import shutil; shutil.rmtree(d)\n"
		"print('done')\n",
		NULL,
	};
	expect_program(argv, "done\n");
}

static void test_node_runs(void)
{
	const char *const argv[] = {
		"/usr/bin/node", "-e", "require('child_process').execSync('true'); console.log(1)", NULL,
	};
	expect_program(argv, "1\n");
}

static void test_node_workload_runs(void)
{
	const char *const argv[] = {
		"/usr/bin/node", "-e",
		"const cp = require('child_process'), fs = require('fs'), os = require('os');\n"
		"const http = require('http'), dns = require('dns'), path = require('path');\n"
		"const { Worker } = require('worker_threads');\n"
		"if (cp.spawnSync('/bin/echo', ['x']).stdout.toString() !== 'x\\n') throw new Error('spawn');\n"
		"const d = fs.mkdtempSync(path.join(os.tmpdir(), 'n'));\n"
		"fs.writeFileSync(d + '/a', 'x'); fs.copyFileSync(d + '/a', d + '/b');\n"
		"const w = fs.watch(d); w.close();\n"
		"os.cpus(); os.totalmem(); os.hostname(); os.userInfo(); os.networkInterfaces();\n"
		"let pending = 3; const done = () => { if (--pending === 0) { fs.rmSync(d, { recursive: true }); console.log('done'); } };\n"
		"const wk = new Worker('require(\"worker_threads\").parentPort.postMessage(1)', { eval: true });\n"
		"wk.on('message', () => { wk.terminate(); done(); });\n"
		"dns.lookup('localhost', (e) => { if (e && e.code !== 'ENOTFOUND') throw e; done(); });\n"
		"const srv = http.createServer((q, r) => r.end('hi')).listen(0, '127.0.0.1', () => {\n"
		"  http.get({ host: '127.0.0.1', port: srv.address().port }, (r) => {\n"
		"    let b = ''; r.on('data', (c) => b += c); r.on('end', () => { if (b !== 'hi') throw new Error(b); srv.close(); done(); });\n"
		"  });\n"
		"});\n",
		NULL,
	};
	expect_program(argv, "done\n");
}

static void test_gcc_and_git_run(void)
{
	if (access("/usr/bin/gcc", X_OK) != 0 || access("/usr/bin/git", X_OK) != 0)
		tap_skip("gcc or git is not installed");
	const char *const argv[] = {
		"/bin/sh", "-c",
		"set -e; d=$(mktemp -d); cd \"$d\"; "
		"printf '#include <pthread.h>\\n#include <stdio.h>\\n"
		"static void *f(void *a) { return a; }\\n"
		"int main(void) { pthread_t t; pthread_create(&t, 0, f, 0); pthread_join(t, 0); puts(\"hello\"); return 0; }\\n' > h.c; "
		"gcc -O2 -pthread -o h h.c; ./h; "
		"git init -q r; cd r; echo a > a; git add a; "
		"git -c user.name=t -c user.email=t@t commit -qm m; git log --oneline | wc -l; "
		"git status --short; git gc -q; cd /; rm -rf \"$d\"",
		NULL,
	};
	expect_program(argv, "hello\n1\n");
}

/* The on-disk cache holds exactly the compiled program; a damaged cache
 * entry is ignored and replaced (each step in its own process, because the
 * program fd is cached per process). */
static int program_in_child(const char *dir, void *out, size_t cap, ssize_t *len)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		sandlot_error_t *err = NULL;
		int fd = sandlot__seccomp_program_fd(dir, &err);
		char buf[65536];
		ssize_t n = fd < 0 ? -1 : pread(fd, buf, sizeof(buf), 0);
		if (n > 0 && write(p[1], buf, (size_t)n) != n)
			_exit(1);
		_exit(n > 0 ? 0 : 1);
	}
	close(p[1]);
	*len = 0;
	ssize_t n;
	while ((n = read(p[0], (char *)out + *len, cap - (size_t)*len)) > 0)
		*len += n;
	close(p[0]);
	int st;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

static void test_program_cache(void)
{
	char dir[] = "/tmp/sandlot-seccomp-cache-XXXXXX";
	CHECK(mkdtemp(dir) != NULL);
	static char fresh[65536], cached[65536], again[65536];
	ssize_t nf, nc, na;
	CHECK(program_in_child(NULL, fresh, sizeof(fresh), &nf) == 0);
	CHECK(program_in_child(dir, cached, sizeof(cached), &nc) == 0); /* builds, stores */
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "test $(ls %s/seccomp-*.bpf | wc -l) = 1", dir);
	CHECK(system(cmd) == 0);
	CHECK(program_in_child(dir, again, sizeof(again), &na) == 0); /* loads */
	CHECK(nf > 0 && nf == nc && nc == na);
	CHECK(memcmp(fresh, cached, (size_t)nf) == 0 && memcmp(fresh, again, (size_t)nf) == 0);
	/* Damage the cache: an odd size is not a program. */
	snprintf(cmd, sizeof(cmd), "for f in %s/seccomp-*.bpf; do printf abc > $f; done", dir);
	CHECK(system(cmd) == 0);
	CHECK(program_in_child(dir, again, sizeof(again), &na) == 0);
	CHECK(na == nf && memcmp(fresh, again, (size_t)nf) == 0);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK(system(cmd) == 0);
}

/* The hash the cache's name starts from, made when the policy text was
 * generated, is that text's FNV-1a 64. */
static void test_policy_hash_is_the_texts(void)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (const char *p = sandlot__seccomp_policy_text; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
	CHECK(h == sandlot__seccomp_policy_fnv);
}

int main(void)
{
	tap_timeout_s = 60; /* the program cases start real interpreters */
	TAP_RUN(test_shipped_policy_compiles);
	TAP_RUN(test_program_fd_is_sealed);
	TAP_RUN(test_program_fd_thread_safe);
	TAP_RUN(test_program_cache);
	TAP_RUN(test_policy_hash_is_the_texts);
	TAP_RUN(test_bad_policies_are_refused);
	TAP_RUN(test_good_policy_syntax);
	TAP_RUN(test_compiled_semantics);
	TAP_RUN(test_filter_allows_normal_calls);
	TAP_RUN(test_filter_refuses_dangerous_calls);
	TAP_RUN(test_i386_syscall_is_killed);
	TAP_RUN(test_x32_syscall_is_killed);
	TAP_RUN(test_sh_runs);
	TAP_RUN(test_shell_tools_run);
	TAP_RUN(test_python_runs);
	TAP_RUN(test_python_workload_runs);
	TAP_RUN(test_python_data_science_runs);
	TAP_RUN(test_node_runs);
	TAP_RUN(test_node_workload_runs);
	TAP_RUN(test_gcc_and_git_run);
	return tap_done();
}
