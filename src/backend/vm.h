/* Internals of the `vm` backend (vm.c, vm-kvm.c): a QEMU microvm per
 * sandbox, sandlot-init its PID 1, QEMU itself jailed.  docs/vm.md says
 * what a user sees; this header what the parts tell each other. */
#ifndef SANDLOT_BACKEND_VM_H
#define SANDLOT_BACKEND_VM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandlot.h"

#include "common/error.h"

struct sandlot;
struct sandlot_init_config;

/* The size of a vm sandbox's workspace disk file for a workspace of
 * `disk` bytes: larger by what ext4's own metadata takes (inode tables,
 * bitmaps, extent blocks: 3 of 32 MiB, 19 of 1024 MiB), so that the disk
 * holds at least `disk` bytes of files, as an ns sandbox's quota does. */
static inline uint64_t sandlot__vm_disk_file_bytes(uint64_t disk)
{
	return disk + disk / 16 + (4ull << 20);
}

/* The workspace size whose disk file is `file` bytes long: 0, or -1 when
 * no size makes a file of that length (not a disk this backend made). */
static inline int sandlot__vm_disk_bytes_of_file(uint64_t file, uint64_t *disk)
{
	if (file < (4ull << 20))
		return -1;
	uint64_t guess = (file - (4ull << 20)) / 17 * 16;
	for (uint64_t d = guess > 32 ? guess - 32 : 0; d <= guess + 32; d++)
		if (sandlot__vm_disk_file_bytes(d) == file) {
			*disk = d;
			return 0;
		}
	return -1;
}

/* Remove directory `dir` and the files in it (a sandbox's <data_dir>/vm/<id>,
 * a kept workspace's directory: neither has subdirectories). */
void sandlot__vm_remove_dir(const char *dir);

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

/* The vm backend's start (vm.c) for a template's VM (vm-template.c): as a
 * start, booted (never restored), its run state left out of what it saves.
 * Then sandlot__vm_take_monitor() hands over the host's end of its QMP
 * monitor (the caller closes it; -1 when there is none). */
int sandlot__vm_launch_template(struct sandlot *sb, sandlot_error_t **err);
int sandlot__vm_take_monitor(struct sandlot *sb);

/* ---- templates (vm-template.c): a booted guest saved where its init
 * waits for CONFIG, restored by cold creates of the same machine ---- */

#define SANDLOT_VM_TEMPLATE_KEY_MAX 4096

/* What a template must match, as text: the identity (device, inode, size,
 * mtime) of the guest kernel, the initramfs (sandlot-init is in it), the
 * root image and QEMU's program, and the machine (memory, vCPUs, the
 * workspace disk's size, the accelerator).  0, or -1 (errno) when a file
 * cannot be looked at. */
int sandlot__vm_template_key(const char *vmlinux, const char *initrd, const char *root,
			     uint64_t memory, unsigned cpus, uint64_t disk, int kvm, char *out,
			     size_t n);

/* The key of the machine sandbox sb would get (its files found as its
 * start finds them).  0, or -1 with err. */
int sandlot__vm_machine_key(const struct sandlot *sb, char *key, size_t n, sandlot_error_t **err);

/* The saved state of the template of `key` under vm_root (<data_dir>/vm),
 * opened for reading, or -1 when there is none that matches. */
int sandlot__vm_template_open(const char *vm_root, const char *key);

/* Remove the template of `key` (one that failed to restore). */
void sandlot__vm_template_drop(const char *vm_root, const char *key);

/* sandlot_prepare() for vm sandboxes: a background thread makes the
 * template for the likely options if there is none (count 0: wait for one
 * under way and stop).  The backend's prepare op. */
int sandlot__vm_prepare(const sandlot_options_t *likely, unsigned count, sandlot_error_t **err);

/* Make the template for sandboxes with these (effective) options now,
 * unless a matching one exists: 0 (made or there), or -1 with err. */
int sandlot__vm_template_make(const sandlot_options_t *opts, sandlot_error_t **err);

/* ---- the network (vm-net.c) ---- */

/* A vm sandbox's network namespace, which QEMU's jail joins: the host's,
 * made as an ns sandbox's (linux/netns.h), so that core's egress set-up
 * (core/network.c) applies to it unchanged. */
struct sandlot_vm_net {
	int ns_fd;                  /* -1: none */
};
void sandlot__vm_net_init(struct sandlot_vm_net *n);
/* Make the namespace (loopback up).  0, or -1 with err and n untouched. */
int sandlot__vm_net_create(struct sandlot_vm_net *n, sandlot_error_t **err);
/* Close it (the namespace goes once QEMU, its last user, is gone). */
void sandlot__vm_net_release(struct sandlot_vm_net *n);
/* CONFIG's network records for the guest's init: its address, gateway,
 * resolver and relay port. */
void sandlot__vm_net_config(struct sandlot_init_config *ic);
/* QEMU's -netdev value (the device is virtio-net-device,netdev=net). */
void sandlot__vm_net_netdev(char *out, size_t n);
/* sandlot_port_connect() for a vm sandbox: through the forward into the
 * guest's relay, to `port` on the guest's loopback.  The connected socket
 * (blocking), or -1 with err (ECONNREFUSED: nothing listens there;
 * ETIMEDOUT). */
int sandlot__vm_net_port_connect(const struct sandlot_vm_net *n, uint16_t port,
				 unsigned timeout_ms, sandlot_error_t **err);

#endif
