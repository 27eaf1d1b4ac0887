// Command mkimage writes the integration tests' busybox OCI image archive
// (see package image). It only reads host files; it never fetches anything.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/endovisor/endo/integration/image"
)

func main() {
	out := flag.String("o", "", "output OCI archive (.tar)")
	busybox := flag.String("busybox", image.DefaultBusybox, "static busybox binary to put at /bin/busybox")
	name := flag.String("name", image.Name, "image reference")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: mkimage -o FILE.tar [-busybox PATH] [-name REF]")
		os.Exit(2)
	}
	if err := image.WriteFile(*out, image.Options{Busybox: *busybox, Name: *name}); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}
