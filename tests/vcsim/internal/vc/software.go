package vc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// The vSphere side of host software (internal/farm/software.go): the farm file's `software:` section, the
// control routes, the guest driver fault at power-on and vMotion, and a host's remediation as vSphere Lifecycle
// Manager does it (internal/vapi/lifecycle.go drives it over REST).

// setupSoftware loads the farm file's software section with the release table beside the catalogue.
func (s *Sim) setupSoftware() error {
	releases, err := farm.LoadReleasesBeside(s.Farm.Catalog())
	if err != nil {
		return err
	}
	spec := farm.SoftwareSpec{}
	if s.Spec.Software != nil {
		spec = *s.Spec.Software
	}
	return s.Farm.SetSoftware(spec, releases)
}

// validateSoftware checks that the software section names known clusters.
func (s *Spec) validateSoftware() error {
	if s.Software == nil {
		return nil
	}
	for _, c := range s.Software.ImageClusters {
		if !slices.ContainsFunc(s.Clusters, func(cs ClusterSpec) bool { return cs.Name == c }) {
			return fmt.Errorf("software.image_clusters: unknown cluster %q", c)
		}
	}
	return nil
}

// guestDriverFault is vCenter's answer when a VM's vGPU cannot start on the host (farm.ErrGuestDriver).
func (s *Sim) guestDriverFault(err error) types.BaseMethodFault {
	if !errors.Is(err, farm.ErrGuestDriver) {
		return nil
	}
	return s.messages.With(fault.GenericVMConfig(err.Error()), err.Error())
}

// Remediate does to one host what vSphere Lifecycle Manager's apply does: maintenance mode when the host is not
// in it (refused while VMs run: vgpuctl empties hosts itself), the component installed from the depot, a reboot
// when the install asks for one, and the host out of maintenance mode again when remediation put it there. It
// fails when the host does not come back within timeout.
func (s *Sim) Remediate(host, location, component string, timeout time.Duration) error {
	info, err := s.Farm.Host(host)
	if err != nil {
		return err
	}
	if info.ConnectionState != farm.StateConnected {
		return fmt.Errorf("host %s is %s", host, info.ConnectionState)
	}
	entered := false
	if !info.InMaintenance {
		if n := len(s.runningOn(host)); n > 0 {
			return fmt.Errorf("host %s cannot enter maintenance mode: %d powered-on virtual machines could not be evacuated", host, n)
		}
		if err := s.Farm.SetMaintenance(host, true); err != nil {
			return err
		}
		entered = true
	}
	res, err := s.Farm.InstallComponents(host, location, []string{component})
	if err != nil {
		return err
	}
	if res.RebootRequired {
		if err := s.rebootAndWait(host, timeout); err != nil {
			return err
		}
	}
	if entered {
		return s.Farm.SetMaintenance(host, false)
	}
	return nil
}

// rebootAndWait reboots a host in maintenance mode as RebootHost_Task does and waits until it is back.
func (s *Sim) rebootAndWait(host string, timeout time.Duration) error {
	if err := s.Farm.BeginReboot(host); err != nil {
		return err
	}
	sleep(s.rebootDur)
	if err := s.Farm.EndReboot(host); err != nil {
		return err
	}
	s.touchBootTime(host)
	deadline := time.Now().Add(timeout)
	for !s.Farm.Reachable(host) {
		if time.Now().After(deadline) {
			return fmt.Errorf("host %s did not come back from its reboot within %s", host, timeout)
		}
		sleep(100 * time.Millisecond)
	}
	return nil
}

// touchBootTime sets a host's runtime.bootTime to now (it rebooted).
func (s *Sim) touchBootTime(host string) {
	hs := s.hosts[host]
	if hs == nil {
		return
	}
	now := time.Now()
	c := &simulator.Context{Context: context.Background(), Map: s.ctx.Map}
	c.WithLock(hs, func() {
		c.Map.Update(c, hs, []types.PropertyChange{{Name: "runtime.bootTime", Val: &now}})
	})
}

