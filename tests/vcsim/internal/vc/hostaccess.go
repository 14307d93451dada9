package vc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// The host managers govmomi's simulator leaves unimplemented (their morefs answer ManagedObjectNotFound
// there): HostImageConfigManager (the installed software packages, the vGPU Manager among them),
// HostServiceSystem (the SSH service, TSM-SSH) and HostAccessManager (lockdown mode). Backed by the farm's
// per-host Access, which the ESXi shell shares.

// setupAccess registers the three managers of a host and points its configManager at them.
func (s *Sim) setupAccess(name string, h *simulator.HostSystem) {
	ref := h.Self.Value
	img := &ImageConfigManager{sim: s, host: name}
	img.Self = types.ManagedObjectReference{Type: "HostImageConfigManager", Value: "imageConfigManager-" + ref}
	svc := &ServiceSystem{sim: s, host: name}
	svc.Self = types.ManagedObjectReference{Type: "HostServiceSystem", Value: "serviceSystem-" + ref}
	acc := &AccessManager{sim: s, host: name}
	acc.Self = types.ManagedObjectReference{Type: "HostAccessManager", Value: "hostAccessManager-" + ref}
	s.ctx.Map.Put(img)
	s.ctx.Map.Put(svc)
	s.ctx.Map.Put(acc)
	h.ConfigManager.ImageConfigManager = &img.Self
	h.ConfigManager.ServiceSystem = &svc.Self
	h.ConfigManager.HostAccessManager = &acc.Self
	s.access[name] = accessObjects{svc, acc}
}

type accessObjects struct {
	svc *ServiceSystem
	acc *AccessManager
}

// accessChanges are the host properties that follow the farm's Access (config.service, config.lockdownMode).
func accessChanges(h *simulator.HostSystem, a farm.Access) []types.PropertyChange {
	if h.Config == nil {
		return nil
	}
	return []types.PropertyChange{
		{Name: "config.service", Val: serviceInfo(h.Config.Service, a)},
		{Name: "config.lockdownMode", Val: types.HostLockdownMode(a.Lockdown)},
	}
}

// refreshAccess copies the farm's Access into the service system and access manager.
func (s *Sim) refreshAccess(ctx *simulator.Context, name string, a farm.Access) {
	objs, ok := s.access[name]
	if !ok {
		return
	}
	h := s.hosts[name]
	ctx.WithLock(objs.svc, func() {
		var base *types.HostServiceInfo
		if h.Config != nil {
			base = h.Config.Service
		}
		ctx.Map.Update(ctx, objs.svc, []types.PropertyChange{{Name: "serviceInfo", Val: *serviceInfo(base, a)}})
	})
	ctx.WithLock(objs.acc, func() {
		ctx.Map.Update(ctx, objs.acc, []types.PropertyChange{{Name: "lockdownMode", Val: types.HostLockdownMode(a.Lockdown)}})
	})
}

// locked runs a farm change from a handler that holds one of the host's object locks: the refresh the
// change triggers runs with the handler's context afterwards (hold/release), not on a fresh one that would
// wait for that lock.
func (s *Sim) locked(ctx *simulator.Context, host string, change func() error) error {
	s.hold(host)
	err := change()
	s.release(ctx, host)
	return err
}

// accessHost is the host of one of the access managers; ok is false for any other object.
func accessHost(obj mo.Reference) (string, bool) {
	switch o := obj.(type) {
	case *ImageConfigManager:
		return o.host, true
	case *ServiceSystem:
		return o.host, true
	case *AccessManager:
		return o.host, true
	}
	return "", false
}

// accessRequest is the body of POST /gpusim/hosts/{name}/access: the fields given are changed.
type accessRequest struct {
	SSHRunning         *bool     `json:"ssh_running"`
	SSHPolicy          *string   `json:"ssh_policy"`
	Lockdown           *string   `json:"lockdown"`
	LockdownExceptions *[]string `json:"lockdown_exceptions"`
	VgpuManager        *string   `json:"vgpu_manager"` // "" or "none" removes it
}

// setAccess changes a host's SSH service, lockdown mode or vGPU Manager through the control endpoint.
func (s *Sim) setAccess(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req accessRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		WriteError(w, http.StatusBadRequest, "access: %v", err)
		return
	}
	if err := s.applyAccess(name, req); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	a, _ := s.Farm.Access(name)
	WriteJSON(w, http.StatusOK, map[string]any{"host": name, "access": a})
}

func (s *Sim) applyAccess(name string, req accessRequest) error {
	a, err := s.Farm.Access(name)
	if err != nil {
		return err
	}
	if req.SSHRunning != nil {
		err = errors.Join(err, s.Farm.SetSSHRunning(name, *req.SSHRunning))
	}
	if req.SSHPolicy != nil {
		err = errors.Join(err, s.Farm.SetSSHPolicy(name, *req.SSHPolicy))
	}
	if req.Lockdown != nil || req.LockdownExceptions != nil {
		mode, exceptions := a.Lockdown, a.LockdownExceptions
		if req.Lockdown != nil {
			mode = *req.Lockdown
		}
		if req.LockdownExceptions != nil {
			exceptions = append([]string{}, *req.LockdownExceptions...)
		}
		err = errors.Join(err, s.Farm.SetLockdown(name, mode, exceptions))
	}
	if req.VgpuManager != nil {
		version := *req.VgpuManager
		if version == farm.NoManager {
			version = ""
		}
		err = errors.Join(err, s.Farm.SetManager(name, version))
	}
	return err
}

// addRDMADevices gives a host n more RoCE v2 RDMA devices (vmrdmaN.. after those it has), each paired with an
// uplink, active.
func (s *Sim) addRDMADevices(name string, n int) {
	h := s.hosts[name]
	if n == 0 || h.Config == nil || h.Config.Network == nil {
		return
	}
	network := *h.Config.Network
	for i := len(network.RdmaDevice); i < len(h.Config.Network.RdmaDevice)+n; i++ {
		network.RdmaDevice = append(network.RdmaDevice, types.HostRdmaDevice{
			Key: fmt.Sprintf("key-vim.host.RdmaDevice-vmrdma%d", i), Device: fmt.Sprintf("vmrdma%d", i),
			Driver: "nmlx5_rdma", Description: "MT2910 Family [ConnectX-7]",
			Backing:        &types.HostRdmaDevicePnicBacking{PairedUplink: fmt.Sprintf("key-vim.host.PhysicalNic-vmnic%d", i+2)},
			ConnectionInfo: types.HostRdmaDeviceConnectionInfo{State: "active", Mtu: 4096, SpeedInMbps: 200000},
			Capability:     types.HostRdmaDeviceCapability{RoceV2Capable: true},
		})
	}
	h.Config.Network = &network
}
