package integration

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/endovisor/endo/integration/harness"
)

// BenchmarkContainerStart times `ctr run --rm ... true` (start, first exit, delete) with the
// Endo shim and with containerd's own runc shim, interleaved in the same run; the ratio is the
// figure that means something here. `make bench` runs it.
func BenchmarkContainerStart(b *testing.B) {
	c := harness.Start(b, harness.Options{})
	img := c.ImportImage(b)
	runtimes := []struct{ name, runtime string }{
		{"runc", harness.RuntimeRunc},
		{"endo", harness.RuntimeEndo},
	}
	times := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, r := range runtimes {
			id := fmt.Sprintf("bench-%s-%d", r.name, i)
			t0 := time.Now()
			if _, stderr, err := c.Ctr("run", "--rm", "--runtime", r.runtime, img, id, "true"); err != nil {
				b.Fatalf("%s: %v: %s", r.name, err, stderr)
			}
			times[r.name] = append(times[r.name], time.Since(t0))
		}
	}
	b.StopTimer()
	med := func(ds []time.Duration) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	runc, endo := med(times["runc"]), med(times["endo"])
	b.ReportMetric(float64(runc.Milliseconds()), "runc-ms")
	b.ReportMetric(float64(endo.Milliseconds()), "endo-ms")
	b.ReportMetric(float64(endo)/float64(runc), "endo/runc")
}
