package shim

import (
	"context"
	"fmt"

	"github.com/containerd/cgroups/v3"
	v1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	v2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/endovisor/endo/sandbox/control"
)

// metrics converts the sandbox's accounting of one container into the cgroup Metrics type that
// matches the host (CRI accepts only those), as if the container had a cgroup of its own.
func metrics(r control.StatsReply, unified bool) (*anypb.Any, error) {
	mem, limit := uint64(max(r.MemoryBytes, 0)), uint64(max(r.MemoryLimit, 0))
	cpu, pids := uint64(max(r.CPUNanos, 0)), uint64(max(r.Pids, 0))
	// Tenant memory is anonymous as far as the host is concerned: it all lives in the grant.
	var m any
	if unified {
		m = &v2.Metrics{
			Pids: &v2.PidsStat{Current: pids},
			CPU:  &v2.CPUStat{UsageUsec: cpu / 1000},
			Memory: &v2.MemoryStat{
				Usage:      mem,
				UsageLimit: limit,
				Anon:       mem,
			},
		}
	} else {
		m = &v1.Metrics{
			Pids: &v1.PidsStat{Current: pids},
			CPU:  &v1.CPUStat{Usage: &v1.CPUUsage{Total: cpu}},
			Memory: &v1.MemoryStat{
				RSS:                     mem,
				HierarchicalMemoryLimit: limit,
				Usage:                   &v1.MemoryEntry{Usage: mem, Limit: limit},
			},
		}
	}
	a, err := typeurl.MarshalAnyToProto(m)
	if err != nil {
		return nil, fmt.Errorf("marshal metrics: %w", err)
	}
	return a, nil
}

// Stats reports a container's metrics from the sandbox's own accounting.
func (s *Service) Stats(ctx context.Context, r *taskv3.StatsRequest) (*taskv3.StatsResponse, error) {
	s.mu.Lock()
	_, _, err := s.lookup(r.ID, "")
	sb := s.sb
	s.mu.Unlock()
	if err != nil {
		return nil, toGRPC(err)
	}
	var st control.StatsReply
	if sb != nil && sb.Alive() {
		if st, err = sb.client.Stats(ctx, r.ID); err != nil {
			return nil, toGRPC(fmt.Errorf("stats %s: %w", r.ID, err))
		}
	}
	a, err := metrics(st, cgroups.Mode() == cgroups.Unified)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &taskv3.StatsResponse{Stats: a}, nil
}
