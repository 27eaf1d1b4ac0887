package crossing

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The committed stub blob must be what its source builds to.
func TestStubBlobMatchesSource(t *testing.T) {
	out := filepath.Join(t.TempDir(), "stub.bin")
	b, err := exec.Command("sh", "stub/build.sh", out).CombinedOutput()
	require.NoError(t, err, "%s", b)
	built, err := os.ReadFile(out)
	require.NoError(t, err)
	require.True(t, bytes.Equal(built, stubBlob),
		"crossing/stub/stub.bin is stale: run `make stub` and commit it")
}

// stub.h and layout.go describe one layout.
func TestLayoutMatchesStubHeader(t *testing.T) {
	want := map[string]uint64{
		"STUB_BASE": StubBase, "SYSMSG_BASE": SysmsgBase, "SYSMSG_SETUP": sysmsgSetup,
		"SYSMSG_CMD": sysmsgCmd, "SYSMSG_INFO": sysmsgInfo, "SYSMSG_THREADS": sysmsgThreads,
		"SYSMSG_BLOCK": sysmsgBlock, "SYSMSG_MAX_THREADS": sysmsgMaxThreads,
		"FD_SYSMSG": fdSysmsg, "FD_GRANT": fdGrant, "FD_ACK": fdAck, "FD_CALLS": fdCalls,
		"CALLS_BASE": callsBase, "CALLS_SNIPPETS": callsSnippets, "CALLS_SNIPPET": callsSnippet,
		"CALLS_MAX": callsMax, "SLOT_KICKED": slotKicked, "CALLS_CMD": callsCmd, "CMD_SINGLE": cmdSingle,
		"SETUP_TENANT_FPROG": setupTenantFprog, "SETUP_TENANT_PROG": setupTenantProg,
		"SETUP_CONTROL_FPROG": setupControlFprog, "SETUP_CONTROL_PROG": setupControlProg,
		"SETUP_MAX_INSNS": setupMaxInsns, "CMD_SEQ": cmdSeq, "CMD_NOPS": cmdNops, "CMD_OPS": cmdOps,
		"CMD_OP_SIZE": cmdOpSize, "CMD_MAX_OPS": cmdMaxOps, "OP_MAP": opMap, "OP_PROTECT": opProtect,
		"OP_UNMAP": opUnmap, "OP_CLONE": opClone, "OP_AWAIT": opAwait, "INFO_VDSO": infoVdso, "INFO_READY": infoReady, "INFO_ACK": infoAck,
		"SLOT_STATE": slotState, "SLOT_SANDBOX_SLEEPING": slotSandboxSleeping,
		"SLOT_STUB_SLEEPING": slotStubSleeping, "SLOT_SIGNO": slotSigno, "SLOT_CODE": slotCode,
		"SLOT_FLAGS": slotFlags, "SLOT_ADDR": slotAddr, "SLOT_SPIN": slotSpin, "SLOT_TSC": slotTSC,
		"SLOT_ERR": slotErr, "SLOT_TRAPNO": slotTrapno, "SLOT_REGS": slotRegs, "SLOT_FPSTATE": slotFPState,
		"STATE_DEAD": stateDead, "STATE_TRAPPED": stateTrapped, "STATE_RESUME": stateResume,
		"SLOT_F_SET_FS": slotFSetFS, "SLOT_F_EXIT": slotFExit, "SLOT_F_RESET_FPU": slotFResetFPU,
		"SIG_PREEMPT": sigPreempt, "SLOT_KICK": slotKick, "SLOT_RUNNER": slotRunner,
		"RUN_CUR": runCur, "RUN_NEXT": runNext, "RUN_WORD": runWord, "RUN_SLEEPING": runSleeping,
		"RUN_ALIVE": runAlive, "RUN_RING": runRing, "RUN_NONE": runNone, "BLOCK_FPAREA": blockFPArea,
		"BLOCK_FPSIZE": blockFPSize, "BLOCK_SIGSTACK": blockSigstack, "STATE_PARKED": stateParked,
		"SIG_SLICE": sigSlice, "SLICE_NS": sliceNS, "SYSMSG_RING": sysmsgRing, "RING_LOCK": ringLock,
		"RING_OPEN": ringOpen, "RING_HEAD": ringHead, "RING_TAIL": ringTail, "RING_ENTS": ringEnts,
		"RING_SIZE": ringSize, "SNIPPET_TRAP": snippetTrap,
	}
	f, err := os.Open("stub/stub.h")
	require.NoError(t, err)
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[0] != "#define" {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSuffix(fields[2], "UL"), 0, 64)
		if err != nil {
			continue // an expression (SYSMSG_SIZE) or an include guard
		}
		exp, ok := want[fields[1]]
		require.True(t, ok, "stub.h defines %s, which layout.go does not mirror", fields[1])
		require.Equal(t, exp, v, fields[1])
		seen[fields[1]] = true
	}
	require.Len(t, seen, len(want))
	// The control thread's assembly spells some addresses out: keep them in step.
	src, err := os.ReadFile("stub/stub.c")
	require.NoError(t, err)
	for _, addr := range []uint64{SysmsgBase + setupTenantFprog, SysmsgBase + setupControlFprog, SysmsgBase + sysmsgInfo, SysmsgBase + sysmsgCmd, SysmsgBase + sysmsgInfo + infoAck, SysmsgBase + sysmsgThreads} {
		require.Contains(t, string(src), "$0x"+strconv.FormatUint(addr, 16), "stub.c's assembly")
	}
}
