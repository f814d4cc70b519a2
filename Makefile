# Front door.  `make` builds everything into build/bin; `make demo` and
# `make check` also install what they need with apt-get on Debian.
MESON ?= meson
BUILD ?= build
ASAN_BUILD ?= build-asan
PYTEST ?= /usr/bin/python3 -m pytest

# nettle-dev: SHA-256 of image trees; debootstrap: sandlot image build; musl-tools:
# the C library of the static sandlot-init and sandlot (faster to start, src/init/meson.build,
# src/cli/meson.build);
# libhttp-parser-dev: the answers of servers behind the port proxy;
# libnftables-dev, libc-ares-dev: the egress engine (docs/network.md)
# btrfs-progs: mkfs.btrfs for the storage pool; e2fsprogs: workspaces of the former layout (tests)
# lz4, cpio, kmod: the vm backend's guest kernel and initramfs (scripts/vm-build.sh, which
# takes the kernel out of Debian's linux-image-cloud-amd64 package with apt-get download +
# dpkg-deb -x into build/vm/kernel: never installed); erofs-utils: built images as erofs
# files (the vm backend's roots)
BUILD_DEPS = meson ninja-build pkg-config gcc libc6-dev musl-tools libseccomp-dev libjansson-dev libmicrohttpd-dev libsqlite3-dev libarchive-dev libcurl4-openssl-dev libhttp-parser-dev e2fsprogs btrfs-progs nettle-dev debootstrap libnftables-dev libc-ares-dev lz4 cpio kmod erofs-utils
# matplotlib, pandas, numpy: the interpreter and seccomp tests run real data-science code;
# python3-venv: the frameworks' venv (scripts/python-frameworks.sh); python-is-python3:
# `python` in sandboxes on the host image (Deep Agents' standard tests run it);
# dnsmasq-base, openssl, socat, curl, nftables: the fake internet of the network tests
# clang, libclang-rt-14-dev: libFuzzer targets (scripts/fuzz.sh)
# qemu-system-x86, busybox-static: the vm guest's tests boot it under QEMU on a busybox root
# haproxy: the fleet's proxy (deploy/haproxy), run by tests/fleet and checked with haproxy -c
TEST_DEPS = haproxy python3-pytest python3-venv python-is-python3 bubblewrap iproute2 valgrind python3-matplotlib python3-pandas python3-numpy dnsmasq-base openssl socat curl nftables clang libclang-rt-14-dev qemu-system-x86 busybox-static

.PHONY: all vm deps test-deps demo check check-vm unit asan tsan fuzz integration fleet-check fleet-manifests-check mcp-check ts-check e2b-check e2b-js-check e2b-py-check image-minimal image-python-data clean

all: $(BUILD)/build.ninja
	ninja -C $(BUILD)
	@mkdir -p $(BUILD)/bin
	@cp -f $(BUILD)/src/cli/sandlot $(BUILD)/src/cli/sandlot-client $(BUILD)/src/init/sandlot-init $(BUILD)/src/daemon/sandlotd $(BUILD)/src/gateway/sandlot-gateway $(BUILD)/bin/
	@if [ -f $(BUILD)/src/cli/sandlot-glibc ]; then cp -f $(BUILD)/src/cli/sandlot-glibc $(BUILD)/bin/; else rm -f $(BUILD)/bin/sandlot-glibc; fi

$(BUILD)/build.ninja:
	$(MESON) setup $(BUILD)

# The vm backend's guest (docs/vm-guest.md): `all` builds it when the cloud
# kernel's package can be downloaded; this fails, saying why, when it cannot.
vm: all
	@test -f $(BUILD)/vm/vmlinux -a -f $(BUILD)/vm/initramfs.cpio || { \
	    echo "make vm: $(BUILD)/vm was not built: apt-get must be able to download linux-image-cloud-amd64's kernel package (network, apt-get update)" >&2; exit 1; }

# Install missing Debian packages (root only; no-op when all are present).
deps:
	@scripts/apt-install.sh $(BUILD_DEPS)

test-deps: deps
	@scripts/apt-install.sh $(TEST_DEPS)

demo: deps all
	@scripts/demo.sh

check: test-deps all
	@scripts/check.sh

# Every test of behaviour both backends must have (marked `backends`) with
# vm sandboxes, and the vm backend's own tests (test_vm*.py), with sandlotd
# and the CLI under ASan+UBSan as in `make check`, which runs only a
# representative subset of the vm runs (SANDLOT_TEST_VM, README's Tests).
check-vm: test-deps vm
	@asan_bin=$$(BUILD=$(BUILD) ASAN_BUILD=$(ASAN_BUILD) scripts/sanitize-build.sh asan) && \
	SANDLOT_TEST_VM=only SANDLOT_TEST_BIN_DIR=$(CURDIR)/$$asan_bin SANDLOT_PLAIN_BIN_DIR=$(CURDIR)/$(BUILD)/bin \
	    $(PYTEST) -q -rs -p no:cacheprovider tests/integration

# Built images (docs/images.md): debootstrap + apt into $(SANDLOT_DATA_DIR or
# /var/lib/sandlot)/images, packages cached in /var/cache/sandlot.
image-minimal: deps all
	$(BUILD)/bin/sandlot image build images/minimal.recipe
	$(BUILD)/bin/sandlot run --image minimal -- python3 -c 'print("minimal: ok")'

