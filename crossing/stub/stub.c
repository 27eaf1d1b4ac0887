/*
 * The stub: the host process that holds one tenant address space. It has no rights of its own.
 *
 * At start it maps the sysmsg file, installs its signal handlers, starts the control thread (which
 * maps grant frames on the sandbox's command) and installs the tenant filter on its main thread.
 * From then on every system call of tenant code traps (SIGSYS) and every fault signals; the handler
 * posts the registers to the thread's slot, hands off to the sandbox and resumes with the registers
 * the sandbox wrote back.
 *
 * Freestanding: no libc, no TLS, no stack protector, no floating point (the handler must not touch
 * the tenant's FPU state, which the kernel saves in the signal frame).
 */
#include "stub.h"

typedef unsigned long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef long i64;
typedef int i32;

#define NR_write 1
#define NR_close 3
#define NR_mmap 9
#define NR_rt_sigaction 13
#define NR_rt_sigprocmask 14
#define NR_rt_sigreturn 15
#define NR_sched_yield 24
#define NR_getpid 39
#define NR_clone 56
#define NR_exit 60
#define NR_sigaltstack 131
#define NR_setpriority 141
#define NR_prctl 157
#define NR_arch_prctl 158
#define NR_gettid 186
#define NR_futex 202
#define NR_set_tid_address 218
#define NR_timer_create 222
#define NR_timer_settime 223
#define NR_exit_group 231
#define NR_seccomp 317
#define NR_close_range 436

#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define ARCH_SET_FS 0x1002

#define SIGILL 4
#define SIGTRAP 5
#define SIGBUS 7
#define SIGFPE 8
#define SIGSEGV 11
#define SIGSYS 31

#define SA_SIGINFO 0x4
#define SA_ONSTACK 0x08000000
#define SA_RESTORER 0x04000000

/* user_regs_struct indices (ptrace order). */
enum { R15, R14, R13, R12, RBP, RBX, R11, R10, R9, R8, RAX, RCX, RDX, RSI, RDI, ORIG_RAX, RIP,
       CS, EFLAGS, RSP, SS, FS_BASE, GS_BASE, DS, ES, FS, GS, NREGS };

/* gregs indices of the kernel's ucontext. */
enum { G_R8, G_R9, G_R10, G_R11, G_R12, G_R13, G_R14, G_R15, G_RDI, G_RSI, G_RBP, G_RBX, G_RDX,
       G_RAX, G_RCX, G_RSP, G_RIP, G_EFL, G_CSGSFS, G_ERR, G_TRAPNO, G_OLDMASK, G_CR2 };

struct ucontext {
	u64 flags;
	u64 link;
	u64 ss_sp;
	u64 ss_flags;
	u64 ss_size;
	u64 gregs[23];
	unsigned char *fpregs;
	u64 reserved[8];
};

struct siginfo {
	i32 signo;
	i32 err;
	i32 code;
	i32 pad;
	u64 addr;    /* si_addr, or si_call_addr for SIGSYS */
	i32 syscall; /* SIGSYS */
	u32 arch;
};

struct slot {
	u32 state;
	u32 sandbox_sleeping;
	u32 stub_sleeping;
	u32 signo;
	i32 code;
	u32 flags;
	u64 addr;
	u64 spin;
	u64 tsc;
	u64 err;
	u64 trapno;
	u64 regs[NREGS];
	u64 fpstate;
	u32 kicked;
	u32 kick;
	u32 runner;
};

struct runner {
	u32 cur;
	u32 next;
	u32 word;
	u32 sleeping;
	u32 alive;
	u32 ring;
};

_Static_assert(__builtin_offsetof(struct slot, flags) == SLOT_FLAGS, "slot flags");
_Static_assert(__builtin_offsetof(struct slot, addr) == SLOT_ADDR, "slot addr");
_Static_assert(__builtin_offsetof(struct slot, spin) == SLOT_SPIN, "slot spin");
_Static_assert(__builtin_offsetof(struct slot, err) == SLOT_ERR, "slot err");
_Static_assert(__builtin_offsetof(struct slot, regs) == SLOT_REGS, "slot regs");
_Static_assert(__builtin_offsetof(struct slot, fpstate) == SLOT_FPSTATE, "slot fpstate");
_Static_assert(__builtin_offsetof(struct slot, kicked) == SLOT_KICKED, "slot kicked");
_Static_assert(__builtin_offsetof(struct slot, kick) == SLOT_KICK, "slot kick");
_Static_assert(__builtin_offsetof(struct slot, runner) == SLOT_RUNNER, "slot runner");
_Static_assert(RUN_CUR >= sizeof(struct slot), "runner fields after the slot");
_Static_assert(__builtin_offsetof(struct runner, alive) == RUN_ALIVE - RUN_CUR, "runner alive");
_Static_assert(__builtin_offsetof(struct runner, ring) == RUN_RING - RUN_CUR, "runner ring");

struct sigaction_k {
	void *handler;
	u64 flags;
	void *restorer;
	u64 mask;
};

