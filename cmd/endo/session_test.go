package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Sessions and process groups: getsid, setsid and setpgid with Linux's refusals, and an orphaned
// group with a stopped member getting SIGHUP and SIGCONT; each part of tenants/session.c prints
// what it saw, the same inside Endo as natively.
func TestSessionsMatchNative(t *testing.T) {
	requireModesMatchNative(t, "/bin/session", []modeCase{
		{"ids", []string{
			"child inherits session: 1, group: 1",
			"stat shows the new session: 1",
			"setsid: returns pid 1, session 1, group 1",
			"setsid again: EPERM",
			"setpgid of a session leader: EPERM",
			"setsid as a group leader: EPERM",
			"second child joins it: ok, pgid 1",
			"join a group that is not there: EPERM",
			"child in another session: EPERM",
			"other child into that session's group: EPERM",
			"a grandchild: ESRCH, same session 1",
			"child after exec: EACCES",
		}},
		{"orphan", []string{"grandchild stopped", "got SIGHUP", "continued", "not stopped by SIGTSTP"}},
	})
}

// busybox's setsid runs its program as the leader of a new session, as /proc shows.
func TestSessionSetsidApplet(t *testing.T) {
	link := filepath.Join(rootfs, "bin", "setsid")
	require.NoError(t, os.Symlink("busybox", link))
	defer os.Remove(link)
	script := `setsid sh -c 'read -r pid comm state ppid pgrp sid rest < /proc/$$/stat; [ "$sid" = $$ ] && [ "$pgrp" = $$ ] && echo session leader'; echo status $?`
	want := nativeWithProc(t, "sh", "-c", script)
	require.Equal(t, "session leader\nstatus 0\n", want.stdout)
	got := endo(t, "sh", "-c", script)
	require.Equal(t, want, got)
	requireNoStubs(t)
}
