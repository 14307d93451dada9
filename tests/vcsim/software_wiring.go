package main

// Wiring of host software (internal/farm/software.go) into the ESXi shell: the farm-backed
// esxsh.SoftwareBackend (depots) and the running vGPUs with their guest drivers in the host's view; installs are
// one of Apply's changes (esxsh_wiring.go).

import (
	"errors"
	"fmt"
	"strings"

	"gpusim/internal/esxsh"
	"gpusim/internal/farm"
)

// DepotComponents lists a depot's components; an unknown or unreachable depot is esxcli's download error.
func (b *farmBackend) DepotComponents(depot string) ([]esxsh.DepotComponent, error) {
	d, err := b.farm.Depot(depot)
	if err != nil {
		return nil, depotError(depot, err)
	}
	var out []esxsh.DepotComponent
	for _, c := range d.Components {
		out = append(out, esxsh.DepotComponent{Name: c.Name, Version: c.Version, Vendor: c.Vendor,
			AcceptanceLevel: "VMwareAccepted", ReleaseDate: "2025-08-12"})
	}
	return out, nil
}

// install installs components of a depot on a host in maintenance mode (Apply's InstallChange).
func (b *farmBackend) install(host, depot string, names []string) (esxsh.InstallResult, error) {
	res, err := b.farm.InstallComponents(host, depot, names)
	switch {
	case errors.Is(err, farm.ErrUnreachable), errors.Is(err, farm.ErrNotFound) && strings.HasPrefix(err.Error(), "no depot"):
		return esxsh.InstallResult{}, depotError(depot, err)
	case errors.Is(err, farm.ErrMaintenance):
		return esxsh.InstallResult{}, fmt.Errorf("[MaintenanceMode] %v", err)
	case err != nil:
		return esxsh.InstallResult{}, err
	}
	return esxsh.InstallResult{Installed: res.Installed, Removed: res.Removed, RebootRequired: res.RebootRequired}, nil
}

func depotError(depot string, err error) error {
	return fmt.Errorf("[MetadataDownloadError] Could not download from depot at %s, skipping (%v)", depot, err)
}

// RunningVGPUs lists a host's running vGPUs as `nvidia-smi vgpu -q` shows them.
func (b *farmBackend) RunningVGPUs(host string) []esxsh.VGPU {
	guests, err := b.farm.VGPUGuests(host)
	if err != nil {
		return nil
	}
	var out []esxsh.VGPU
	for _, g := range guests {
		name := g.Profile
		if p, err := b.farm.Catalog().Profile(g.Profile); err == nil {
			name = "NVIDIA " + p.Type
		}
		out = append(out, esxsh.VGPU{PCIID: g.GPU, VMName: g.VMName, Type: name, GuestDriver: g.Driver})
	}
	return out
}
