package farm

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Host software and guest drivers: what a driver upgrade of the vGPU Manager needs and no more.
//   - Depots (farm file `software.depots`): a location (an offline bundle on a datastore,
//     /vmfs/volumes/<datastore>/<path>.zip, or a depot URL) with its components; one can be unreachable.
//   - Each host's NVIDIA vGPU Manager installed (the package list, Access.Installed) and running
//     (Access.Manager): InstallComponents (esxcli, or a vLCM remediation) changes the first, maintenance mode
//     required; the host's next reboot makes it run.
//   - A guest driver version per VM (farm file `software.guest_drivers`, the control endpoint, what a guest
//     driver install reports); a running vGPU VM on a pair NVIDIA does not list (releases.go) is an incident,
//     and Admit (power-on, vMotion) refuses such a pair: gpusim's stand-in for the vGPU that fails to
//     initialize in such a guest (NVIDIA's known issue "VM running an incompatible NVIDIA vGPU guest driver
//     fails to initialize vGPU when booted").
//   - Remediation faults per host: the next installs fail, or the host does not come back from its reboot.

// Errors of the software model.
var (
	ErrGuestDriver = errors.New("incompatible guest driver")
	ErrUnreachable = errors.New("depot unreachable")
	ErrMaintenance = errors.New("maintenance mode required")
)

// NVIDIA is the vendor of NVIDIA's components.
const NVIDIA = "NVIDIA"

// Component is one component of a depot (vLCM and esxcli's unit of install).
type Component struct {
	Name        string `yaml:"name" json:"name"`
	Version     string `yaml:"version" json:"version"`
	Vendor      string `yaml:"vendor" json:"vendor"`
	DisplayName string `yaml:"display_name" json:"displayName"`
}

// Manager reports whether the component is NVIDIA's vGPU Manager (host driver).
func (c Component) Manager() bool {
	return c.Vendor == NVIDIA && strings.HasPrefix(c.Name, "NVD-") && DriverVersion(c.Version) != ""
}

// DepotSpec is one depot of the farm file.
type DepotSpec struct {
	Location    string      `yaml:"location" json:"location"`
	Components  []Component `yaml:"components" json:"components"`
	Unreachable bool        `yaml:"unreachable" json:"unreachable"`
}

// SoftwareSpec is the farm file's `software:` section.
type SoftwareSpec struct {
	ImageClusters []string          `yaml:"image_clusters" json:"image_clusters"` // clusters managed by a vLCM image
	Depots        []DepotSpec       `yaml:"depots" json:"depots"`
	GuestDrivers  map[string]string `yaml:"guest_drivers" json:"guest_drivers"` // VM name -> guest driver version
}

// RemediationFault makes a host's next Count installs fail ("fail"), or its next reboots never end
// ("stay-down": the host stays not responding).
type RemediationFault struct {
	Kind    string `json:"kind"`
	Count   int    `json:"count"`
	Message string `json:"message,omitempty"`
}

// Remediation fault kinds.
const (
	RemediationFail     = "fail"
	RemediationStayDown = "stay-down"
)

// Incident is a moment a running vGPU VM was, or would have been, on a pair NVIDIA does not list.
type Incident struct {
	Time    time.Time `json:"time"`
	VM      string    `json:"vm"`
	Host    string    `json:"host"`
	Manager string    `json:"manager"`
	Guest   string    `json:"guest"`
	What    string    `json:"what"` // refused (power-on, vMotion) or running (a guest driver set on a running VM)
	Why     string    `json:"why"`
}

// InstallResult is what an install did, as esxcli reports it.
type InstallResult struct {
	Installed      []string `json:"installed"` // Name_Version
	Removed        []string `json:"removed"`
	RebootRequired bool     `json:"rebootRequired"`
}

type software struct {
	releases  *Releases
	depots    []*DepotSpec
	image     map[string]bool   // cluster -> managed by a vLCM image
	drivers   map[string]string // VM name -> guest driver
	incidents []Incident
	faults    map[string]*RemediationFault // host -> armed fault
	component map[string]string            // host -> the NVIDIA component installed (name)
}

func (f *Farm) sw() *software {
	if f.software == nil {
		f.software = &software{image: map[string]bool{}, drivers: map[string]string{},
			faults: map[string]*RemediationFault{}, component: map[string]string{}}
	}
	return f.software
}

