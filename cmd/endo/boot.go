package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/endovisor/endo/sandbox"
)

// bootCommand runs `endo boot`, the pod sandbox the shim starts; it reports false for an
// unknown command.
func bootCommand(cmd string, args []string) bool {
	if cmd != "boot" {
		return false
	}
	opts, err := sandbox.ParseBootFlags(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "endo boot:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := sandbox.Boot(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "endo boot:", err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}
