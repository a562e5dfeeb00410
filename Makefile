# SPDX-License-Identifier: MIT
#
# NELSSA front door.  Userspace builds with meson/ninja, the kernel side with
# Kbuild; this file only sequences them.
#
#   make            everything: userspace (build/) and the kernel tree
#   make test       every test tier this machine can run (sanitizer build)
#   make demo       the main job on the embedded default devices
#   make kselftest  driver kselftests in a QEMU guest (Debian's kernel, TCG)
#   make bench      benchmarks
#   make check      kernel style checks (checkpatch, sparse, kernel-doc)
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

.PHONY: all deps userspace module test demo kselftest bench check clean help

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

# The daemon and client that make up the main job arrive with issue 7
# ("nelssad and the GPU-node client over UCX"); until then there is
# nothing to demonstrate end to end, and we say so rather than fake it.
demo: userspace
	@echo "make demo: not yet available -- the daemon (nelssad) and the client land"
	@echo "with issue 7; today this tree has the uapi and the numeric core (make test)."

# The driver's kselftests in a QEMU guest (also part of make test).
kselftest:
	@scripts/deps.sh build test
	@mkdir -p $(SANBUILD)
	@sh tests/qemu/rig.sh $(CURDIR) $(CURDIR)/$(SANBUILD)/tests/qemu

bench:
	@echo "make bench: not yet available -- the first benchmarks arrive with the firmware (issue 3)."

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
