//go:build !race

package memgrant

// faultSlack is the extra page faults a touch loop may take (stack growth and the like).
const faultSlack = 8
