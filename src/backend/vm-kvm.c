/* Can this host run a vm sandbox under KVM?  (vm.h)
 *
 * Opening /dev/kvm is not enough.  On hosts that are themselves VMs
 * without nested virtualization, /dev/kvm may be kvm_pvm (pagetable-based
 * virtual machines): it creates VMs and runs simple real-mode code, but
 * only PVM-aware guest kernels boot on it; Debian's stock kernel dies
 * early (an MSR assertion, then an emulation failure).  So KVM counts as
 * usable when hardware virtualization backs it (kvm_intel or kvm_amd is
 * loaded) and a VM made through it runs a few instructions to an I/O exit
 * with the value they wrote; anything else means TCG.
 */
#include "backend/vm.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/cleanup.h"

/* mov $42, %al; out %al, $0x10; hlt — at guest address 0x1000, real mode. */
static const unsigned char probe_code[] = { 0xb0, 0x2a, 0xe6, 0x10, 0xf4 };

static int run_probe_vm(int kvm, char *why, size_t n)
{
	cleanup_close int vm = ioctl(kvm, KVM_CREATE_VM, 0);
	if (vm < 0)
		return snprintf(why, n, "KVM_CREATE_VM failed: %s", strerror(errno)), 0;
	unsigned char *mem = mmap(NULL, 0x1000, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
				  -1, 0);
	if (mem == MAP_FAILED)
		return snprintf(why, n, "mmap: %s", strerror(errno)), 0;
	int ok = 0;
	struct kvm_run *run = MAP_FAILED;
	int run_size = -1;
	memcpy(mem, probe_code, sizeof(probe_code));
	struct kvm_userspace_memory_region r = {
		.slot = 0, .guest_phys_addr = 0x1000, .memory_size = 0x1000,
		.userspace_addr = (unsigned long)mem,
	};
	cleanup_close int cpu = -1;
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &r) < 0) {
		snprintf(why, n, "KVM_SET_USER_MEMORY_REGION failed: %s", strerror(errno));
		goto out;
	}
	if ((cpu = ioctl(vm, KVM_CREATE_VCPU, 0)) < 0) {
		snprintf(why, n, "KVM_CREATE_VCPU failed: %s", strerror(errno));
		goto out;
	}
	run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
	if (run_size < (int)sizeof(struct kvm_run) ||
	    (run = mmap(NULL, (size_t)run_size, PROT_READ | PROT_WRITE, MAP_SHARED, cpu, 0)) ==
		    MAP_FAILED) {
		snprintf(why, n, "cannot map the vCPU's run area");
		goto out;
	}
	struct kvm_sregs s;
	struct kvm_regs g = { .rip = 0x1000, .rflags = 2 };
	if (ioctl(cpu, KVM_GET_SREGS, &s) < 0)
		goto regs;
	s.cs.base = 0;
	s.cs.selector = 0;
	if (ioctl(cpu, KVM_SET_SREGS, &s) < 0 || ioctl(cpu, KVM_SET_REGS, &g) < 0)
		goto regs;
	if (ioctl(cpu, KVM_RUN, 0) < 0) {
		snprintf(why, n, "KVM_RUN failed: %s", strerror(errno));
		goto out;
	}
	if (run->exit_reason != KVM_EXIT_IO || run->io.port != 0x10 ||
	    ((unsigned char *)run)[run->io.data_offset] != 42) {
		snprintf(why, n, "a test VM did not run its code (exit reason %u)",
			 run->exit_reason);
		goto out;
	}
	ok = 1;
	goto out;
regs:
	snprintf(why, n, "cannot set the vCPU's registers: %s", strerror(errno));
out:
	if (run != MAP_FAILED)
		munmap(run, (size_t)run_size);
	munmap(mem, 0x1000);
	return ok;
}

int sandlot__kvm_probe(char *why, size_t n)
{
	cleanup_close int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (kvm < 0)
		return snprintf(why, n, "/dev/kvm: %s", strerror(errno)), 0;
	int api = ioctl(kvm, KVM_GET_API_VERSION, 0);
	if (api != KVM_API_VERSION)
		return snprintf(why, n, "/dev/kvm speaks KVM API %d, not %d", api, KVM_API_VERSION), 0;
	int hw = access("/sys/module/kvm_intel", F_OK) == 0 || access("/sys/module/kvm_amd", F_OK) == 0;
	if (!hw) {
		if (access("/sys/module/kvm_pvm", F_OK) == 0)
			return snprintf(why, n, "/dev/kvm is kvm_pvm, which boots only PVM guest "
				       "kernels"), 0;
		return snprintf(why, n, "no hardware virtualization module (kvm_intel, kvm_amd) "
			       "backs /dev/kvm"), 0;
	}
	if (!run_probe_vm(kvm, why, n))
		return 0;
	snprintf(why, n, "/dev/kvm runs guests");
	return 1;
}

static pthread_once_t accel_once = PTHREAD_ONCE_INIT;
static const char *accel;
static int accel_ok;
static char accel_why[200];

static void accel_decide(void)
{
	const char *want = getenv("SANDLOT_VM_ACCEL");
	if (want && strcmp(want, "tcg") == 0) {
		accel = "tcg";
		accel_ok = 1;
		snprintf(accel_why, sizeof(accel_why), "SANDLOT_VM_ACCEL=tcg");
		return;
	}
	int ok = sandlot__kvm_probe(accel_why, sizeof(accel_why));
	accel_ok = ok;
	accel = ok || (want && strcmp(want, "kvm") == 0) ? "kvm" : "tcg";
}

const char *sandlot__vm_accel(const char **why)
{
	pthread_once(&accel_once, accel_decide);
	if (why)
		*why = accel_why;
	return accel;
}

int sandlot__vm_accel_usable(void)
{
	pthread_once(&accel_once, accel_decide);
	return accel_ok || strcmp(accel, "tcg") == 0;
}
