package memgrant

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrExhausted reports that the grant has no free frame left. It wraps unix.ENOMEM,
// so errors.Is(err, unix.ENOMEM) holds for it.
var ErrExhausted = fmt.Errorf("memgrant: grant exhausted: %w", unix.ENOMEM)

// errf builds an error that carries context and wraps errno, so that callers can map
// it to the system call's return value with errors.Is / errors.As.
func errf(errno unix.Errno, format string, args ...any) error {
	return fmt.Errorf("memgrant: %s: %w", fmt.Sprintf(format, args...), errno)
}
