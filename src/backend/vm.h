/* Internals of the `vm` backend (vm.c, vm-kvm.c): a QEMU microvm per
 * sandbox, sandlot-init its PID 1, QEMU itself jailed.  docs/vm.md says
 * what a user sees; this header what the parts tell each other. */
#ifndef SANDLOT_BACKEND_VM_H
#define SANDLOT_BACKEND_VM_H

#include <stddef.h>
#include <sys/types.h>

#include "common/error.h"

/* The accelerator vm sandboxes of this process use: "kvm" when /dev/kvm
 * is real hardware virtualization that can run a stock kernel, else "tcg"
 * (QEMU's emulator).  Probed once per process (a tiny KVM_CREATE_VM and
 * KVM_RUN, and which KVM module backs /dev/kvm); $SANDLOT_VM_ACCEL=tcg
 * forces TCG, =kvm insists on KVM (a probe that fails then makes every vm
 * create fail with its reason).  Never fails; why (may be NULL) gets the
 * probe's finding in a sentence. */
const char *sandlot__vm_accel(const char **why);

/* 0 when KVM was insisted on ($SANDLOT_VM_ACCEL=kvm) but does not work
 * (sandlot__vm_accel()'s why says why), else 1. */
int sandlot__vm_accel_usable(void);

/* What the console log of a guest that failed to boot says, for an error
 * message: the last few lines sandlot-init or a kernel panic wrote, then
 * the last four lines, without the kernel's timestamps, joined by " | ",
 * printable ASCII only, in out[0..n) (NUL-terminated; "(empty)" when there
 * is nothing).  buf[0..len) is the log's tail (untrusted bytes: any);
 * cut says that its first line is the end of a longer one (dropped). */
void sandlot__vm_console_summary(const char *buf, size_t len, int cut, char *out, size_t n);

/* QEMU's CPU time so far (user + system, all its threads) in ms, from
 * /proc/PID/stat; -1 when it cannot be read (the process is gone). */
long long sandlot__vm_cpu_ms(pid_t pid);

struct sandlot;
/* vm-boot.c: after ready_timeout_ms (waited_ms) without init ready, wait
 * on while QEMU (pid qemu) has had less than a few boots' worth of CPU
 * time and the boot has taken less than a hard limit.  0 once the
 * connection has settled (ready, refused, closed: the caller looks at
 * which), -1 when the boot is given up on; *cpu_ms gets QEMU's CPU time
 * (-1: unknown) either way. */
int sandlot__vm_boot_wait(struct sandlot *sb, pid_t qemu, unsigned waited_ms, long long *cpu_ms);

/* Whether the probe found KVM usable (for tests of the probe itself):
 * 1 yes, 0 no with the reason in why[0..n). */
int sandlot__kvm_probe(char *why, size_t n);

#endif
