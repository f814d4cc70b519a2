#!/bin/sh
# The guest side of the vm backend (docs/vm.md): the kernel and initramfs a
# sandbox's microVM boots.
#
#   scripts/vm-build.sh OUTDIR SANDLOT_INIT     write OUTDIR/vmlinux and OUTDIR/initramfs.cpio
#   scripts/vm-build.sh --kernel                print the kernel release used, or nothing
#
# The kernel is Debian's cloud kernel (linux-image-cloud-amd64, installed by
# `make deps`): the newest /boot/vmlinuz-*-cloud-amd64 whose modules are in
# /lib/modules, or the release in $SANDLOT_VM_KERNEL.
#
# - vmlinux: the uncompressed ELF kernel, taken out of the LZ4 bzImage.
#   QEMU boots it through its PVH entry point, which skips the bzImage's
#   own decompression (about 0.2 s of boot under TCG, measured).
# - initramfs.cpio: an uncompressed newc archive holding sandlot-init as
#   /init and, in /modules, the modules the guest needs, in the order they
#   are loaded (dependencies first; the file names sort in that order):
#   that kernel builds virtio, virtio-mmio, virtio-blk, virtio-console,
#   virtio-rng and erofs as modules.  ext4 is built in.  Nothing else is in
#   it: init mounts devtmpfs, proc and sysfs itself (src/init/vm.c).
set -eu

# What the guest needs; their dependencies are added (modinfo), soft
# dependencies are not (libcrc32c's crc32c-intel: crc32c is built in).
MODULES="virtio_mmio virtio_blk virtio_console virtio_rng erofs"

find_kernel() {
	if [ -n "${SANDLOT_VM_KERNEL:-}" ]; then
		echo "$SANDLOT_VM_KERNEL"
		return
	fi
	for v in $(ls /boot 2>/dev/null | sed -n 's/^vmlinuz-\(.*-cloud-amd64\)$/\1/p' | sort -V -r); do
		if [ -f "/lib/modules/$v/modules.dep" ]; then
			echo "$v"
			return
		fi
	done
}

if [ "${1:-}" = "--kernel" ]; then
	find_kernel
	exit 0
fi
if [ $# -ne 2 ]; then
	echo "usage: $0 OUTDIR SANDLOT_INIT | --kernel" >&2
	exit 2
fi
out=$1
init=$2
kver=$(find_kernel)
if [ -z "$kver" ]; then
	echo "vm-build: no Debian cloud kernel in /boot (apt-get install linux-image-cloud-amd64)" >&2
	exit 1
fi
vmlinuz=/boot/vmlinuz-$kver
moddir=/lib/modules/$kver
for tool in lz4 cpio modinfo readelf; do
	command -v "$tool" >/dev/null || {
		echo "vm-build: $tool is missing (make deps installs it)" >&2
		exit 1
	}
done
[ -x "$init" ] || { echo "vm-build: $init is not an executable sandlot-init" >&2; exit 1; }

mkdir -p "$out"
tmp=$(mktemp -d "$out/.vm-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# --- vmlinux: the LZ4 stream starts at the legacy LZ4 frame's magic -------
# (02 21 4c 18); lz4 decompresses it and stops at the bzImage's trailer.
off=$(grep -abo -m1 -P '\x02\x21\x4c\x18' "$vmlinuz" | head -n1 | cut -d: -f1)
if [ -z "$off" ]; then
	echo "vm-build: $vmlinuz holds no LZ4 stream (not Debian's cloud kernel?)" >&2
	exit 1
fi
tail -c "+$((off + 1))" "$vmlinuz" | lz4 -dc >"$tmp/vmlinux" 2>"$tmp/lz4.err" || true
if ! readelf -h "$tmp/vmlinux" >/dev/null 2>&1; then
	echo "vm-build: could not extract an ELF kernel from $vmlinuz:" >&2
	cat "$tmp/lz4.err" >&2
	exit 1
fi
# PVH boot needs the Xen ELF note with the PVH entry point (note type 18).
if ! readelf -n "$tmp/vmlinux" | grep -q 'Unknown note type: (0x00000012)'; then
	echo "vm-build: $vmlinuz has no PVH entry point (CONFIG_PVH)" >&2
	exit 1
fi

# --- the modules, dependencies first ---------------------------------------
order=""
add_module() {
	case " $order " in *" $1 "*) return ;; esac
	deps=$(modinfo -k "$kver" -F depends "$1") || {
		echo "vm-build: module $1 is not in $moddir" >&2
		exit 1
	}
	for d in $(echo "$deps" | tr ',' ' '); do
		add_module "$d"
	done
	order="$order $1"
}
for m in $MODULES; do
	add_module "$m"
done

root=$tmp/root
mkdir -p "$root/modules"
cp "$init" "$root/init"
chmod 0755 "$root/init"
n=10
for m in $order; do
	f=$(modinfo -k "$kver" -F filename "$m")
	case "$f" in
	*.ko) cp "$f" "$root/modules/$n-$m.ko" ;;
	*) echo "vm-build: $f: only uncompressed modules are supported" >&2; exit 1 ;;
	esac
	n=$((n + 1))
done
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --reproducible -R 0:0 --quiet) >"$tmp/initramfs.cpio"

mv -f "$tmp/vmlinux" "$out/vmlinux"
mv -f "$tmp/initramfs.cpio" "$out/initramfs.cpio"
echo "$kver" >"$out/kernel-release"
