//go:build race

package memgrant

// faultSlack is the extra page faults a touch loop may take: the race detector faults
// in its own shadow memory for the addresses it watches.
const faultSlack = 64