// SetSoftware loads the farm file's software section and the release table the guest driver rule reads.
func (f *Farm) SetSoftware(spec SoftwareSpec, releases *Releases) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sw := f.sw()
	sw.releases = releases
	for _, c := range spec.ImageClusters {
		sw.image[c] = true
	}
	seen := map[string]bool{}
	for i := range spec.Depots {
		d := spec.Depots[i]
		if d.Location == "" || seen[d.Location] {
			return fmt.Errorf("software.depots[%d]: location %q is empty or repeated: %w", i, d.Location, ErrInvalid)
		}
		seen[d.Location] = true
		for _, c := range d.Components {
			if c.Name == "" || c.Version == "" || c.Vendor == "" {
				return fmt.Errorf("depot %s: a component needs name, version and vendor: %w", d.Location, ErrInvalid)
			}
		}
		sw.depots = append(sw.depots, &d)
	}
	for vm, v := range spec.GuestDrivers {
		sw.drivers[vm] = v
	}
	return nil
}

// ImageManaged reports whether a cluster is managed by a vLCM image.
func (f *Farm) ImageManaged(cluster string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sw().image[cluster]
}

// Depot returns a depot's components: ErrNotFound for a location no depot has, ErrUnreachable for one that
// does not answer.
func (f *Farm) Depot(location string) (DepotSpec, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.sw().depots {
		if d.Location == location {
			if d.Unreachable {
				return DepotSpec{}, fmt.Errorf("cannot download from depot at %s: %w", location, ErrUnreachable)
			}
			out := *d
			out.Components = slices.Clone(d.Components)
			return out, nil
		}
	}
	return DepotSpec{}, fmt.Errorf("no depot at %s: %w", location, ErrNotFound)
}

// Depots lists every depot.
func (f *Farm) Depots() []DepotSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []DepotSpec{}
	for _, d := range f.sw().depots {
		c := *d
		c.Components = slices.Clone(d.Components)
		out = append(out, c)
	}
	return out
}

// SetDepotReachable makes a depot answer or not.
func (f *Farm) SetDepotReachable(location string, reachable bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.sw().depots {
		if d.Location == location {
			d.Unreachable = !reachable
			return nil
		}
	}
	return fmt.Errorf("no depot at %s: %w", location, ErrNotFound)
}

// InstallComponents installs components of a depot on a host in maintenance mode (all of the depot's when
// names is empty): NVIDIA's vGPU Manager becomes the host's installed one, running from its next reboot.
func (f *Farm) InstallComponents(hostName, location string, names []string) (InstallResult, error) {
	d, err := f.Depot(location)
	if err != nil {
		return InstallResult{}, err
	}
	var res InstallResult
	err = f.change(hostName, "software", func(h *host) error {
		if fault := f.sw().takeFault(h.name, RemediationFail); fault != nil {
			return fmt.Errorf("%s: %w", fault.message(h.name, "the install failed"), ErrInvalid)
		}
		if !h.maintenance {
			return fmt.Errorf("host %s: the components require maintenance mode: %w", h.name, ErrMaintenance)
		}
		for _, c := range d.Components {
			if len(names) > 0 && !slices.Contains(names, c.Name) {
				continue
			}
			res.Installed = append(res.Installed, c.Name+"_"+c.Version)
			if c.Manager() {
				if old := f.sw().component[h.name]; old != "" && h.access.Installed != "" {
					res.Removed = append(res.Removed, old+"_"+h.access.Installed+vibSuffix)
				}
				f.sw().component[h.name] = c.Name
				h.access.Installed = DriverVersion(c.Version)
				res.RebootRequired = true
			}
		}
		if len(res.Installed) == 0 {
			return fmt.Errorf("depot %s has no component %s: %w", location, strings.Join(names, ", "), ErrNotFound)
		}
		return nil
	})
	return res, err
}

// vibSuffix is the ESXi 8 build part of NVIDIA's package versions (the vSphere side spells packages the same).
const vibSuffix = "-1OEM.800.1.0.20613240"

// InstalledComponent is the NVIDIA component a host has installed: name (NVD-AIE-800 by default) and version.
func (f *Farm) InstalledComponent(hostName string) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, err := f.host(hostName)
	if err != nil || h.access.Installed == "" {
		return "", "", err
	}
	name := f.sw().component[h.name]
	if name == "" {
		name = DefaultComponent
	}
	return name, h.access.Installed + vibSuffix, nil
}

// DefaultComponent is the NVIDIA component a host has before any install: NVIDIA's vGPU for Compute (NVIDIA
// AI Enterprise) host driver for ESXi 8.0.
const DefaultComponent = "NVD-AIE-800"

// applySoftwareReboot makes the installed vGPU Manager run (EndReboot); a stay-down fault keeps the host down.
func (h *host) applySoftwareReboot(sw *software) {
	if h.access.Installed != "" {
		h.access.Manager = h.access.Installed
	}
	if fault := sw.takeFault(h.name, RemediationStayDown); fault != nil {
		h.down = true
	}
}

func (sw *software) takeFault(hostName, kind string) *RemediationFault {
	fault := sw.faults[hostName]
	if fault == nil || fault.Kind != kind {
		return nil
	}
	if fault.Count--; fault.Count <= 0 {
		delete(sw.faults, hostName)
	}
	return fault
}

