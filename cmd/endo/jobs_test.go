package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// modeCase is one mode of a tenant program that prints what it saw.
type modeCase struct {
	test string
	must []string // lines the native run prints too, so that a broken comparison cannot pass
}

// requireModesMatchNative runs prog in each case's mode natively (with /proc) and in Endo: the
// outputs must be the same, and the native one must hold the case's lines.
func requireModesMatchNative(t *testing.T, prog string, cases []modeCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.test, func(t *testing.T) {
			want := nativeWithProc(t, prog, c.test)
			for _, line := range c.must {
				require.Contains(t, want.stdout, line+"\n")
			}
			got := endo(t, prog, c.test)
			require.Equal(t, want, got)
		})
	}
	requireNoStubs(t)
}

// Job control, waitid, poll and select: each part of tenants/jobs.c prints what it saw, the same
// inside Endo as natively.
func TestJobControlMatchesNative(t *testing.T) {
	requireModesMatchNative(t, "/bin/jobs", []modeCase{
		{"stop", []string{"after SIGSTOP: stopped by 19 (status 0x137f)", "state T", "after SIGCONT: continued (status 0xffff)", "after SIGKILL: killed by 9", "first SIGCHLD: code 5 status 19; more: 1"}},
		{"tstp", []string{"with a handler: exited 3", "without one: stopped by 20 (status 0x147f)", "then SIGCONT: killed by 15", "continued: exited 4"}},
		{"threads", []string{"ticks while stopped: 0", "ticks after continue: 1"}},
		{"waitid", []string{"stopped, nowait: ret 0 signo 17 code 5 pid child status 19", "continued: ret 0 signo 17 code 6 pid child status 18",
			"no children: ret -1 errno No child processes signo 0 code 0 pid 0 status 0"}},
		{"poll", []string{"signal: -1 Interrupted system call handled 1", "writer closed: 1 revents 0x10", "bad fd: 1 revents 0x20"}},
		{"select", []string{"ready: 2 read 1 0 write 1", "bad fd: -1 Bad file descriptor"}},
		{"ppoll", []string{"blocked by the wait's mask: 1 revents 0x1 handled 1", "let in by the wait's mask: -1 Interrupted system call handled 1 blocked after 1"}},
	})
}

// busybox sh stops, continues and kills a background job as natively, and /proc shows it
// stopped. Whether ash reports a killed job ("Terminated") depends on when it reaps it, natively
// too: the scripts' stderr is not compared.
func TestShellJobControl(t *testing.T) {
	for name, script := range map[string]string{
		"stop-cont-kill": `sleep 10 & p=$!; kill -STOP $p; kill -CONT $p; kill $p; wait $p; echo status $?`,
		"state":          `sleep 10 & p=$!; kill -STOP $p; sleep 0.1; grep State /proc/$p/status; kill -CONT $p; sleep 0.1; grep State /proc/$p/status; kill $p; wait`,
		"kill-stopped":   `sleep 10 & p=$!; kill -STOP $p; sleep 0.1; kill -KILL $p; wait $p; echo status $?`,
		// Natively the stop is only certain once the child has run: hence the sleeps.
		"term-stopped": `sleep 10 & p=$!; kill -STOP $p; sleep 0.1; kill $p; sleep 0.1; kill -0 $p && echo still there; kill -CONT $p; wait $p; echo status $?`,
	} {
		t.Run(name, func(t *testing.T) {
			script = "exec 2>/dev/null; " + script
			want := nativeWithProc(t, "sh", "-c", script)
			got := endo(t, "sh", "-c", script)
			require.Equal(t, want, got)
		})
	}
	requireNoStubs(t)
}

// /proc/<pid>/environ is the environment exec gave the process, NUL-separated.
func TestProcEnviron(t *testing.T) {
	for _, args := range [][]string{
		{"env", "-i", "A=1", "B=two words", "cat", "/proc/self/environ"},
		{"env", "-i", "cat", "/proc/self/environ"},
	} {
		want := result{strings.Join(args[2:len(args)-2], "\x00"), "", 0}
		if len(args) > 4 {
			want.stdout += "\x00"
		}
		got := endo(t, args...)
		require.Equal(t, want, got, args)
	}
	// The shell's child sees its own exec's environment: the shell's exports (busybox adds
	// PATH, PWD and SHLVL) and its own assignment.
	got := endo(t, "env", "-i", "X=1", "sh", "-c", "Y=2 cat /proc/self/environ | tr '\\0' '\\n' | sort")
	require.Equal(t, result{"PATH=/sbin:/usr/sbin:/bin:/usr/bin\nPWD=/\nSHLVL=1\nX=1\nY=2\n", "", 0}, got)
}

// nativeWithProc runs a program natively in the test rootfs, as native does, with a /proc: the
// host's, mounted in a mount namespace of the run's own (the rootfs has none).
func nativeWithProc(t *testing.T, args ...string) result {
	t.Helper()
	dir := filepath.Join(rootfs, "proc")
	require.NoError(t, os.Mkdir(dir, 0o555))
	defer os.Remove(dir)
	script := `mount -t proc proc "$1/proc" && exec chroot "$@"`
	return runCmd(t, "", "unshare", append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", rootfs}, args...)...)
}

// A stopped process runs nothing, also when its threads were waiting for a vCPU as the stop came
// (were such a thread resumed by whoever hands it a vCPU rather than by its own carrier, the stop
// would have to kick it too): its stub's host CPU time stands still while it is stopped.
func TestStoppedBusyThreadsRunNothing(t *testing.T) {
	run := startPaced(t, endoBin, "run", "--cpus", "1", "--rootfs", rootfs, "--", "sh", "-c",
		`schedbench fair 3 30 & p=$!; sleep 0.5; kill -STOP $p; echo stopped; read x; kill -KILL $p; wait $p; echo status $?`)
	run.expect(t, "stopped")
	cpu := func() (ticks int) {
		for _, dir := range stubsOf(run.cmd.Process.Pid) {
			b, err := os.ReadFile(filepath.Join(dir, "stat"))
			if err != nil {
				continue
			}
			f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
			u, _ := strconv.Atoi(f[11]) // utime and stime: fields 14 and 15 of stat
			s, _ := strconv.Atoi(f[12])
			ticks += u + s
		}
		return ticks
	}
	time.Sleep(200 * time.Millisecond)
	before := cpu()
	time.Sleep(time.Second)
	ran := cpu() - before
	_, err := run.stdin.Write([]byte("go\n"))
	require.NoError(t, err)
	run.expect(t, "status 137")
	require.NoError(t, run.cmd.Wait())
	require.Less(t, ran, 5, "the stopped process's stubs ran %d ticks in a second", ran)
	requireNoStubs(t)
}