// runningOn lists the names of the powered-on (or suspended) VMs of a host.
func (s *Sim) runningOn(host string) []string {
	var out []string
	for _, vm := range s.vmsOnHost(host) {
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
			out = append(out, vm.Name)
		}
	}
	return out
}

// registerSoftwareControl adds the software routes to the control endpoint.
func (s *Sim) registerSoftwareControl() {
	s.HandleControl("GET /gpusim/software", func(w http.ResponseWriter, r *http.Request) {
		hosts := map[string]any{}
		for _, h := range s.Farm.Hosts() {
			name, version, _ := s.Farm.InstalledComponent(h.Name)
			hosts[h.Name] = map[string]any{"running": h.Access.Manager, "installed": h.Access.Installed,
				"component": name, "componentVersion": version, "cluster": h.Cluster}
		}
		WriteJSON(w, http.StatusOK, map[string]any{"depots": s.Farm.Depots(), "hosts": hosts,
			"guestDrivers": s.Farm.GuestDrivers(), "incidents": s.Farm.Incidents()})
	})
	s.HandleControl("DELETE /gpusim/software/incidents", func(w http.ResponseWriter, r *http.Request) {
		s.Farm.ClearIncidents()
		WriteJSON(w, http.StatusOK, map[string]any{"cleared": true})
	})
	s.HandleControl("POST /gpusim/software/depots", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Location  string `json:"location"`
			Reachable bool   `json:"reachable"`
		}
		if err := DecodeJSON(r, &req); err != nil {
			WriteError(w, http.StatusBadRequest, "%v", err)
			return
		}
		if err := s.Farm.SetDepotReachable(req.Location, req.Reachable); err != nil {
			WriteError(w, http.StatusBadRequest, "%v", err)
			return
		}
		WriteJSON(w, http.StatusOK, map[string]any{"location": req.Location, "reachable": req.Reachable})
	})
	s.HandleControl("POST /gpusim/vms/{name}/guest-driver", s.setGuestDriver)
	s.HandleControl("POST /gpusim/hosts/{name}/remediation-fault", s.armRemediationFault)
	s.HandleControl("DELETE /gpusim/hosts/{name}/remediation-fault", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Farm.SetRemediationFault(r.PathValue("name"), nil); err != nil {
			WriteError(w, http.StatusBadRequest, "%v", err)
			return
		}
		WriteJSON(w, http.StatusOK, map[string]any{"host": r.PathValue("name"), "cleared": true})
	})
}

// setGuestDriver records the guest driver a VM reports: `{"version": "580.65.06"}` ("" none).
func (s *Sim) setGuestDriver(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ref, ok := s.ResolveObject(name)
	vm, isVM := s.vmObject(ref)
	if !ok || !isVM {
		WriteError(w, http.StatusBadRequest, "unknown VM %q", name)
		return
	}
	var req struct {
		Version string `json:"version"`
	}
	if err := DecodeJSON(r, &req); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if req.Version != "" && farm.DriverVersion(req.Version) != req.Version {
		WriteError(w, http.StatusBadRequest, "%q is not a driver version", req.Version)
		return
	}
	s.Farm.SetGuestDriver(vm.Name, req.Version)
	WriteJSON(w, http.StatusOK, map[string]any{"vm": vm.Name, "version": req.Version})
}

// armRemediationFault: `{"kind": "fail"|"stay-down", "count": 1, "message": "..."}`.
func (s *Sim) armRemediationFault(w http.ResponseWriter, r *http.Request) {
	var fault farm.RemediationFault
	if err := DecodeJSON(r, &fault); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if fault.Count == 0 {
		fault.Count = 1
	}
	if err := s.Farm.SetRemediationFault(r.PathValue("name"), &fault); err != nil {
		WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"host": r.PathValue("name"), "fault": fault})
}
