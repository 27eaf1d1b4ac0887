// Command containerd-shim-endo-v1 is Endo's containerd shim (runtime io.containerd.endo.v1).
// All of its logic is in package shim; this only hands control to containerd's shim runner and
// must never grow logic of its own.
package main

import (
	"context"

	cshim "github.com/containerd/containerd/v2/pkg/shim"

	"github.com/endovisor/endo/shim"
)

func main() {
	cshim.RunShim(context.Background(), shim.NewManager(shim.RuntimeName))
}