image-python-data: deps all
	$(BUILD)/bin/sandlot image build images/python-data.recipe
	$(BUILD)/bin/sandlot run --image python-data -- python3 -c \
	    'import numpy, pandas, matplotlib.pyplot, scipy, openpyxl; print("python-data: ok")'

unit: all
	$(MESON) test -C $(BUILD) --suite unit --print-errorlogs

# The unit tests under ASan+UBSan; also leaves sandlotd and the CLI built
# so in $(ASAN_BUILD)/bin (SANDLOT_TEST_BIN_DIR for the integration tests).
asan: all
	BUILD=$(BUILD) ASAN_BUILD=$(ASAN_BUILD) scripts/sanitize-build.sh asan
	$(MESON) test -C $(ASAN_BUILD) --suite unit --print-errorlogs --no-rebuild

# sandlotd under ThreadSanitizer in build-tsan/bin, and the concurrency
# tests of tests/tsan-tests.txt against it.
tsan: all
	BUILD=$(BUILD) scripts/sanitize-build.sh tsan
	SANDLOT_TEST_BIN_DIR=$(CURDIR)/build-tsan/bin TSAN_OPTIONS=halt_on_error=1:exitcode=66:suppressions=$(CURDIR)/tests/tsan.supp \
		$(PYTEST) -q $$(grep -v '^#' tests/tsan-tests.txt)

integration: all
	$(PYTEST) -q tests/integration

# The MCP server under the official MCP SDK client (tests/mcp, its packages
# from the committed package-lock.json) against a real sandlotd: over stdio
# (`sandlot mcp`) and over Streamable HTTP (sandlotd's /mcp).  With
# MCP_TAP=FILE the results are also written to FILE as TAP (scripts/check.sh
# counts them from there).
mcp-check: all
	@command -v node >/dev/null && command -v npm >/dev/null || scripts/apt-install.sh nodejs npm
	@cd tests/mcp && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }
	cd tests/mcp && node --test --test-concurrency=1 \
		--test-reporter=spec --test-reporter-destination=stdout \
		$(if $(MCP_TAP),--test-reporter=tap --test-reporter-destination=$(abspath $(MCP_TAP))) \
		*.test.mjs

# sandlotd's E2B-compatible API under E2B's own SDKs, at the versions pinned
# in tests/e2b (package-lock.json: npm e2b, @e2b/code-interpreter;
# requirements.txt: PyPI e2b, e2b-code-interpreter).  SANDLOT_TEST_BIN_DIR
# picks the sandlotd they run (build/bin unless set); E2B_TAP: also write
# the node tests' TAP there.
e2b-check: e2b-js-check e2b-py-check

e2b-js-check: all
	@command -v node >/dev/null && command -v npm >/dev/null || scripts/apt-install.sh nodejs npm
	@cd tests/e2b && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }
	cd tests/e2b && node --test --test-concurrency=1 \
		--test-reporter=spec --test-reporter-destination=stdout \
		$(if $(E2B_TAP),--test-reporter=tap --test-reporter-destination=$(abspath $(E2B_TAP))) \
		*.test.mjs

e2b-py-check: all
	pyenv=$$(scripts/e2b-pyenv.sh) && "$$pyenv" -m pytest -q -rs -p no:cacheprovider tests/e2b/python

# The TypeScript package (clients/typescript): install its locked dev
# dependencies, build it, run its tests against a real sandlotd (root).
# TS_REPORTER=tap for machine-readable results (scripts/check.sh counts them).
NPM ?= npm
TS_REPORTER ?= spec
ts-check: all
	cd clients/typescript && $(NPM) ci --no-audit --no-fund --prefer-offline --loglevel=error
	cd clients/typescript && $(NPM) run --silent build && $(NPM) run --silent build:test
	cd clients/typescript && node --test --test-concurrency=1 --test-reporter=$(TS_REPORTER) dist-test/*.test.js

# The fleet (docs/fleet.md): deploy/ checked offline (kustomize renders,
# kubernetes-types type-checks every object, haproxy -c, the Nomad jobs
# parse), then several sandlotd in network namespaces behind HAProxy and
# sandlot-gateway (tests/fleet).  kubectl is Kubernetes' own package where
# installed, else Debian's kubernetes-client.
fleet-manifests-check:
	@command -v node >/dev/null && command -v npm >/dev/null || scripts/apt-install.sh nodejs npm
	@command -v kubectl >/dev/null || scripts/apt-install.sh kubernetes-client
	@command -v haproxy >/dev/null || scripts/apt-install.sh haproxy
	@cd tests/fleet/manifests && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; }
	cd tests/fleet/manifests && node --test --test-concurrency=1 \
		--test-reporter=spec --test-reporter-destination=stdout \
		$(if $(FLEET_TAP),--test-reporter=tap --test-reporter-destination=$(abspath $(FLEET_TAP))) \
		*.test.mjs

fleet-check: all fleet-manifests-check
	@command -v haproxy >/dev/null || scripts/apt-install.sh haproxy
	$(PYTEST) -q -rs -p no:cacheprovider tests/fleet

# Every libFuzzer target for FUZZ_SECONDS (default 20) each.
fuzz:
	@scripts/apt-install.sh clang libclang-rt-14-dev
	scripts/fuzz.sh

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-tsan build-fuzz
