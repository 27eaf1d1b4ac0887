#!/bin/sh
# Builds the stub blob. The Makefile and the test that checks the committed blob both use this,
# so the flags live in one place. Usage: build.sh OUT
set -eu
here=$(dirname "$0")
gcc -std=gnu11 -Os -static -nostdlib -nostartfiles -ffreestanding -fpie -no-pie \
	-fno-stack-protector -fno-asynchronous-unwind-tables -fno-unwind-tables \
	-mgeneral-regs-only -fcf-protection=none -fno-builtin -Wall -Werror \
	-Wl,-T,"$here/stub.ld" -Wl,--build-id=none -Wl,-z,noexecstack -Wl,-z,norelro \
	-o "$1" "$here/stub.c"
