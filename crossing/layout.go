package crossing

// The layout shared with the stub; crossing/stub/stub.h holds the same numbers and
// TestLayoutMatchesStubHeader checks that they agree.
const (
	StubBase         = 0x7ff000000000
	SysmsgBase       = 0x7ff100000000
	sysmsgSetup      = 0x0000
	sysmsgCmd        = 0x4000
	sysmsgInfo       = 0x5000
	sysmsgThreads    = 0x10000
	sysmsgBlock      = 0x10000
	sysmsgMaxThreads = 256
	sysmsgSize       = sysmsgThreads + sysmsgMaxThreads*sysmsgBlock

	fdSysmsg = 3
	fdGrant  = 4
	fdAck    = 5
	fdCalls  = 6

	callsCmd      = 0x5f000
	callsBase     = 0x60000
	callsSnippets = 0x10000
	callsSnippet  = 64
	callsMax      = 8192
	callsSize     = callsSnippets + callsMax*callsSnippet
	snippetTrap   = 17 // the offset in a snippet of the end of its own syscall instruction

	setupTenantFprog  = 0x0000
	setupTenantProg   = 0x0010
	setupControlFprog = 0x2000
	setupControlProg  = 0x2010
	setupMaxInsns     = 1000

	cmdSeq    = 0x00
	cmdNops   = 0x04
	cmdOps    = 0x40
	cmdSingle = 0xff0
	cmdOpSize = 40
	cmdMaxOps = 100
	opMap     = 1
	opProtect = 2
	opUnmap   = 3
	opClone   = 4
	opAwait   = 5

	infoVdso  = 0x00
	infoReady = 0x08
	infoAck   = 0x40

	slotState           = 0
	slotSandboxSleeping = 4
	slotStubSleeping    = 8
	slotSigno           = 12
	slotCode            = 16
	slotFlags           = 20
	slotAddr            = 24
	slotSpin            = 32
	slotTSC             = 40
	slotErr             = 48
	slotTrapno          = 56
	slotRegs            = 64
	slotFPState         = 280
	slotKicked          = 288
	slotKick            = 292
	slotRunner          = 296

	runCur      = 0x180
	runNext     = 0x184
	runWord     = 0x188
	runSleeping = 0x18c
	runAlive    = 0x190
	runRing     = 0x194
	runNone     = 0xffffffff

	blockFPArea   = 0x1000
	blockFPSize   = 0x1000
	blockSigstack = 0x2000

	stateDead    = 0
	stateTrapped = 2
	stateResume  = 3
	stateParked  = 4

	slotFSetFS    = 1
	slotFExit     = 2
	slotFResetFPU = 4

	sigPreempt = 12

	sigSlice   = 10
	sliceNS    = 10_000_000
	sysmsgRing = 0x6000
	ringLock   = 0x00
	ringOpen   = 0x04
	ringHead   = 0x08
	ringTail   = 0x0c
	ringEnts   = 0x10
	ringSize   = 256
)

// TenantMax is the first address above the tenant's part of a stub's address space: the stub's
// code, its sysmsg mapping, the host vDSO and the stub's original stack all lie above it.
const TenantMax = 0x7eff00000000

const (
	archSetGS = 0x1001
	archSetFS = 0x1002
)