func (r *RemediationFault) message(host, what string) string {
	if r.Message != "" {
		return r.Message
	}
	return fmt.Sprintf("host %s: %s (gpusim remediation fault)", host, what)
}

// SetRemediationFault arms a remediation fault on a host (nil clears it).
func (f *Farm) SetRemediationFault(hostName string, fault *RemediationFault) error {
	if fault != nil && (fault.Count < 1 || (fault.Kind != RemediationFail && fault.Kind != RemediationStayDown)) {
		return fmt.Errorf("remediation fault: kind must be %s or %s and count at least 1: %w", RemediationFail,
			RemediationStayDown, ErrInvalid)
	}
	return f.change(hostName, "software", func(h *host) error {
		if fault == nil {
			delete(f.sw().faults, h.name)
		} else {
			c := *fault
			f.sw().faults[h.name] = &c
		}
		return nil
	})
}

// GuestDriver is the guest driver version a VM reports ("" unknown or none).
func (f *Farm) GuestDriver(vmName string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sw().drivers[vmName]
}

// GuestDrivers maps VM names to the guest driver versions they report.
func (f *Farm) GuestDrivers() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for k, v := range f.sw().drivers {
		out[k] = v
	}
	return out
}

// SetGuestDriver records the guest driver a VM reports (what a driver install in the guest leaves); on a running
// vGPU VM whose host's manager NVIDIA does not list with it, that is an incident.
func (f *Farm) SetGuestDriver(vmName, version string) {
	f.mu.Lock()
	sw := f.sw()
	if version == "" {
		delete(sw.drivers, vmName)
	} else {
		sw.drivers[vmName] = version
	}
	if h := f.hostRunning(vmName); h != nil {
		if why := f.incompatible(h, vmName); why != "" {
			f.incident(h, vmName, "running", why)
		}
	}
	f.mu.Unlock()
}

// hostRunning is the host where a VM holds vGPUs (nil when it holds none).
func (f *Farm) hostRunning(vmName string) *host {
	for _, h := range f.hosts {
		for _, g := range h.gpus {
			for _, s := range g.slots {
				if s.VMName == vmName {
					return h
				}
			}
		}
	}
	return nil
}

// incompatible says why NVIDIA does not list the VM's guest driver with the host's running manager ("" when it
// does, or when either is not known).
func (f *Farm) incompatible(h *host, vmName string) string {
	sw := f.sw()
	guest := sw.drivers[vmName]
	if sw.releases == nil || guest == "" || h.access.Manager == "" {
		return ""
	}
	if ok, why := sw.releases.Compatible(h.access.Manager, guest); !ok {
		return why
	}
	return ""
}

func (f *Farm) incident(h *host, vmName, what, why string) {
	sw := f.sw()
	sw.incidents = append(sw.incidents, Incident{Time: time.Now().UTC(), VM: vmName, Host: h.name,
		Manager: h.access.Manager, Guest: sw.drivers[vmName], What: what, Why: why})
}

// guestRefusal is Admit's check (f.mu held): a VM whose guest driver the host's manager does not accept does
// not start its vGPUs there.
func (f *Farm) guestRefusal(h *host, vmName string) error {
	why := f.incompatible(h, vmName)
	if why == "" {
		return nil
	}
	f.incident(h, vmName, "refused", why)
	return fmt.Errorf("the vGPU of %s cannot start on %s: %s (NVIDIA vGPU Manager %s): %w", vmName, h.name, why,
		h.access.Manager, ErrGuestDriver)
}

// Incidents lists every incident so far, oldest first.
func (f *Farm) Incidents() []Incident {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Incident{}, f.sw().incidents...)
}

// ClearIncidents forgets the incidents so far.
func (f *Farm) ClearIncidents() {
	f.mu.Lock()
	f.sw().incidents = nil
	f.mu.Unlock()
}

// VGPUGuest is one running vGPU as `nvidia-smi vgpu -q` lists it on its host.
type VGPUGuest struct {
	GPU     string // PCI id
	VMName  string
	Profile string
	Driver  string // "" when the guest reports none
}

// VGPUGuests lists a host's running vGPUs with the guest driver each VM reports, by GPU.
func (f *Farm) VGPUGuests(hostName string) ([]VGPUGuest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, err := f.host(hostName)
	if err != nil {
		return nil, err
	}
	var out []VGPUGuest
	for _, g := range h.gpus {
		for _, s := range g.slots {
			out = append(out, VGPUGuest{GPU: g.id, VMName: s.VMName, Profile: s.Profile, Driver: f.sw().drivers[s.VMName]})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].GPU < out[j].GPU })
	return out, nil
}
