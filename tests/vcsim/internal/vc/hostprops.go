package vc

import (
	"context"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// refreshHost copies the farm's view of a host into the simulator objects under their object locks
// (one at a time, host then graphics manager). ctx is the caller's simulator context when it may hold
// those locks (the locks are reentrant per context); nil means a fresh context.
func (s *Sim) refreshHost(ctx *simulator.Context, name string) {
	h, ok := s.hosts[name]
	if !ok {
		return
	}
	if ctx == nil {
		ctx = &simulator.Context{Context: context.Background(), Map: s.ctx.Map}
	}
	ctx.WithLock(h, func() {
		info, err := s.Farm.Host(name)
		if err != nil {
			return
		}
		v := s.viewOf(info)
		state := types.HostSystemConnectionStateConnected
		if info.ConnectionState != farm.StateConnected {
			state = types.HostSystemConnectionStateNotResponding
		}
		changes := []types.PropertyChange{
			{Name: "runtime.connectionState", Val: state},
			{Name: "runtime.inMaintenanceMode", Val: info.InMaintenance},
		}
		if h.Config != nil {
			changes = append(changes,
				types.PropertyChange{Name: "config.graphicsInfo", Val: v.graphicsInfo},
				types.PropertyChange{Name: "config.graphicsConfig", Val: v.config},
				types.PropertyChange{Name: "config.sharedPassthruGpuTypes", Val: v.gpuTypes},
				types.PropertyChange{Name: "config.sharedGpuCapabilities", Val: v.caps},
				types.PropertyChange{Name: "config.pciPassthruInfo", Val: s.passthruInfo(name)})
			changes = append(changes, accessChanges(h, info.Access)...)
		}
		ctx.Map.Update(ctx, h, changes)
		if h.Summary.Runtime != nil && h.Summary.Runtime != &h.Runtime {
			h.Summary.Runtime.ConnectionState = state
			h.Summary.Runtime.InMaintenanceMode = info.InMaintenance
		}
	})
	if info, err := s.Farm.Host(name); err == nil {
		s.refreshAccess(ctx, name, info.Access)
	}
	if ps := s.pci[name]; ps != nil {
		ctx.WithLock(ps, func() { ps.PciPassthruInfo = s.passthruInfo(name) })
	}
	gm := s.gm[name]
	if gm == nil {
		return
	}
	ctx.WithLock(gm, func() {
		info, err := s.Farm.Host(name)
		if err != nil {
			return
		}
		v := s.viewOf(info)
		ctx.Map.Update(ctx, gm, []types.PropertyChange{
			{Name: "graphicsInfo", Val: v.graphicsInfo},
			{Name: "graphicsConfig", Val: v.config},
			{Name: "sharedPassthruGpuTypes", Val: v.gpuTypes},
			{Name: "sharedGpuCapabilities", Val: v.caps},
		})
	})
}

// onFarmEvent refreshes a host after a farm change. While a SOAP handler that holds the host's or
// its graphics manager's lock changes the farm (hold/release), the refresh is left to that handler.
func (s *Sim) onFarmEvent(e farm.Event) {
	s.busyMu.Lock()
	if s.busy[e.Host] > 0 {
		s.dirty[e.Host] = true
		s.busyMu.Unlock()
		return
	}
	s.busyMu.Unlock()
	s.refreshHost(nil, e.Host)
}

// hold defers event refreshes of a host to release (for handlers holding the host's locks).
func (s *Sim) hold(host string) {
	s.busyMu.Lock()
	s.busy[host]++
	s.busyMu.Unlock()
}

// release ends hold and refreshes the host with the handler's context.
func (s *Sim) release(ctx *simulator.Context, host string) {
	s.busyMu.Lock()
	s.busy[host]--
	delete(s.dirty, host)
	s.busyMu.Unlock()
	s.refreshHost(ctx, host)
}
