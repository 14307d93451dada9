package vc

import (
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// ImageConfigManager is a host's HostImageConfigManager.
type ImageConfigManager struct {
	mo.HostImageConfigManager
	sim  *Sim
	host string
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
		return &methods.FetchSoftwarePackagesBody{Fault_: fault.FromFarm(err)}
	}
	return &methods.FetchSoftwarePackagesBody{Res: &types.FetchSoftwarePackagesResponse{Returnval: packages(a)}}
}

// HostImageConfigGetAcceptance is the host's image acceptance level.
func (m *ImageConfigManager) HostImageConfigGetAcceptance(ctx *simulator.Context, req *types.HostImageConfigGetAcceptance) soap.HasFault {
	return &methods.HostImageConfigGetAcceptanceBody{Res: &types.HostImageConfigGetAcceptanceResponse{Returnval: "partner"}}
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
