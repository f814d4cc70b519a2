#!/bin/sh
# The guest side of the vm backend (docs/vm.md): the kernel and initramfs a
# sandbox's microVM boots.
#
#   scripts/vm-build.sh OUTDIR SANDLOT_INIT     write OUTDIR/vmlinux, OUTDIR/initramfs.cpio
#                                               and OUTDIR/kernel-release
#   scripts/vm-build.sh --install OUTDIR DIR    meson's install step: copy them to
#                                               $MESON_INSTALL_DESTDIR_PREFIX/DIR if built
#
# The kernel is Debian's cloud kernel, taken from its package WITHOUT
# installing it (installing a kernel would put it in the host's /boot and
# bootloader): the versioned package linux-image-cloud-amd64 depends on
# (apt's candidate) is fetched with `apt-get download` and unpacked with
# `dpkg-deb -x` into OUTDIR/kernel/, a cache reused while that package
# version stays apt's candidate.  Where it cannot be fetched (offline, no
# apt), a cloud kernel installed on the host is used instead (the newest
# /boot/vmlinuz-*-cloud-amd64 whose modules are in /lib/modules); with
# neither, nothing is built and the script says so, successfully: vm
# sandboxes then fail saying what is missing.
#
#   SANDLOT_VM_KERNEL=RELEASE   use that installed kernel (/boot, /lib/modules)
#   SANDLOT_VM_INSTALLED=no     never use an installed kernel
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
PATH=$PATH:/usr/sbin:/sbin

# What the guest needs; their dependencies are added (modinfo), soft
# dependencies are not (libcrc32c's crc32c-intel: crc32c is built in).
MODULES="virtio_mmio virtio_blk virtio_console virtio_rng erofs virtio_net"
META=linux-image-cloud-amd64

