package vc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// The host managers govmomi's simulator leaves unimplemented (their morefs answer ManagedObjectNotFound
// there): HostImageConfigManager (the installed software packages, the vGPU Manager among them),
// HostServiceSystem (the SSH service, TSM-SSH) and HostAccessManager (lockdown mode). Backed by the farm's
// per-host Access, which the ESXi shell shares.

// sshServiceKey is the SSH service's key in HostServiceInfo (the vSphere Client's "SSH").
const sshServiceKey = "TSM-SSH"

// ImageConfigManager is a host's HostImageConfigManager.
type ImageConfigManager struct {
	mo.HostImageConfigManager
	sim  *Sim
	host string
}

// ServiceSystem is a host's HostServiceSystem.
type ServiceSystem struct {
	mo.HostServiceSystem
	sim  *Sim
	host string
}

// AccessManager is a host's HostAccessManager.
type AccessManager struct {
	mo.HostAccessManager
	sim  *Sim
	host string
}

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

// serviceInfo is the host's service list (vcsim's captured ESXi list) with TSM-SSH as the farm says.
func serviceInfo(base *types.HostServiceInfo, a farm.Access) *types.HostServiceInfo {
	out := &types.HostServiceInfo{}
	found := false
	if base != nil {
		for _, svc := range base.Service {
			if svc.Key == sshServiceKey {
				svc.Running, svc.Policy, found = a.SSHRunning, a.SSHPolicy, true
			}
			out.Service = append(out.Service, svc)
		}
	}
	if !found {
		out.Service = append(out.Service, types.HostService{Key: sshServiceKey, Label: "SSH", Running: a.SSHRunning, Policy: a.SSHPolicy})
	}
	return out
}

func (m *ServiceSystem) serviceFault(id string) *soap.Fault {
	if id == sshServiceKey {
		return nil
	}
	if info, err := m.sim.Farm.Access(m.host); err == nil {
		for _, svc := range serviceInfo(m.sim.hosts[m.host].Config.Service, info).Service {
			if svc.Key == id {
				return simulator.Fault("gpusim models only the SSH service ("+sshServiceKey+")", &types.NotSupported{})
			}
		}
	}
	return simulator.Fault("no service "+id, &types.NotFound{})
}

// StartService starts the SSH service (the ESXi shell then accepts connections).
func (m *ServiceSystem) StartService(ctx *simulator.Context, req *types.StartService) soap.HasFault {
	if f := m.serviceFault(req.Id); f != nil {
		return &methods.StartServiceBody{Fault_: f}
	}
	if err := m.sim.locked(ctx, m.host, func() error { return m.sim.Farm.SetSSHRunning(m.host, true) }); err != nil {
		return &methods.StartServiceBody{Fault_: farmFault(err)}
	}
	return &methods.StartServiceBody{Res: &types.StartServiceResponse{}}
}

// StopService stops the SSH service (the ESXi shell then refuses connections).
func (m *ServiceSystem) StopService(ctx *simulator.Context, req *types.StopService) soap.HasFault {
	if f := m.serviceFault(req.Id); f != nil {
		return &methods.StopServiceBody{Fault_: f}
	}
	if err := m.sim.locked(ctx, m.host, func() error { return m.sim.Farm.SetSSHRunning(m.host, false) }); err != nil {
		return &methods.StopServiceBody{Fault_: farmFault(err)}
	}
	return &methods.StopServiceBody{Res: &types.StopServiceResponse{}}
}

// UpdateServicePolicy sets the SSH service's startup policy.
func (m *ServiceSystem) UpdateServicePolicy(ctx *simulator.Context, req *types.UpdateServicePolicy) soap.HasFault {
	if f := m.serviceFault(req.Id); f != nil {
		return &methods.UpdateServicePolicyBody{Fault_: f}
	}
	if err := m.sim.locked(ctx, m.host, func() error { return m.sim.Farm.SetSSHPolicy(m.host, req.Policy) }); err != nil {
		return &methods.UpdateServicePolicyBody{Fault_: farmFault(err)}
	}
	return &methods.UpdateServicePolicyBody{Res: &types.UpdateServicePolicyResponse{}}
}

// RefreshServices re-reads the service list.
func (m *ServiceSystem) RefreshServices(ctx *simulator.Context, req *types.RefreshServices) soap.HasFault {
	if a, err := m.sim.Farm.Access(m.host); err == nil {
		m.sim.refreshAccess(ctx, m.host, a)
	}
	return &methods.RefreshServicesBody{Res: &types.RefreshServicesResponse{}}
}

// QueryLockdownExceptions lists the users that keep their access in lockdown mode.
func (m *AccessManager) QueryLockdownExceptions(ctx *simulator.Context, req *types.QueryLockdownExceptions) soap.HasFault {
	a, err := m.sim.Farm.Access(m.host)
	if err != nil {
		return &methods.QueryLockdownExceptionsBody{Fault_: farmFault(err)}
	}
	return &methods.QueryLockdownExceptionsBody{Res: &types.QueryLockdownExceptionsResponse{Returnval: a.LockdownExceptions}}
}

