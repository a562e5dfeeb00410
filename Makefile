# SPDX-License-Identifier: MIT
#
# NELSSA front door.  Userspace builds with meson/ninja, the kernel side with
# Kbuild; this file only sequences them.
#
#   make            everything: userspace (build/) and the kernel tree
#   make test       every test tier this machine can run (sanitizer build)
#   make demo       the main job on the embedded default: the serving engine
#   make demo-attn  the attention-only demo (nelssa-demo)
#   make kselftest  driver kselftests in a QEMU guest (Debian's kernel, TCG)
#   make kselftest-debug  the same on a KASAN/lockdep/kmemleak kernel (tier T2-debug)
#   make bench      benchmarks
#   make check      kernel style checks (checkpatch, sparse, kernel-doc)
#   make install    programs, libraries, headers, module, udev rule, unit (PREFIX, DESTDIR)
#   make uninstall  removes what make install put there
#   make clean

# When kbuild includes this directory's Kbuild it does not read this file,
# but keep the front door out of its way if it ever does.
ifneq ($(KERNELRELEASE),)
include $(src)/Kbuild
else

BUILD    ?= build
SANBUILD ?= build-san
MESON    ?= meson
NINJA    ?= ninja
KDIR     ?= $(shell KDIR= scripts/kdir.sh 2>/dev/null)

.PHONY: all deps userspace module test demo demo-attn kselftest kselftest-debug bench check clean help install uninstall

all: userspace module

deps:
	@scripts/deps.sh build

$(BUILD)/build.ninja:
	$(MESON) setup $(BUILD) --buildtype=release -Dtests=false

userspace: deps $(BUILD)/build.ninja
	$(NINJA) -C $(BUILD)

module: deps
	@if [ -z "$(KDIR)" ]; then \
		echo "make: no kernel build tree; set KDIR= or install linux-headers-$$(dpkg --print-architecture)"; \
	else \
		scripts/kernel-probe.sh $(KDIR) $(CURDIR) >/dev/null && \
		$(MAKE) -C $(KDIR) M=$(CURDIR) modules; \
	fi

test:
	@scripts/deps.sh build test
	@scripts/run-tests.sh $(SANBUILD)

# The main job: the split-batch serving engine (nelssa.serve, PyTorch) on a
# mixed workload, GPU-only and NELSSA mode side by side, against nelssad
# with four embedded PNM devices on loopback (scripts/serve-demo.sh).
demo: userspace
	@scripts/deps.sh demo
	@scripts/serve-demo.sh $(BUILD)

# Attention only: prefill, decode through the PNM path, latency breakdown
# (nelssa-demo, scripts/demo.sh).
demo-attn: userspace
	@scripts/demo.sh $(BUILD)

# The driver's kselftests in a QEMU guest (also part of make test).
kselftest:
	@scripts/deps.sh build test
	@mkdir -p $(SANBUILD)
	@sh tests/qemu/rig.sh $(CURDIR) $(CURDIR)/$(SANBUILD)/tests/qemu

# Tier T2-debug: the kselftests on a debug kernel built from linux-source-6.1
# and cached in /var/cache/nelssa/debug-kernel (also part of make test).
kselftest-debug:
	@scripts/deps.sh build test
	@mkdir -p $(SANBUILD)
	@sh tests/qemu/rig.sh $(CURDIR) $(CURDIR)/$(SANBUILD)/tests/qemu-debug debug