static inline i64 sys6(i64 n, i64 a, i64 b, i64 c, i64 d, i64 e, i64 f)
{
	register i64 r10 __asm__("r10") = d;
	register i64 r8 __asm__("r8") = e;
	register i64 r9 __asm__("r9") = f;
	i64 ret;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#define sys3(n, a, b, c) sys6(n, (i64)(a), (i64)(b), (i64)(c), 0, 0, 0)

static inline u64 rdtsc(void)
{
	u32 lo, hi;
	__asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
	return ((u64)hi << 32) | lo;
}

static inline void futex_wait(u32 *w, u32 val) { sys6(NR_futex, (i64)w, FUTEX_WAIT, val, 0, 0, 0); }
static inline void futex_wake(u32 *w) { sys6(NR_futex, (i64)w, FUTEX_WAKE, 1, 0, 0, 0); }

static __attribute__((noreturn)) void die(int code)
{
	for (;;)
		sys3(NR_exit_group, code, 0, 0);
}

extern void stub_restorer(void);
extern void stub_start_control(void);
extern void stub_boot(void);
extern char stub_call[], stub_call_committed[], stub_call_resumed[], stub_call_kicked[],
	stub_call_end[];

static inline struct slot *slot_at(u32 i)
{
	return (struct slot *)(SYSMSG_BASE + SYSMSG_THREADS + (u64)i * SYSMSG_BLOCK);
}

static inline unsigned char *fparea(u32 i) { return (unsigned char *)slot_at(i) + BLOCK_FPAREA; }

/* No libc and no vector registers: the handler must not touch the tenant's FPU state. */
static inline void copy_bytes(void *d, const void *s, u64 n)
{
	__asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

/* The size of the FPU image in a signal frame: fxsave's 512 bytes, or the XSAVE area's. */
static u64 fp_size(const unsigned char *fp)
{
	if (*(const u32 *)(fp + 464) == 0x46505853U) /* FP_XSTATE_MAGIC1 */
		return *(const u32 *)(fp + 468);
	return 512;
}

/* Context c leaves this runner: its FPU state goes to its block, where any runner finds it. */
static void save_fp(u32 c, struct ucontext *uc)
{
	struct slot *s = slot_at(c);
	if (!uc->fpregs) {
		s->fpstate = 0;
		return;
	}
	u64 n = fp_size(uc->fpregs);
	if (n > BLOCK_FPSIZE)
		die(117);
	copy_bytes(fparea(c), uc->fpregs, n);
	s->fpstate = (u64)fparea(c);
}

/* Context c comes to this runner: its FPU state into the frame the handler returns through. */
static void load_fp(u32 c, struct ucontext *uc)
{
	struct slot *s = slot_at(c);
	if (uc->fpregs && s->fpstate == (u64)fparea(c))
		copy_bytes(uc->fpregs, fparea(c), fp_size(uc->fpregs));
	s->fpstate = (u64)uc->fpregs;
}

/* Hand a trap to the sandbox (STATE_TRAPPED wakes the context's carrier), or park the context
 * (STATE_PARKED: nobody is woken; the sandbox or a switch resumes it). */
static void post(struct slot *s, u32 state)
{
	__atomic_store_n(&s->state, state, __ATOMIC_SEQ_CST);
	if (state == STATE_TRAPPED && __atomic_load_n(&s->sandbox_sleeping, __ATOMIC_SEQ_CST))
		futex_wake(&s->state);
}

/* Runner self takes parked context c, which the sandbox ordered it to switch to. */
static int take(struct runner *r, u32 self, u32 c)
{
	if (c >= SYSMSG_MAX_THREADS)
		return 0;
	struct slot *t = slot_at(c);
	u32 parked = STATE_PARKED;
	if (!__atomic_compare_exchange_n(&t->state, &parked, STATE_RESUME, 0, __ATOMIC_SEQ_CST,
					 __ATOMIC_SEQ_CST))
		return 0;
	t->runner = self;
	__atomic_store_n(&r->cur, c, __ATOMIC_SEQ_CST);
	return 1;
}

/* Wait until the context the runner holds is to resume (the sandbox may have given the runner
 * another one meanwhile): spin for the cycles the sandbox granted the trap just posted, then
 * sleep on the runner's word. Returns the context to run. */
static u32 wait_resume(struct runner *r, u32 posted)
{
	u64 t0 = rdtsc();
	for (;;) {
		u32 w = __atomic_load_n(&r->word, __ATOMIC_SEQ_CST);
		u32 c = __atomic_load_n(&r->cur, __ATOMIC_SEQ_CST);
		if (c < SYSMSG_MAX_THREADS &&
		    __atomic_load_n(&slot_at(c)->state, __ATOMIC_SEQ_CST) == STATE_RESUME)
			return c;
		/* The window is read on every turn: the sandbox ends it when the task gives up its
		 * vCPU. */
		if (c == posted && rdtsc() - t0 < __atomic_load_n(&slot_at(c)->spin, __ATOMIC_RELAXED)) {
			__builtin_ia32_pause();
			continue;
		}
		__atomic_store_n(&r->sleeping, 1, __ATOMIC_SEQ_CST);
		c = __atomic_load_n(&r->cur, __ATOMIC_SEQ_CST);
		if (c < SYSMSG_MAX_THREADS &&
		    __atomic_load_n(&slot_at(c)->state, __ATOMIC_SEQ_CST) == STATE_RESUME) {
			__atomic_store_n(&r->sleeping, 0, __ATOMIC_RELAXED);
			return c;
		}
		futex_wait(&r->word, w);
		__atomic_store_n(&r->sleeping, 0, __ATOMIC_RELAXED);
	}
}

/* A fresh x87/SSE state and every other XSAVE component in its init state. */
static void reset_fpu(unsigned char *fp)
{
	if (!fp)
		return;
	for (int i = 0; i < 24; i++)
		fp[i] = 0;
	for (int i = 32; i < 416; i++)
		fp[i] = 0;
	*(u16 *)fp = 0x37f;
	*(u32 *)(fp + 24) = 0x1f80;
	if (*(u32 *)(fp + 464) == 0x46505853U) /* FP_XSTATE_MAGIC1: an XSAVE header follows */
		*(u64 *)(fp + 512) = 3;
}

struct ring {
	u32 lock;
	u32 open;
	u32 head;
	u32 tail;
	u32 ents[RING_SIZE];
};

_Static_assert(__builtin_offsetof(struct ring, ents) == RING_ENTS, "ring entries");

static inline struct ring *ring(void) { return (struct ring *)(SYSMSG_BASE + SYSMSG_RING); }

extern char __stub_boot_end[];

struct sigevent_k {
	u64 value;
	i32 signo;
	i32 notify;
	i32 tid;
	i32 pad[11];
};

/* A runner's slice timer: SIG_SLICE to the runner itself for every SLICE_NS of its CPU time, so
 * that a runner Linux does not run uses no slice and no sandbox thread ticks for it. Called with
 * every signal blocked, on the runner's signal stack. */
void runner_timer(void)
{
	struct sigevent_k ev = { .signo = SIG_SLICE, .notify = 4 /* SIGEV_THREAD_ID */ };
	ev.tid = (i32)sys3(NR_gettid, 0, 0, 0);
	i32 id = 0;
	if (sys3(NR_timer_create, 3 /* CLOCK_THREAD_CPUTIME_ID */, (i64)&ev, (i64)&id) != 0)
		die(115);
	i64 its[4] = { 0, SLICE_NS, 0, SLICE_NS };
	if (sys6(NR_timer_settime, id, 0, (i64)its, 0, 0, 0) != 0)
		die(116);
}

/* Registers between the signal frame and a context's slot. */
static void save_regs(u64 *r, const u64 *g)
{
	r[R15] = g[G_R15]; r[R14] = g[G_R14]; r[R13] = g[G_R13]; r[R12] = g[G_R12];
	r[RBP] = g[G_RBP]; r[RBX] = g[G_RBX]; r[R11] = g[G_R11]; r[R10] = g[G_R10];
	r[R9] = g[G_R9];   r[R8] = g[G_R8];   r[RAX] = g[G_RAX]; r[RCX] = g[G_RCX];
	r[RDX] = g[G_RDX]; r[RSI] = g[G_RSI]; r[RDI] = g[G_RDI]; r[RIP] = g[G_RIP];
	r[EFLAGS] = g[G_EFL]; r[RSP] = g[G_RSP];
}

static void load_regs(u64 *g, const u64 *r)
{
	g[G_R15] = r[R15]; g[G_R14] = r[R14]; g[G_R13] = r[R13]; g[G_R12] = r[R12];
	g[G_RBP] = r[RBP]; g[G_RBX] = r[RBX]; g[G_R11] = r[R11]; g[G_R10] = r[R10];
	g[G_R9] = r[R9];   g[G_R8] = r[R8];   g[G_RAX] = r[RAX]; g[G_RCX] = r[RCX];
	g[G_RDX] = r[RDX]; g[G_RSI] = r[RSI]; g[G_RDI] = r[RDI]; g[G_RIP] = r[RIP];
	g[G_EFL] = r[EFLAGS]; g[G_RSP] = r[RSP];
}

/* SIG_SLICE: the runner's slice is over; or a sched_yield of the context it runs (yield set).
 * If the ring is open, the runner takes turns in it (the sandbox says so: RUN_RING) and the ring
 * holds a parked context, the runner parks the one it runs (at the ring's tail) and takes that
 * one; otherwise the tenant code goes on. Nothing traps into the sandbox and nobody is woken.
 * rotate reports whether it served the yield: it did unless the ring is not the runner's to
 * turn (closed, a kick or a switch ordered, the lock busy), and then the call traps as usual.
 * A yield with nobody parked returns at once, as Linux's does with nothing else to run: every
 * other task wanting a vCPU is a member the ring holds, or takes a vCPU from it with a kick. */
static int rotate(u32 self, struct runner *run, struct ucontext *uc, int yield)
{
	u32 cur = __atomic_load_n(&run->cur, __ATOMIC_SEQ_CST);
	u64 ip = uc->gregs[G_RIP];
	if (cur >= SYSMSG_MAX_THREADS || (ip >= STUB_BASE && ip < (u64)__stub_boot_end))
		return 0; /* idle, or in the stub's own code (a call on its way): the next slice */
	struct ring *q = ring();
	/* A kicked context keeps the runner: the kick's signal, pending, traps it next. */
	if (!__atomic_load_n(&run->ring, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&slot_at(cur)->kick, __ATOMIC_SEQ_CST) ||
	    !__atomic_load_n(&q->open, __ATOMIC_SEQ_CST) ||
	    __atomic_load_n(&run->next, __ATOMIC_SEQ_CST) != RUN_NONE)
		return 0;
	if (yield) {
		uc->gregs[G_RAX] = 0; /* sched_yield's result, parked with the context or not */
		/* A patched site's snippet made the call: return where the site's call returns, which
		 * the snippet's next instruction (movabs $ret, %rcx) holds, as the sandbox would
		 * (Calls.Trapped). The table is the sandbox's, read-only here. */
		u64 lo = CALLS_BASE + CALLS_SNIPPETS;
		if (ip >= lo && ip < CALLS_BASE + CALLS_SIZE && (ip - lo) % CALLS_SNIPPET == SNIPPET_TRAP)
			uc->gregs[G_RIP] = *(const u64 *)(ip + 2);
	}
	if (__atomic_load_n(&q->head, __ATOMIC_SEQ_CST) == __atomic_load_n(&q->tail, __ATOMIC_SEQ_CST))
		return yield;
	u32 unlocked = 0;
	if (!__atomic_compare_exchange_n(&q->lock, &unlocked, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		return 0;
	struct slot *s = slot_at(cur);
	u32 next = RUN_NONE;
	while (__atomic_load_n(&q->open, __ATOMIC_RELAXED) && q->head != q->tail &&
	       q->tail - q->head <= RING_SIZE) {
		u32 c = q->ents[q->head % RING_SIZE];
		q->head++;
		if (c >= SYSMSG_MAX_THREADS || c == cur)
			continue;
		u32 parked = STATE_PARKED;
		/* A context the sandbox took meanwhile (a kick) is no longer parked: dropped. */
		if (__atomic_compare_exchange_n(&slot_at(c)->state, &parked, STATE_RESUME, 0,
						__ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			next = c;
			break;
		}
	}
	if (next == RUN_NONE) {
		__atomic_store_n(&q->lock, 0, __ATOMIC_SEQ_CST);
		return yield;
	}
	save_regs(s->regs, uc->gregs);
	save_fp(cur, uc);
	s->runner = RUN_NONE;
	q->ents[q->tail % RING_SIZE] = cur;
	q->tail++;
	struct slot *t = slot_at(next);
	t->runner = self;
	__atomic_store_n(&run->cur, next, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->state, STATE_PARKED, __ATOMIC_SEQ_CST);
	__atomic_store_n(&q->lock, 0, __ATOMIC_SEQ_CST);

	load_fp(next, uc);
	load_regs(uc->gregs, t->regs);
	sys3(NR_arch_prctl, ARCH_SET_FS, t->regs[FS_BASE], 0);
	return 1;
}

static void handler(int sig, struct siginfo *si, struct ucontext *uc)
{
	u64 sp;
	__asm__ volatile("mov %%rsp, %0" : "=r"(sp));
	u64 block = sp & ~(SYSMSG_BLOCK - 1);
	u32 self = (u32)((block - SYSMSG_BASE - SYSMSG_THREADS) / SYSMSG_BLOCK);
	struct runner *run = (struct runner *)(block + RUN_CUR);
	if (sig == SIG_SLICE) {
		rotate(self, run, uc, 0);
		return;
	}
	/* Between equals of one process a yield is a turn of the ring: the sandbox need not hear of
	 * it. The host hears of it, though: a thread of the sandbox that waits for this CPU (a
	 * carrier woken to take a vCPU from the ring) runs now, not at the end of the host's slice,
	 * which the tenant's yields would otherwise never shorten. */
	if (sig == SIGSYS && si->code == 1 /* SYS_SECCOMP */ && si->syscall == NR_sched_yield &&
	    rotate(self, run, uc, 1)) {
		sys3(NR_sched_yield, 0, 0, 0);
		return;
	}
	u32 cur = __atomic_load_n(&run->cur, __ATOMIC_SEQ_CST);
	if (cur >= SYSMSG_MAX_THREADS)
		die(118); /* an idle runner runs no tenant code */
	struct slot *s = slot_at(cur);
	u64 *g = uc->gregs, *r = s->regs;
	i32 code = si->code;

	/* A signal inside stub_call (a patched call on its way into or out of the sandbox) is taken
	 * as if it had come in tenant code, at the patched site or where the call returns to. */
	u64 ip = g[G_RIP];
	if (ip >= (u64)stub_call && ip < (u64)stub_call_end) {
		if (ip < (u64)stub_call_committed) {
			/* Nothing posted yet: back onto the site (rcx holds the address after it), whose
			 * jump enters again; rax and rcx are the call's to clobber. */
			g[G_RIP] = g[G_RCX] - 7;
		} else if (ip < (u64)stub_call_resumed) {
			/* The sandbox holds the slot: a kick waits until the thread leaves. */
			if (sig == SIG_PREEMPT) {
				__atomic_store_n(&s->kicked, 1, __ATOMIC_SEQ_CST);
				return;
			}
			die(119);
		} else {
			/* On the way out: leave at once, in this frame, with what the sandbox wrote. */
			g[G_R15] = r[R15]; g[G_R14] = r[R14]; g[G_R13] = r[R13]; g[G_R12] = r[R12];
			g[G_RBP] = r[RBP]; g[G_RBX] = r[RBX]; g[G_R11] = r[R11]; g[G_R10] = r[R10];
			g[G_R9] = r[R9];   g[G_R8] = r[R8];   g[G_RAX] = r[RAX]; g[G_RCX] = r[RCX];
			g[G_RDX] = r[RDX]; g[G_RSI] = r[RSI]; g[G_RDI] = r[RDI]; g[G_RIP] = r[RIP];
			g[G_RSP] = r[RSP];
			if (s->flags & SLOT_F_EXIT)
				for (;;)
					sys3(NR_exit, 0, 0, 0);
			if (ip == (u64)stub_call_kicked || s->kicked) {
				sig = SIG_PREEMPT;
				code = 0;
			}
			s->kicked = 0;
		}
	}

	save_regs(r, g);
	r[ORIG_RAX] = sig == SIGSYS ? (u64)(i64)si->syscall : (u64)-1;
	s->signo = sig;
	s->code = code;
	s->addr = si->addr;
	s->err = g[G_ERR];
	s->trapno = g[G_TRAPNO];
	s->fpstate = (u64)uc->fpregs;
	s->tsc = rdtsc();

	/* An order to switch: this context leaves the runner. Stopped by the preemption signal it
	 * parks, and nobody is woken: a hand-over between threads of one process costs the host
	 * no wake-up. A trap of its own (or a kick the sandbox asked for) goes to its carrier. */
	u32 order = __atomic_exchange_n(&run->next, RUN_NONE, __ATOMIC_SEQ_CST);
	if (order != RUN_NONE) {
		save_fp(cur, uc);
		s->runner = RUN_NONE;
		int park = sig == SIG_PREEMPT && !__atomic_load_n(&s->kick, __ATOMIC_SEQ_CST);
		if (!take(run, self, order))
			__atomic_store_n(&run->cur, RUN_NONE, __ATOMIC_SEQ_CST);
		post(s, park ? STATE_PARKED : STATE_TRAPPED);
	} else {
		s->runner = self;
		post(s, STATE_TRAPPED);
	}
	u32 next = wait_resume(run, cur);

	s = slot_at(next);
	r = s->regs;
	u32 flags = s->flags;
	if (flags & SLOT_F_EXIT)
		for (;;)
			sys3(NR_exit, 0, 0, 0);
	/* A context that comes from elsewhere (another one ran here, or it was parked) brings its
	 * FPU state and FS base; one resumed in this frame keeps them. */
	int moved = next != cur || s->fpstate != (u64)uc->fpregs;
	if (moved)
		load_fp(next, uc);
	s->runner = self;
	load_regs(g, r);
	if ((flags & SLOT_F_SET_FS) || moved)
		sys3(NR_arch_prctl, ARCH_SET_FS, r[FS_BASE], 0);
	if (flags & SLOT_F_RESET_FPU)
		reset_fpu(uc->fpregs);
}

static const int trapped_signals[] = { SIGSYS, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIG_PREEMPT,
				       SIG_SLICE };

void stub_main(u64 *sp)
{
	u64 argc = sp[0];
	u64 *p = sp + 1 + argc + 1;
	while (*p)
		p++;
	u64 vdso = 0;
	for (p++; p[0]; p += 2)
		if (p[0] == 33) /* AT_SYSINFO_EHDR */
			vdso = p[1];

	/* The setup and command pages are read-only here: tenant code shares this address space. */
	if (sys6(NR_mmap, SYSMSG_BASE, SYSMSG_INFO, 1 /* PROT_READ */, 0x11 /* SHARED|FIXED */,
		 FD_SYSMSG, 0) != (i64)SYSMSG_BASE)
		die(120);
	if (sys6(NR_mmap, SYSMSG_BASE + SYSMSG_INFO, SYSMSG_SIZE - SYSMSG_INFO, 3 /* RW */, 0x11,
		 FD_SYSMSG, SYSMSG_INFO) != (i64)(SYSMSG_BASE + SYSMSG_INFO))
		die(121);
	unsigned char *info = (unsigned char *)(SYSMSG_BASE + SYSMSG_INFO);
	*(u64 *)(info + INFO_VDSO) = vdso;

	/* The call table is optional: without it no call site is patched. Its snippets read the
	 * command page through a second mapping at a 32-bit address. */
	if (sys6(NR_mmap, CALLS_BASE, CALLS_SIZE, 5 /* PROT_READ|PROT_EXEC */, 0x11, FD_CALLS, 0) ==
	    (i64)CALLS_BASE)
		sys6(NR_mmap, CALLS_CMD, 0x1000, 1 /* PROT_READ */, 0x11, FD_SYSMSG, SYSMSG_CMD);

	sys3(NR_close_range, 0, 2, 0);
	sys3(NR_close, FD_SYSMSG, 0, 0);
	sys3(NR_close_range, FD_CALLS, ~0U, 0);
	/* The sandbox's own threads run at the lowest weight (see kernel.lowerWeight); its tenant
	 * threads carry the pod's. Threads the control thread makes inherit this. Without the right
	 * to raise it, the stub keeps what it inherited. */
	sys3(NR_setpriority, 0 /* PRIO_PROCESS */, 0, 0);
	if (sys6(NR_prctl, 38 /* PR_SET_NO_NEW_PRIVS */, 1, 0, 0, 0, 0) != 0)
		die(122);
	/* Exec'd from a memfd, the stub would be named after its descriptor: name it for ps. */
	static const char name[16] = "endo-stub";
	sys6(NR_prctl, 15 /* PR_SET_NAME */, (i64)name, 0, 0, 0, 0);

	struct sigaction_k sa = {
		.handler = (void *)handler,
		.flags = SA_SIGINFO | SA_ONSTACK | SA_RESTORER,
		.restorer = (void *)stub_restorer,
		.mask = ~0UL,
	};
	for (unsigned i = 0; i < sizeof(trapped_signals) / sizeof(trapped_signals[0]); i++)
		if (sys6(NR_rt_sigaction, trapped_signals[i], (i64)&sa, 0, 8, 0, 0) != 0)
			die(123);

	/* The control thread starts with every signal blocked and keeps them so. */
	u64 all = ~0UL, none = 0;
	sys6(NR_rt_sigprocmask, 2 /* SIG_SETMASK */, (i64)&all, 0, 8, 0, 0);
	stub_start_control();
	u32 *ready = (u32 *)(info + INFO_READY);
	while (__atomic_load_n(ready, __ATOMIC_SEQ_CST) == 0)
		futex_wait(ready, 0);
	sys6(NR_rt_sigprocmask, 2, (i64)&none, 0, 8, 0, 0);

	u64 block = SYSMSG_BASE + SYSMSG_THREADS; /* runner 0 */
	u64 ss[3] = { block + BLOCK_SIGSTACK, 0, SYSMSG_BLOCK - BLOCK_SIGSTACK };
	if (sys3(NR_sigaltstack, ss, 0, 0) != 0)
		die(124);
	sys3(NR_set_tid_address, block + RUN_ALIVE, 0, 0);
	runner_timer();
	if (sys3(NR_seccomp, 1 /* SECCOMP_SET_MODE_FILTER */, 0, SYSMSG_BASE + SETUP_TENANT_FPROG) != 0)
		die(125);
	stub_boot();
	die(126);
}

/*
 * Entry, the signal restorer, and the control thread. The control thread uses no memory but the
 * read-only command page and its ack buffer, and keeps its state in registers: tenant code shares
 * the address space and could rewrite a stack under it.
 */
__asm__(
	".text\n"
	".globl _start\n"
	"_start:\n"
	"	mov %rsp, %rdi\n"
	"	and $-16, %rsp\n"
	"	call stub_main\n"
	"	ud2\n"

	".globl stub_restorer\n"
	"stub_restorer:\n"
	"	mov $15, %eax\n"
	"	syscall\n"
	"	ud2\n"

	".globl stub_start_control\n"
	"stub_start_control:\n"
	"	mov $56, %eax\n"
	"	mov $0x50f00, %edi\n" /* VM|FS|FILES|SIGHAND|THREAD|SYSVSEM */
	"	xor %esi, %esi\n"     /* the control thread never touches a stack */
	"	xor %edx, %edx\n"
	"	xor %r10d, %r10d\n"
	"	xor %r8d, %r8d\n"
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jz control_thread\n"
	"	ret\n"

	"control_thread:\n"
	"	mov $317, %eax\n"
	"	mov $1, %edi\n"
	"	xor %esi, %esi\n"
	"	movabs $0x7ff100002000, %rdx\n" /* SYSMSG_BASE + SETUP_CONTROL_FPROG */
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jnz control_die\n"
	"	movabs $0x7ff100005000, %rbx\n" /* info page */
	"	movl $1, 8(%rbx)\n"             /* INFO_READY */
	"	mov $202, %eax\n"
	"	lea 8(%rbx), %rdi\n"
	"	mov $1, %esi\n"                 /* FUTEX_WAKE */
	"	mov $1, %edx\n"
	"	syscall\n"
	"	xor %r12d, %r12d\n"             /* the last batch seen */
	"control_wait:\n"
	"	movabs $0x7ff100004000, %rbp\n" /* command page */
	"	mov (%rbp), %eax\n"
	"	cmp %eax, %r12d\n"
	"	jne control_batch\n"
	"	mov $202, %eax\n"
	"	mov %rbp, %rdi\n"
	"	xor %esi, %esi\n"               /* FUTEX_WAIT */
	"	mov %r12d, %edx\n"
	"	xor %r10d, %r10d\n"
	"	syscall\n"
	"	jmp control_wait\n"
	"control_batch:\n"
	"	mov %eax, %r12d\n"
	"	mov 4(%rbp), %r13d\n"
	"	cmp $100, %r13d\n"              /* CMD_MAX_OPS */
	"	jbe 1f\n"
	"	mov $100, %r13d\n"
	"1:	xor %r14d, %r14d\n"
	"	xor %r15d, %r15d\n"
	"control_op:\n"
	"	cmp %r13d, %r14d\n"
	"	jae control_ack\n"
	"	imul $40, %r14, %rbx\n"
	"	lea 0x40(%rbp,%rbx), %rbx\n"
	"	mov 8(%rbx), %rdi\n"
	"	mov 16(%rbx), %rsi\n"
	"	mov 24(%rbx), %rdx\n"
	"	mov (%rbx), %rax\n"
	"	cmp $1, %rax\n"
	"	je control_map\n"
	"	cmp $2, %rax\n"
	"	je control_protect\n"
	"	cmp $3, %rax\n"
	"	je control_unmap\n"
	"	cmp $4, %rax\n"
	"	je control_clone\n"
	"	cmp $5, %rax\n"
	"	je control_await\n"
	"	mov $-22, %r15\n"
	"	jmp control_ack\n"
	"control_map:\n"
	"	mov $9, %eax\n"
	"	mov $0x8011, %r10d\n"           /* MAP_SHARED|MAP_FIXED|MAP_POPULATE */
	"	mov $4, %r8d\n"                 /* FD_GRANT */
	"	mov 32(%rbx), %r9\n"
	"	syscall\n"
	"	cmp %rax, %rdi\n"
	"	jne control_fail\n"
	"	jmp control_next\n"
	"control_protect:\n"
	"	mov $10, %eax\n"
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jnz control_fail\n"
	"	jmp control_next\n"
	"control_unmap:\n"
	"	mov $11, %eax\n"
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jnz control_fail\n"
	"	jmp control_next\n"
	/* A new runner: addr is its clear-child-tid word (RUN_ALIVE), len/prot/off form the
	 * stack_t of its signal stack. The new thread uses no memory
	 * but this read-only page: it sets its signal stack, unblocks signals, takes the tenant
	 * filter on top of this thread's (which allows no more than the tenant's from the stub's
	 * text) and traps into the sandbox from the boot loop. */
	"control_clone:\n"
	"	mov %rdi, %r10\n"              /* ctid */
	"	mov $56, %eax\n"
	"	mov $0x250f00, %edi\n"         /* VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|CHILD_CLEARTID */
	"	xor %esi, %esi\n"
	"	xor %edx, %edx\n"
	"	xor %r8d, %r8d\n"
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jz clone_child\n"
	"	js control_fail\n"
	"	mov %rax, %r15\n"              /* the ack carries the new thread's host tid */
	"	jmp control_next\n"
	"clone_child:\n"
	"	mov 16(%rbx), %rsp\n"         /* the top of its signal stack: signals are still blocked */
	"	add 32(%rbx), %rsp\n"
	"	and $-16, %rsp\n"
	"	call runner_timer\n"
	"	mov $131, %eax\n"              /* sigaltstack(op->len.., NULL) */
	"	lea 16(%rbx), %rdi\n"
	"	xor %esi, %esi\n"
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jnz clone_die\n"
	"	mov $14, %eax\n"               /* rt_sigprocmask(SIG_SETMASK, &zero, NULL, 8) */
	"	mov $2, %edi\n"
	"	lea 8(%rbp), %rsi\n"           /* command page bytes 8..15 are always zero */
	"	xor %edx, %edx\n"
	"	mov $8, %r10d\n"
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jnz clone_die\n"
	"	mov $317, %eax\n"
	"	mov $1, %edi\n"
	"	xor %esi, %esi\n"
	"	movabs $0x7ff100000000, %rdx\n" /* SYSMSG_BASE + SETUP_TENANT_FPROG */
	"	syscall\n"
	"	test %rax, %rax\n"
	"	jnz clone_die\n"
	"	jmp stub_boot\n"
	"clone_die:\n"
	"	mov $60, %eax\n"
	"	mov $128, %edi\n"
	"	syscall\n"
	"	jmp clone_die\n"
	/* Wait until a word changes (FUTEX_WAIT on addr while it holds len; prot and off are the
	 * timeout's seconds and nanoseconds). Whatever the wait returns, the batch goes on. */
	"control_await:\n"
	"	mov $202, %eax\n"
	"	mov %esi, %edx\n"
	"	xor %esi, %esi\n"             /* FUTEX_WAIT */
	"	lea 24(%rbx), %r10\n"
	"	syscall\n"
	"	jmp control_next\n"
	"control_next:\n"
	"	inc %r14d\n"
	"	jmp control_op\n"
	"control_fail:\n"
	"	mov %rax, %r15\n"
	"control_ack:\n"
	"	movabs $0x7ff100005040, %rsi\n" /* info page + INFO_ACK */
	"	mov %r12d, (%rsi)\n"
	"	mov %r14d, 4(%rsi)\n"
	"	mov %r15, 8(%rsi)\n"           /* -errno, or a new thread's tid */
	"	mov $1, %eax\n"
	"	mov $5, %edi\n"                 /* FD_ACK */
	"	mov $16, %edx\n"
	"	syscall\n"
	"	cmp $16, %rax\n"
	"	je control_wait\n"
	"control_die:\n"
	"	mov $231, %eax\n"
	"	mov $127, %edi\n"
	"	syscall\n"
	"	jmp control_die\n"

	/*
	 * A patched call site of a tenant whose only thread is thread 0 jumps here through its
	 * snippet, with the call's number in eax and the address after the site in rcx. It posts the
	 * call as the handler posts a trap, in thread 0's slot, but without a signal: the tenant's FPU
	 * state stays in the registers, which the sandbox neither reads nor changes here (when it
	 * needs to, it resumes the thread at stub_escalate, whose fault brings a full frame). r11
	 * holds the slot: a system call clobbers r11, as it does rcx. Until the commit it may be
	 * restarted from the site, so it changes no register the call does not clobber; the handler
	 * knows the three parts.
	 */
	".globl stub_call, stub_call_committed, stub_call_resumed, stub_call_kicked, stub_call_end\n"
	"stub_call:\n"
	"	movabs $0x7ff100010000, %r11\n" /* SYSMSG_BASE + SYSMSG_THREADS: thread 0's slot */
	"	mov %r15, 64(%r11)\n"
	"	mov %r14, 72(%r11)\n"
	"	mov %r13, 80(%r11)\n"
	"	mov %r12, 88(%r11)\n"
	"	mov %rbp, 96(%r11)\n"
	"	mov %rbx, 104(%r11)\n"
	"	mov %r10, 120(%r11)\n"
	"	mov %r9, 128(%r11)\n"
	"	mov %r8, 136(%r11)\n"
	"	mov %rax, 144(%r11)\n"
	"	mov %rcx, 152(%r11)\n"
	"	mov %rdx, 160(%r11)\n"
	"	mov %rsi, 168(%r11)\n"
	"	mov %rdi, 176(%r11)\n"
	"	mov %rax, 184(%r11)\n"         /* orig_rax */
	"	mov %rcx, 192(%r11)\n"         /* rip */
	"	movq $0x202, 112(%r11)\n"      /* r11 and eflags: not known here, nor needed */
	"	movq $0x202, 208(%r11)\n"
	"	mov %rsp, 216(%r11)\n"
	"	movl $0, 12(%r11)\n"           /* signo 0: a call */
	"	movl $0, 16(%r11)\n"
	"	movq $0, 24(%r11)\n"
	"	movq $0, 280(%r11)\n"          /* no FPU state in a frame */
	"	mov $2, %eax\n"                /* STATE_TRAPPED, with a full barrier */
	"	xchg %eax, (%r11)\n"
	"stub_call_committed:\n"
	"	cmpl $0, 4(%r11)\n"            /* the sandbox sleeps: wake it */
	"	je 1f\n"
	"	mov $202, %eax\n"
	"	mov %r11, %rdi\n"
	"	mov $1, %esi\n"
	"	mov $1, %edx\n"
	"	mov %rdi, %rbx\n"
	"	syscall\n"
	"	mov %rbx, %r11\n"
	"1:	rdtsc\n"                        /* spin for the window the sandbox granted */
	"	shl $32, %rdx\n"
	"	or %rax, %rdx\n"
	"	mov %rdx, %r8\n"
	"2:	cmpl $3, (%r11)\n"
	"	je stub_call_resumed\n"
	"	rdtsc\n"
	"	shl $32, %rdx\n"
	"	or %rax, %rdx\n"
	"	sub %r8, %rdx\n"
	"	cmp 32(%r11), %rdx\n"
	"	jae 3f\n"
	"	pause\n"
	"	jmp 2b\n"
	"3:	mov %r11, %rbx\n"              /* then sleep (syscall clobbers r11) */
	"4:	mov $1, %eax\n"
	"	xchg %eax, 8(%rbx)\n"
	"	cmpl $3, (%rbx)\n"
	"	je 5f\n"
	"	mov $202, %eax\n"              /* on the sleeping word, which the sandbox clears to wake */
	"	lea 8(%rbx), %rdi\n"           /* it: the state word is the carrier's, and a call parked */
	"	xor %esi, %esi\n"              /* here leaves it at neither value */
	"	mov $1, %edx\n"
	"	xor %r10d, %r10d\n"
	"	syscall\n"
	"	jmp 4b\n"
	"5:	mov %rbx, %r11\n"
	"stub_call_resumed:\n"
	"	movl $0, 8(%r11)\n"
	"	testl $2, 20(%r11)\n"          /* SLOT_F_EXIT */
	"	jnz 6f\n"
	"	cmpl $0, 288(%r11)\n"          /* kicked while in the sandbox */
	"	jne stub_call_kicked\n"
	"	mov 64(%r11), %r15\n"
	"	mov 72(%r11), %r14\n"
	"	mov 80(%r11), %r13\n"
	"	mov 88(%r11), %r12\n"
	"	mov 96(%r11), %rbp\n"
	"	mov 104(%r11), %rbx\n"
	"	mov 120(%r11), %r10\n"
	"	mov 128(%r11), %r9\n"
	"	mov 136(%r11), %r8\n"
	"	mov 144(%r11), %rax\n"
	"	mov 152(%r11), %rcx\n"
	"	mov 160(%r11), %rdx\n"
	"	mov 168(%r11), %rsi\n"
	"	mov 176(%r11), %rdi\n"
	"	mov 216(%r11), %rsp\n"
	"	jmp *192(%r11)\n"
	"stub_call_kicked:\n"
	"	ud2\n"                          /* the handler makes it the preemption trap */
	"6:	mov $60, %eax\n"
	"	xor %edi, %edi\n"
	"	syscall\n"
	"	jmp 6b\n"
	"stub_call_end:\n"

	/* The sandbox resumes a thread here when it needs the thread's full state after a patched
	 * call (a signal frame, the FPU state, a new FS base): the fault brings them. */
	".globl stub_escalate\n"
	"stub_escalate:\n"
	"	ud2\n"

	/* Outside the allowed range: every call here traps. The sandbox answers the first calls as
	 * timing pings, then replaces the registers with the tenant's entry state. */
	".section .boot, \"ax\"\n"
	".globl stub_boot\n"
	"stub_boot:\n"
	"	mov $39, %eax\n"
	"	syscall\n"
	"	jmp stub_boot\n"
	".text\n");