if [ "${1:-}" = --install ] && [ $# -eq 3 ]; then
	if [ ! -f "$2/vmlinux" ] || [ ! -f "$2/initramfs.cpio" ]; then
		echo "vm-build: $2 was not built: not installing the vm guest (vm sandboxes will say it is missing)" >&2
		exit 0
	fi
	dest=${MESON_INSTALL_DESTDIR_PREFIX:?run by meson install}/$3
	mkdir -p "$dest"
	for f in vmlinux initramfs.cpio kernel-release; do
		install -m 0644 "$2/$f" "$dest/$f"
		echo "Installing $2/$f to $dest"
	done
	exit 0
fi
if [ $# -ne 2 ]; then
	echo "usage: $0 OUTDIR SANDLOT_INIT | --install OUTDIR DIR" >&2
	exit 2
fi
out=$1
init=$2
cache=$out/kernel
mkdir -p "$out"

# Set by the finders: the kernel's release, the directory whose boot/ and
# lib/modules/ hold it ("" = /), and what it is, for messages.
kver=""
base=""
origin=""
why=""      # why the package could not be used

# An installed cloud kernel: $SANDLOT_VM_KERNEL, or the newest in /boot.
find_installed() {
	[ "${SANDLOT_VM_INSTALLED:-}" = no ] && return 1
	if [ -n "${SANDLOT_VM_KERNEL:-}" ]; then
		kver=$SANDLOT_VM_KERNEL
	else
		for v in $(ls /boot 2>/dev/null | sed -n 's/^vmlinuz-\(.*-cloud-amd64\)$/\1/p' | sort -V -r); do
			if [ -f "/lib/modules/$v/modules.dep" ]; then
				kver=$v
				break
			fi
		done
	fi
	[ -n "$kver" ] || return 1
	base=""
	origin="the installed kernel /boot/vmlinuz-$kver"
}

# The cache's kernel (OUTDIR/kernel/{package,root/}), if unpacked whole.
cached() {
	[ -f "$cache/package" ] && [ -f "$cache/release" ] || return 1
	kver=$(cat "$cache/release")
	base=$cache/root
	origin="$(cat "$cache/package") (unpacked in $cache, not installed)"
}

# Fetch and unpack apt's candidate of the versioned cloud kernel package
# into the cache, unless the cache already holds it.
fetch_package() {
	if ! command -v apt-cache >/dev/null || ! command -v dpkg-deb >/dev/null; then
		why="apt-get and dpkg-deb are not available (not Debian?)"
		return 1
	fi
	pkg=$(apt-cache show --no-all-versions "$META" 2>/dev/null |
	      sed -n 's/^Depends:.*\(linux-image-[0-9][^ ,]*-cloud-amd64\).*/\1/p' | head -n1)
	if [ -z "$pkg" ]; then
		why="apt knows no package $META (run apt-get update)"
		return 1
	fi
	ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | head -n1)
	if [ -z "$ver" ]; then
		why="apt knows no package $pkg (run apt-get update)"
		return 1
	fi
	if [ "$(cat "$cache/package" 2>/dev/null)" = "$pkg $ver" ] && cached; then
		return 0
	fi
	# Into a new directory first: the old cache stays usable if this fails.
	new=$out/.kernel-new
	rm -rf "$new"
	mkdir -p "$new/download" "$new/root"
	# apt-get download writes into the current directory; as root it warns
	# that its _apt user cannot write there (harmless): shown on failure only.
	if ! (cd "$new/download" && apt-get download -q -o Acquire::http::Timeout=30 "$pkg=$ver") >"$new/download.log" 2>&1; then
		why="apt-get download $pkg=$ver failed (offline? apt-get update?): $(grep -m1 '^E:' "$new/download.log" || tail -n1 "$new/download.log")"
		rm -rf "$new"
		return 1
	fi
	deb=$(ls "$new"/download/*.deb)
	if ! dpkg-deb -x "$deb" "$new/root"; then
		why="dpkg-deb -x $(basename "$deb") failed"
		rm -rf "$new"
		return 1
	fi
	kv=$(ls "$new/root/lib/modules" 2>/dev/null | head -n1)
	if [ -z "$kv" ] || [ ! -f "$new/root/boot/vmlinuz-$kv" ]; then
		why="$(basename "$deb") holds no boot/vmlinuz-* with its lib/modules/"
		rm -rf "$new"
		return 1
	fi
	# The package's postinst would run depmod; modinfo needs its modules.dep.
	if ! depmod -b "$new/root" "$kv"; then
		why="depmod -b $new/root $kv failed"
		rm -rf "$new"
		return 1
	fi
	rm -rf "$new/download" "$new/download.log"
	echo "$kv" >"$new/release"
	echo "$pkg $ver" >"$new/package"
	rm -rf "$cache"
	mv "$new" "$cache"
	cached
}

for tool in lz4 cpio modinfo depmod readelf; do
	command -v "$tool" >/dev/null || {
		echo "vm-build: $tool is missing (make deps installs it)" >&2
		exit 1
	}
done
[ -x "$init" ] || { echo "vm-build: $init is not an executable sandlot-init" >&2; exit 1; }

if [ -n "${SANDLOT_VM_KERNEL:-}" ]; then
	find_installed
elif fetch_package; then
	:
elif cached || find_installed; then
	echo "vm-build: $why; using $origin" >&2
else
	rm -f "$out/vmlinux" "$out/initramfs.cpio" "$out/kernel-release"
	echo "vm-build: the vm guest ($out) is not built: $why." >&2
	echo "vm-build: vm sandboxes need it; when apt can download $META's kernel, run: make vm" >&2
	exit 0
fi
vmlinuz=$base/boot/vmlinuz-$kver
moddir=$base/lib/modules/$kver
[ -f "$vmlinuz" ] || { echo "vm-build: $vmlinuz is missing" >&2; exit 1; }

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
	deps=$(modinfo -b "${base:-/}" -k "$kver" -F depends "$1") || {
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
	f=$(modinfo -b "${base:-/}" -k "$kver" -F filename "$m")
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
