//go:build !race

package memgrant

// faultSlack is the extra page faults a touch loop may take: stack growth, the runtime's own,
// the host moving a page (9 were seen once on a fresh CI run; a fault a page would be thousands).
const faultSlack = 16
