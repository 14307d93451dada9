package esxsh

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// Host software in the ESXi shell: the components of a depot (`esxcli software sources component list -d
// DEPOT`), installing from it (`esxcli software component apply -d DEPOT [-n NAME]`, `esxcli software vib
// install -d DEPOT`), and the vGPUs with the guest driver each VM reports (`nvidia-smi vgpu -q`). The depot is
// "the full remote URL to the index.xml file of the online depot or the local absolute datastore path to an
// offline bundle .zip file" (VMware, ESXCLI Concepts and Examples 8.0, "Manage Base Images and Add-Ons with
// ESXCLI"). The table layout of `sources component list` is gpusim's (no capture of a real host was read).

// DepotComponent is one component of a depot as esxcli lists it.
type DepotComponent struct {
	Name, Version, Vendor, AcceptanceLevel, ReleaseDate string
}

// InstallResult is what an install did.
type InstallResult struct {
	Installed, Removed []string // Name_Version
	RebootRequired     bool
}

// VGPU is one running vGPU of a host as `nvidia-smi vgpu -q` lists it.
type VGPU struct {
	PCIID       string // its GPU's PCI id, vSphere's form (0000:3b:00.0)
	VMName      string
	Type        string // NVIDIA's type name, e.g. NVIDIA A100-40C
	GuestDriver string // "" when the guest reports none
}

// SoftwareBackend is an optional part of a Backend: what depots hold and the running vGPUs with the guest driver
// each VM reports. Its backend installs through Backend.Apply (InstallChange; the host must be in maintenance
// mode).
type SoftwareBackend interface {
	DepotComponents(depot string) ([]DepotComponent, error)
	RunningVGPUs(host string) []VGPU
}

var componentColumns = []string{"Name", "Version", "Vendor", "Acceptance Level", "Release Date"}

func (s *Shell) software(h Host, path string, args []string) (Result, bool) {
	b, ok := s.Backend.(SoftwareBackend)
	switch path {
	case "software sources component list", "software component apply", "software vib install":
	default:
		return Result{}, false
	}
	depot, names, bad := depotArgs(args)
	if bad != nil {
		return *bad, true
	}
	if !ok {
		return esxcliError("software depots are not available on this host"), true
	}
	if path == "software sources component list" {
		return componentList(b, depot), true
	}
	applied, err := s.Backend.Apply(h.Name, InstallChange{Depot: depot, Names: names})
	if err != nil {
		return installError(err), true
	}
	return installResult(applied.Install, path == "software vib install"), true
}

func depotArgs(args []string) (string, []string, *Result) {
	var depot string
	var names []string
	r := &argReader{args: args}
	for r.more() {
		name, inline, has := r.next()
		switch name {
		case "-d", "--depot":
			v, bad := esxcliValue(r, name, inline, has)
			if bad != nil {
				return "", nil, bad
			}
			depot = v
		case "-n", "--component", "--vibname":
			v, bad := esxcliValue(r, name, inline, has)
			if bad != nil {
				return "", nil, bad
			}
			names = append(names, v)
		default:
			res := esxcliError("Invalid option " + name)
			return "", nil, &res
		}
	}
	if depot == "" {
		res := esxcliError("Missing required parameter -d|--depot")
		return "", nil, &res
	}
	return depot, names, nil
}

func componentList(b SoftwareBackend, depot string) Result {
	comps, err := b.DepotComponents(depot)
	if err != nil {
		return esxcliError(err.Error())
	}
	rows := [][]string{}
	for _, c := range comps {
		rows = append(rows, []string{c.Name, c.Version, c.Vendor, c.AcceptanceLevel, c.ReleaseDate})
	}
	return Result{Stdout: table(componentColumns, rows)}
}

func installError(err error) Result {
	return esxcliError(err.Error())
}

// installResult prints what esxcli prints after an install: the result block with what changed and whether the
// host must reboot.
func installResult(res InstallResult, vib bool) Result {
	kind := "Components"
	if vib {
		kind = "VIBs"
	}
	msg := "Operation finished successfully."
	if res.RebootRequired {
		msg = "The update completed successfully, but the system needs to be rebooted for the changes to be effective."
	}
	var b strings.Builder
	b.WriteString("Installation Result\n")
	fmt.Fprintf(&b, "   %s Installed: %s\n", kind, strings.Join(res.Installed, ", "))
	fmt.Fprintf(&b, "   %s Removed: %s\n", kind, strings.Join(res.Removed, ", "))
	fmt.Fprintf(&b, "   %s Skipped: \n", kind)
	fmt.Fprintf(&b, "   Message: %s\n", msg)
	fmt.Fprintf(&b, "   Reboot Required: %t\n", res.RebootRequired)
	return Result{Stdout: b.String()}
}

// table prints esxcli's table layout: a header, a dashed rule, one row per line, columns padded.
func table(columns []string, rows [][]string) string {
	widths := make([]int, len(columns))
	for _, r := range append([][]string{columns}, rows...) {
		for i, cell := range r {
			if i < len(widths) && len(cell) > widths[i] {
				widths[i] = len(cell)
			}
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		var parts []string
		for i, w := range widths {
			parts = append(parts, fmt.Sprintf("%-*s", w, cells[i]))
		}
		b.WriteString(strings.TrimRight(strings.Join(parts, "  "), " ") + "\n")
	}
	line(columns)
	rule := make([]string, len(widths))
	for i, w := range widths {
		rule[i] = strings.Repeat("-", w)
	}
	line(rule)
	for _, r := range rows {
		line(r)
	}
	return b.String()
}

// smiVGPU answers `nvidia-smi vgpu -q`: per GPU its active vGPUs and, for each, the VM and the guest driver
// version the VM reports (NVML's nvmlVgpuInstanceGetVmDriverVersion; "Not Available" when no driver is
// loaded). The layout follows NVIDIA's vGPU user guide ("Monitoring GPU Performance", nvidia-smi vgpu -q).
func smiVGPUQuery(s *Shell, c smiCall) Result {
	var running []VGPU
	if b, ok := s.Backend.(SoftwareBackend); ok {
		running = b.RunningVGPUs(c.host.Name)
	}
	return Result{Stdout: renderVGPUQuery(c.host.Name, c.gpus, running)}
}

func renderVGPUQuery(host string, gpus []GPU, running []VGPU) string {
	var b strings.Builder
	for _, g := range gpus {
		var mine []VGPU
		for _, v := range running {
			if v.PCIID == g.PCIID {
				mine = append(mine, v)
			}
		}
		fmt.Fprintf(&b, "GPU %s\n", g.BusID)
		fmt.Fprintf(&b, "    %-34s: %d\n", "Active vGPUs", len(mine))
		for _, v := range mine {
			driver := v.GuestDriver
			if driver == "" {
				driver = "Not Available"
			}
			fmt.Fprintf(&b, "    %-34s: %d\n", "vGPU ID", vgpuID(host, v.VMName, g.BusID))
			fmt.Fprintf(&b, "        %-30s: %s\n", "VM Name", v.VMName)
			fmt.Fprintf(&b, "        %-30s: %s\n", "vGPU Name", v.Type)
			fmt.Fprintf(&b, "        %-30s: %s\n", "Guest Driver Version", driver)
			fmt.Fprintf(&b, "        %-30s: %s\n", "License Status", "Licensed")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func vgpuID(host, vm, bus string) uint32 {
	f := fnv.New32a()
	_, _ = f.Write([]byte(host + "/" + vm + "/" + bus))
	return f.Sum32()
}
