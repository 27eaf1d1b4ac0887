//go:build !race

package memgrant

// faultSlack is the extra page faults a touch loop may take: stack growth, the runtime's own,
// the host moving pages (9, then 28 were seen on CI runs beside a benchmark; a fault a page would
// be thousands).
const faultSlack = 64
