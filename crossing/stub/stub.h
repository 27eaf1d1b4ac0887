/*
 * Layout shared by the stub and the sandbox (crossing/layout.go holds the same numbers; a test
 * checks that they agree). Every address here is fixed in every stub process.
 */
#ifndef ENDO_STUB_H
#define ENDO_STUB_H

/* The stub's own code and data (see stub.ld). Only .text is the allowed range of the filters. */
#define STUB_BASE          0x7ff000000000UL

/* The sysmsg file, mapped by the stub at SYSMSG_BASE. */
#define SYSMSG_BASE        0x7ff100000000UL
#define SYSMSG_SETUP       0x0000UL   /* read-only in the stub: filters */
#define SYSMSG_CMD         0x4000UL   /* read-only in the stub: commands for the control thread */
#define SYSMSG_INFO        0x5000UL   /* writable: what the stub reports at start */
#define SYSMSG_THREADS     0x10000UL  /* writable: one block per tenant thread */
#define SYSMSG_BLOCK       0x10000UL  /* a block: its slot page, an FPU area, a signal stack */
#define SYSMSG_MAX_THREADS 256
#define SYSMSG_SIZE        (SYSMSG_THREADS + SYSMSG_MAX_THREADS * SYSMSG_BLOCK)

/* Descriptors the sandbox gives the stub at exec. */
#define FD_SYSMSG 3
#define FD_GRANT  4
#define FD_ACK    5
#define FD_CALLS  6 /* the sandbox's call table (optional) */

/* The call table, mapped read-only and executable by every stub of a sandbox at CALLS_BASE.
 * A patched call site "mov $nr, %eax; syscall" becomes "jmp *CALLS_BASE+8*i" (ff 24 25 + 32-bit
 * address), whose sixth byte, 0x06, is an invalid instruction: a thread that ran the old mov
 * and then meets the new bytes faults (SIGILL) instead of running half an instruction. Entry i
 * points at snippet i (CALLS_SNIPPETS + 64*i). While CMD_SINGLE is set (read through the command
 * page's second mapping at CALLS_CMD, a 32-bit address) the snippet loads the address after the
 * site into rcx and the number into eax and jumps to stub_call, which uses thread 0's slot;
 * otherwise it makes the call from its own code, outside the allowed range, and so traps. */
#define CALLS_CMD      0x5f000UL
#define CALLS_BASE     0x60000UL
#define CALLS_SNIPPETS 0x10000UL /* offset of the snippets in the table */
#define CALLS_SNIPPET  64
#define CALLS_MAX      8192
#define CALLS_SIZE     (CALLS_SNIPPETS + CALLS_MAX * CALLS_SNIPPET)
#define SNIPPET_TRAP   17 /* offset in a snippet of the end of its syscall; movabs $ret, %rcx follows */

/* Setup page: two seccomp programs, each a struct sock_fprog {u16 len; u64 filter} followed by
 * its filter; the sandbox fills in absolute pointers (SYSMSG_BASE + offset). */
#define SETUP_TENANT_FPROG  0x0000
#define SETUP_TENANT_PROG   0x0010  /* up to SETUP_MAX_INSNS instructions of 8 bytes */
#define SETUP_CONTROL_FPROG 0x2000
#define SETUP_CONTROL_PROG  0x2010
#define SETUP_MAX_INSNS     1000

/* Command page: the sandbox writes ops, then nops, then bumps seq (the futex word). */
#define CMD_SEQ   0x00  /* u32 */
#define CMD_NOPS  0x04  /* u32 */
#define CMD_OPS   0x40  /* struct op[CMD_MAX_OPS], 40 bytes each */
#define CMD_SINGLE 0xff0 /* u32: 1 while thread 0 is the tenant's only thread (see CALLS_BASE) */
#define CMD_OP_SIZE 40
#define CMD_MAX_OPS 100
#define OP_MAP     1  /* addr, len, prot, off: mmap(MAP_SHARED|MAP_FIXED|MAP_POPULATE) of FD_GRANT */
#define OP_PROTECT 2  /* addr, len, prot */
#define OP_UNMAP   3  /* addr, len */
#define OP_CLONE   4  /* addr: the new runner's RUN_ALIVE word; len, prot, off: its stack_t */
#define OP_AWAIT   5  /* addr: a u32 to wait on while it holds len; prot, off: the timeout's
		       * seconds and nanoseconds. It never fails. */
/* After a batch the control thread writes {u32 seq, u32 index of the failed op or nops,
 * i64 -errno, or 0, or the tid of the thread OP_CLONE made} (16 bytes) to FD_ACK. */