// UpdateLockdownExceptions replaces the exception users.
func (m *AccessManager) UpdateLockdownExceptions(ctx *simulator.Context, req *types.UpdateLockdownExceptions) soap.HasFault {
	a, err := m.sim.Farm.Access(m.host)
	if err == nil {
		err = m.sim.locked(ctx, m.host, func() error {
			return m.sim.Farm.SetLockdown(m.host, a.Lockdown, append([]string{}, req.Users...))
		})
	}
	if err != nil {
		return &methods.UpdateLockdownExceptionsBody{Fault_: farmFault(err)}
	}
	return &methods.UpdateLockdownExceptionsBody{Res: &types.UpdateLockdownExceptionsResponse{}}
}

// ChangeLockdownMode sets the lockdown mode.
func (m *AccessManager) ChangeLockdownMode(ctx *simulator.Context, req *types.ChangeLockdownMode) soap.HasFault {
	if err := m.sim.locked(ctx, m.host, func() error { return m.sim.Farm.SetLockdown(m.host, string(req.Mode), nil) }); err != nil {
		return &methods.ChangeLockdownModeBody{Fault_: farmFault(err)}
	}
	return &methods.ChangeLockdownModeBody{Res: &types.ChangeLockdownModeResponse{}}
}

// Software packages as ESXi 8 lists them; the NVIDIA ones follow the names of NVIDIA's vGPU for Compute
// (NVIDIA AI Enterprise) host driver component NVD-AIE-800 for ESXi 8.0.
const (
	managerVIB   = "NVD-AIE_ESXi_8.0.0_Driver"
	daemonVIB    = "nvdgpumgmtdaemon"
	vibSuffix    = "-1OEM.800.1.0.20613240"
	esxBaseBuild = "8.0.3-0.0.24022510"
)

// packages is what the host has installed: esx-base and, with a vGPU Manager installed, NVIDIA's driver and
// daemon (an install shows here at once and runs from the next reboot).
func packages(a farm.Access) []types.SoftwarePackage {
	created := time.Date(2024, 6, 25, 0, 0, 0, 0, time.UTC)
	out := []types.SoftwarePackage{{
		Name: "esx-base", Version: esxBaseBuild, Type: "bootbank", Vendor: "VMware", AcceptanceLevel: "vmware_certified",
		Summary: "ESXi base system", Description: "This VIB contains all of the base functionality of vSphere ESXi.",
		CreationDate: &created,
	}}
	if m := a.Installed; m != "" { // the package list: what is installed (it runs from the next reboot)
		out = append(out,
			types.SoftwarePackage{Name: managerVIB, Version: m + vibSuffix, Type: "bootbank", Vendor: "NVD",
				AcceptanceLevel: "vmware_accepted", Summary: "NVIDIA AI Enterprise vGPU driver for VMWare ESX-8.0.0",
				Description: "NVIDIA vGPU Manager " + m, CreationDate: &created},
			types.SoftwarePackage{Name: daemonVIB, Version: m + "-1OEM.700.1.0.15843807", Type: "bootbank",
				Vendor: "NVD", AcceptanceLevel: "vmware_accepted", Summary: "NVIDIA GPU management daemon",
				Description: "nvdGpuMgmtDaemon", CreationDate: &created})
	}
	return out
}

// FetchSoftwarePackages lists the installed packages (vSphere API 6.5+; privilege Host.Config.Image).
func (m *ImageConfigManager) FetchSoftwarePackages(ctx *simulator.Context, req *types.FetchSoftwarePackages) soap.HasFault {
	a, err := m.sim.Farm.Access(m.host)
	if err != nil {
		return &methods.FetchSoftwarePackagesBody{Fault_: farmFault(err)}
	}
	return &methods.FetchSoftwarePackagesBody{Res: &types.FetchSoftwarePackagesResponse{Returnval: packages(a)}}
}

// HostImageConfigGetAcceptance is the host's image acceptance level.
func (m *ImageConfigManager) HostImageConfigGetAcceptance(ctx *simulator.Context, req *types.HostImageConfigGetAcceptance) soap.HasFault {
	return &methods.HostImageConfigGetAcceptanceBody{Res: &types.HostImageConfigGetAcceptanceResponse{Returnval: "partner"}}
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

// vibLine is how `esxcli software vib list` prints a package (the ESXi shell uses it).
func vibLine(p types.SoftwarePackage) []string {
	vendor := p.Vendor
	level := map[string]string{"vmware_certified": "VMwareCertified", "vmware_accepted": "VMwareAccepted",
		"partner": "PartnerSupported", "community": "CommunitySupported"}[p.AcceptanceLevel]
	return []string{p.Name, p.Version, vendor, level, p.CreationDate.Format("2006-01-02"), "host"}
}

// VIBLines are the rows of `esxcli software vib list` for a host's packages.
func VIBLines(a farm.Access) [][]string {
	var out [][]string
	for _, p := range packages(a) {
		out = append(out, vibLine(p))
	}
	return out
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
