/* How long a vm sandbox's boot may take: measured in QEMU's CPU time, not
 * only on the wall clock.
 *
 * Under TCG a boot to init's HELLO costs QEMU about 2.5 s of CPU (a 2-CPU
 * machine, Debian's cloud kernel).  How long that takes on the wall clock
 * depends on how much of a CPU QEMU gets: on a quiet machine 3 s, on the
 * same machine at a load of 20 (other builds and tests) 11 to 44 s, and
 * in a sandbox limited to 0.1 CPU (its cgroup covers QEMU) 25 s at best.
 * The backend's first wait (ready_timeout_ms, 45 s) was once missed on a
 * loaded machine with an empty console: a guest short of CPU, not a stuck
 * one (QEMU had used 2 to 3 s of CPU by then, as in a quick boot).  So
 * after that wait the boot goes on for as long as QEMU is still short of
 * VM_BOOT_CPU_MS of CPU time, up to VM_BOOT_MAX_MS in all: a guest that
 * spins fails once it has had ten boots' worth of CPU, one that waits
 * forever at the hard limit, and both errors say how much CPU QEMU had. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/vm.h"
#include "common/cleanup.h"
#include "core/internal.h"
#include "core/private.h"

/* Ten quick boots' worth of QEMU's CPU time, and the hard limit. */
#define VM_BOOT_CPU_MS 30000
#define VM_BOOT_MAX_MS 300000
/* How often the CPU time is looked at again while waiting. */
#define VM_BOOT_STEP_MS 2000

long long sandlot__vm_cpu_ms(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	cleanup_close int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* "pid (comm) state ppid ...": comm may hold anything but the last
	 * ')' ends it; utime and stime are the 14th and 15th fields, the
	 * 12th and 13th after it. */
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	p++;
	unsigned long long utime = 0, stime = 0;
	for (int field = 3; field <= 15; field++) {
		while (*p == ' ')
			p++;
		if (!*p)
			return -1;
		if (field == 14)
			utime = strtoull(p, NULL, 10);
		else if (field == 15)
			stime = strtoull(p, NULL, 10);
		while (*p && *p != ' ')
			p++;
	}
	long hz = sysconf(_SC_CLK_TCK);
	if (hz <= 0)
		hz = 100;
	return (long long)((utime + stime) * 1000ull / (unsigned long long)hz);
}

static int conn_settled(struct sandlot *sb)
{
	pthread_mutex_lock(&sb->conn.lock);
	int done = sb->conn.dead || sb->conn.hello < 0 || sb->conn.configured < 0 ||
		   (sb->conn.hello == 1 && sb->conn.configured != 0);
	pthread_mutex_unlock(&sb->conn.lock);
	return done;
}

int sandlot__vm_boot_wait(struct sandlot *sb, pid_t qemu, unsigned waited_ms, long long *cpu_ms)
{
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		*cpu_ms = sandlot__vm_cpu_ms(qemu);
		if (conn_settled(sb))
			return 0;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long long waited = (long long)waited_ms + (now.tv_sec - t0.tv_sec) * 1000 +
				   (now.tv_nsec - t0.tv_nsec) / 1000000;
		if (*cpu_ms < 0 || *cpu_ms >= VM_BOOT_CPU_MS || waited >= VM_BOOT_MAX_MS)
			return -1;
		long long step = VM_BOOT_MAX_MS - waited;
		if (step > VM_BOOT_STEP_MS)
			step = VM_BOOT_STEP_MS;
		/* Its error (a timeout, most often) is not the answer: the
		 * state of the connection, looked at above, is. */
		sandlot__conn_wait_ready(&sb->conn, (uint64_t)step, NULL);
	}
}