/* Info page. */
#define INFO_VDSO  0x00 /* u64: AT_SYSINFO_EHDR of the stub */
#define INFO_READY 0x08 /* u32: 1 once the control thread runs */
#define INFO_ACK   0x40 /* 16 bytes: the control thread's ack, before it is written to FD_ACK */

/* A thread's slot (the first bytes of its block). */
#define SLOT_STATE      0   /* u32, futex word: 0 dead, 2 trapped, 3 resume */
#define SLOT_SANDBOX_SLEEPING 4 /* u32 */
#define SLOT_STUB_SLEEPING    8 /* u32 */
#define SLOT_SIGNO     12   /* u32: SIGSYS, a fault's signal, the preemption signal, or 0 (a call) */
#define SLOT_CODE      16   /* i32: si_code */
#define SLOT_FLAGS     20   /* u32, from the sandbox: SLOT_F_* */
#define SLOT_ADDR      24   /* u64: si_addr (faults) or si_call_addr (SIGSYS) */
#define SLOT_SPIN      32   /* u64, from the sandbox: TSC cycles the stub may spin */
#define SLOT_TSC       40   /* u64: rdtsc when the trap was posted */
#define SLOT_ERR       48   /* u64: the fault's error code (bit 1: write) */
#define SLOT_TRAPNO    56   /* u64 */
#define SLOT_REGS      64   /* struct user_regs_struct (27 u64s, ptrace order) */
#define SLOT_FPSTATE  280   /* u64: where the trap's FPU state (fxsave/xsave area) lies */
#define SLOT_KICKED   288   /* u32: a preemption signal came while the thread was in the sandbox */
#define SLOT_KICK     292   /* u32, from the sandbox: trap at the next chance, never park */
#define SLOT_RUNNER   296   /* u32: the runner holding the context, or RUN_NONE */

/*
 * Contexts and runners. Block i holds context i (the slot above: a tenant thread's registers)
 * and the fields of runner i (a host thread of the stub, with its signal stack in block i). A
 * runner runs one context at a time and may switch to another of the same stub without the
 * sandbox: on the preemption signal it parks its context (registers and FPU state saved in the
 * context's block) and loads the one the sandbox ordered. A context off every runner keeps its
 * FPU state in its block's FPU area.
 */
#define RUN_CUR       0x180 /* u32: the context the runner holds, or RUN_NONE (idle) */
#define RUN_NEXT      0x184 /* u32, from the sandbox: the context to switch to, or RUN_NONE */
#define RUN_WORD      0x188 /* u32, futex word the runner sleeps on; the sandbox bumps it */
#define RUN_SLEEPING  0x18c /* u32 */
#define RUN_ALIVE     0x190 /* u32: the runner's clear-child-tid word (0 once it is gone) */
#define RUN_RING      0x194 /* u32, from the sandbox: 1 while the runner takes turns in the ring */
#define RUN_NONE      0xffffffffUL
#define BLOCK_FPAREA  0x1000 /* a parked context's FPU state */
#define BLOCK_FPSIZE  0x1000
#define BLOCK_SIGSTACK 0x2000 /* the runner's signal stack, to the block's end */

#define STATE_DEAD    0
#define STATE_TRAPPED 2
#define STATE_RESUME  3
#define STATE_PARKED  4 /* in tenant code, off every runner: the sandbox or a switch resumes it */

#define SLOT_F_SET_FS    1 /* set the FS base to regs.fs_base before resuming */
#define SLOT_F_EXIT      2 /* end this thread instead of resuming */
#define SLOT_F_RESET_FPU 4 /* give the thread a fresh FPU/SSE state (exec, new thread) */

#define SIG_PREEMPT 12 /* SIGUSR2: the sandbox's preemption signal */

/*
 * The ring: contexts parked for the runners to take turns with, without the sandbox. Each runner
 * has a timer on its own CPU time that sends it SIG_SLICE every SLICE_NS; while the ring is open
 * and holds a context, the runner parks the one it runs at the ring's tail and takes the one at
 * its head, in the handler, waking nobody. The sandbox fills and opens the ring, and closes it
 * (taking the lock, so that it sees which runner holds which context) before it schedules any of
 * them itself. A runner never waits for the lock: it skips its turn.
 */
#define SIG_SLICE   10 /* SIGUSR1: a runner's slice timer */
#define SLICE_NS    10000000
#define SYSMSG_RING 0x6000UL /* writable: struct ring */
#define RING_LOCK   0x00 /* u32: 1 while held */
#define RING_OPEN   0x04 /* u32: 1 while the runners may take turns */
#define RING_HEAD   0x08 /* u32: free-running index of the next context to take */
#define RING_TAIL   0x0c /* u32: free-running index after the last one */
#define RING_ENTS   0x10 /* u32[RING_SIZE]: context indices */
#define RING_SIZE   256

#endif
