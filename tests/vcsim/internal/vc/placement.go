package vc

import (
	"sort"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// pickHost is gpusim's stand-in for DRS initial placement when a clone names a cluster's resource
// pool but no host: among the cluster's connected hosts outside maintenance mode, those where the
// VM's vGPUs would be admitted now, the one with the fewest registered vGPU VMs, then the fewest
// VMs, then by name. Without such a host (or without vGPUs) the host with the fewest VMs.
func (s *Sim) pickHost(ctx *simulator.Context, pool types.ManagedObjectReference, req farm.Request) *types.ManagedObjectReference {
	hosts := s.clusterHosts(ctx, pool)
	if len(hosts) == 0 {
		return nil
	}
	type cand struct {
		ref               types.ManagedObjectReference
		name              string
		fits              bool
		vgpuVMs, totalVMs int
	}
	var cands []cand
	for _, ref := range hosts {
		name := s.hostRefs[ref]
		info, err := s.Farm.Host(name)
		if err != nil || info.ConnectionState != farm.StateConnected || info.InMaintenance {
			continue
		}
		c := cand{ref: ref, name: name}
		if len(req.Profiles) > 0 {
			gpus, policy, _ := s.Farm.Candidates(name)
			_, err := farm.Place(s.Farm.Catalog(), gpus, req, policy, s.Farm.Rules())
			c.fits = err == nil
		}
		for _, vm := range s.vmsOnHost(name) {
			c.totalVMs++
			if len(vgpuProfiles(vm.Config.Hardware.Device)) > 0 {
				c.vgpuVMs++
			}
		}
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		return nil
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.fits != b.fits {
			return a.fits
		}
		if a.vgpuVMs != b.vgpuVMs {
			return a.vgpuVMs < b.vgpuVMs
		}
		if a.totalVMs != b.totalVMs {
			return a.totalVMs < b.totalVMs
		}
		return a.name < b.name
	})
	return &cands[0].ref
}

// clusterHosts returns the hosts of the cluster owning a resource pool (none for standalone hosts).
func (s *Sim) clusterHosts(ctx *simulator.Context, pool types.ManagedObjectReference) []types.ManagedObjectReference {
	rp, ok := ctx.Map.Get(pool).(*simulator.ResourcePool)
	if !ok {
		return nil
	}
	cluster, ok := ctx.Map.Get(rp.Owner).(*simulator.ClusterComputeResource)
	if !ok {
		return nil
	}
	return append([]types.ManagedObjectReference(nil), cluster.Host...)
}