# Full-size CPU benchmarks; each prints its same-run baseline and ratio.
bench: userspace
	@echo "== GPU-node steps on the CPU: k-means and Top-K at 128K context =="
	@$(BUILD)/tools/client-bench/nelssa-client-bench
	@echo "== sparse attention accuracy vs dense: seven families, 32K and 128K, seeds 1-3 (about 60 min) =="
	@$(BUILD)/tools/accuracy/nelssa-accuracy --seeds 1,2,3
	@echo "== decode-step round trip through nelssad vs a bare UCX ping-pong (128K, 4%, 4 devices) =="
	@scripts/bench-daemon.sh $(BUILD)
	@echo "== KV ingest through nelssad, zero-copy and staged, vs bare UCX puts (tcp, shm) =="
	@scripts/bench-ingest.sh $(BUILD)
	@echo "== nelssa-sim: Mooncake conversation trace at 10 req/s, GPU-only vs NELSSA =="
	@if [ -f ../shared/data/mooncake/conversation_trace.jsonl ]; then \
		$(BUILD)/tools/sim/nelssa-sim --trace ../shared/data/mooncake/conversation_trace.jsonl \
			--rps 10 --svg $(BUILD)/sim-conversation; \
	else \
		echo "(no ../shared/data/mooncake here: synthetic mix instead)"; \
		$(BUILD)/tools/sim/nelssa-sim --synthetic 2000 --long-frac 0.1 --rps 10 \
			--svg $(BUILD)/sim-synthetic; \
	fi
	@echo "== nelssa-sim experiments: burst, long fraction, growth, sensitivity =="
	@scripts/sim-experiments.sh $(BUILD) $(BUILD)/sim-experiments
	@echo "== the serving engine against nelssa-sim: fitted, held-out workload (about 4 min) =="
	@scripts/deps.sh demo
	@scripts/serve-vs-sim.sh $(BUILD)
	@echo "== scale-out: placement rate, the cluster layer's step cost, a node killed (about 1 min) =="
	@scripts/deps.sh test
	@scripts/cluster-bench.sh $(BUILD)
	@echo "== nelssa-sim sweep: NELSSA never more than 5% behind GPU-only? =="
	@scripts/sim-sweep.sh $(BUILD) | tail -5
	@echo "== ... and with the adaptive threshold off =="
	@scripts/sim-sweep.sh $(BUILD) 1000 --no-adaptive | tail -2
	@echo "== SPARSE_ATTN on the embedded sim device, 128K context, 4% of clusters (issue 3's shape) =="
	@$(BUILD)/tools/nelssactl/nelssactl bench sim:0 attn --threads 1
	@$(BUILD)/tools/nelssactl/nelssactl bench sim:0 attn --threads 2
	@echo "== the SPARSE_ATTN kernel alone, per ISA: random 2 GiB store vs cache-resident =="
	@$(BUILD)/tools/fw-bench/nelssa-fw-bench
	@echo "== one core: random 4 KiB chunks by region size vs a streaming read =="
	@$(BUILD)/tools/mem-probe/nelssa-mem-probe

# Installation: meson installs the userspace (PREFIX, default /usr/local),
# the module goes to /lib/modules/KVER/updates (DKMS: dkms.conf).  depmod
# runs only for a real install; a staged one (DESTDIR) leaves it to the
# package's scripts.
PREFIX ?= /usr/local
DESTDIR ?=
# The release the module is built for (its vermagic), not the tree's version.
KVER = $(shell sed -n 's/.*UTS_RELEASE "\(.*\)"/\1/p' $(KDIR)/include/generated/utsrelease.h 2>/dev/null)

install: userspace module
	$(MESON) configure $(BUILD) --prefix=$(PREFIX) >/dev/null
	$(NINJA) -C $(BUILD)
	DESTDIR=$(DESTDIR) $(MESON) install -C $(BUILD) --no-rebuild --quiet
	@if [ -f driver/nelssa_pnm.ko ] && [ -n "$(KVER)" ]; then \
		install -D -m 0644 driver/nelssa_pnm.ko \
			$(DESTDIR)/lib/modules/$(KVER)/updates/nelssa_pnm.ko && \
		echo "installed nelssa_pnm.ko for $(KVER)" && \
		if [ -z "$(DESTDIR)" ] && command -v depmod >/dev/null; then depmod $(KVER); fi; \
	else \
		echo "make install: no kernel module built (no kernel headers): userspace only"; \
	fi

uninstall:
	@if [ -f $(BUILD)/meson-logs/install-log.txt ]; then \
		grep -v '^#' $(BUILD)/meson-logs/install-log.txt | while read -r f; do \
			if [ -f "$$f" ] || [ -L "$$f" ]; then rm -f "$$f" && echo "removed $$f"; fi; \
		done; \
		grep -v '^#' $(BUILD)/meson-logs/install-log.txt | sort -r | while read -r f; do \
			if [ -d "$$f" ]; then rmdir "$$f" 2>/dev/null || true; fi; \
		done; \
	else \
		echo "make uninstall: no install log in $(BUILD); nothing to remove"; \
	fi
	@if [ -n "$(KVER)" ] && [ -f $(DESTDIR)/lib/modules/$(KVER)/updates/nelssa_pnm.ko ]; then \
		rm -f $(DESTDIR)/lib/modules/$(KVER)/updates/nelssa_pnm.ko && \
		echo "removed nelssa_pnm.ko for $(KVER)" && \
		if [ -z "$(DESTDIR)" ] && command -v depmod >/dev/null; then depmod $(KVER); fi; \
	fi

check:
	@scripts/deps.sh build test
	@mkdir -p $(SANBUILD)
	@sh tests/kabi/check-kernel.sh $(CURDIR) $(CURDIR)/$(SANBUILD)/tests/kernel

clean:
	rm -rf $(BUILD) $(SANBUILD)
	@if [ -n "$(KDIR)" ]; then $(MAKE) -C $(KDIR) M=$(CURDIR) clean >/dev/null; fi

help:
	@sed -n 's/^#   //p' Makefile

endif
