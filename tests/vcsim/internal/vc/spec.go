package vc

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"gpusim/internal/farm"
	"gpusim/internal/vapi"
)

// Spec describes a farm: it comes from flags or from a YAML/JSON farm file.
type Spec struct {
	Datacenter    string        `yaml:"datacenter" json:"datacenter"`
	APIVersion    string        `yaml:"api_version" json:"api_version"`
	Username      string        `yaml:"username" json:"username"`
	Password      string        `yaml:"password" json:"password"`
	RebootSeconds float64       `yaml:"reboot_seconds" json:"reboot_seconds"` // not responding after RebootHost
	HostDomain    string        `yaml:"host_domain" json:"host_domain"`
	Clusters      []ClusterSpec `yaml:"clusters" json:"clusters"`
	Templates     []VMSpec      `yaml:"templates" json:"templates"`
	VMs           []VMSpec      `yaml:"vms" json:"vms"`
	VMCount       int           `yaml:"vm_count" json:"vm_count"` // extra powered-off VMs vm-0001.. spread over hosts
	// Users are privilege-limited users beside Username (privileges.go).
	Users []User `yaml:"users" json:"users"`
	// Supervisor names supervisor clusters and seeds namespaces and VM classes (vapi_wiring.go).
	Supervisor *vapi.Supervisor `yaml:"supervisor" json:"supervisor"`
	// Networks are port groups beside "VM Network": standard or on a distributed switch (network.go).
	Networks []NetworkSpec `yaml:"networks" json:"networks"`
	// Software: clusters managed by a vLCM image, depots and their components, guest drivers (software.go).
	Software *farm.SoftwareSpec `yaml:"software" json:"software"`

	// Catalog is the vGPU type catalogue the farm's boards and profiles come from (not in farm files;
	// nil: farm.DefaultCatalog).
	Catalog *farm.Catalog `yaml:"-" json:"-"`
}

// ClusterSpec describes one cluster of identical GPU hosts.
type ClusterSpec struct {
	Name             string `yaml:"name" json:"name"`
	Hosts            int    `yaml:"hosts" json:"hosts"`
	GPUs             int    `yaml:"gpus_per_host" json:"gpus_per_host"`
	Model            string `yaml:"model" json:"model"`
	NVLink           string `yaml:"nvlink" json:"nvlink"`               // "" (the board's) | none | pairs | quads | nvswitch
	GraphicsType     string `yaml:"graphics_type" json:"graphics_type"` // shared | sharedDirect
	AssignmentPolicy string `yaml:"assignment_policy" json:"assignment_policy"`
	VgpuMode         string `yaml:"vgpu_mode" json:"vgpu_mode"` // sameSize | mixedSize
	MIG              bool   `yaml:"mig" json:"mig"`
	NvidiaOptions    string `yaml:"nvidia_options" json:"nvidia_options"`
	ProfilePrefix    string `yaml:"profile_prefix" json:"profile_prefix"` // grid_ (default) | nvidia_
	// UndeclaredParams are nvidia module parameters the hosts' driver does not declare (esxcli does
	// not list them and refuses to set them).
	UndeclaredParams []string `yaml:"undeclared_module_params" json:"undeclared_module_params"`
	// ExtraProfiles are profiles the hosts offer beyond the catalogue (a driver newer than the catalogue);
	// a vGPU of one takes a GPU of its own.
	ExtraProfiles []string `yaml:"extra_profiles" json:"extra_profiles"`
	// SingleTypeDriver: the hosts' driver reports "Heterogeneous Time-Slice Profiles: Not Supported", so an
	// equal-size GPU holds one vGPU type at a time.
	SingleTypeDriver bool `yaml:"single_type_driver" json:"single_type_driver"`
	// VgpuManager is the NVIDIA vGPU Manager version the hosts have installed ("" the default, farm.DefaultManager;
	// "none": not installed, the GPUs offer no vGPU types); SSH the SSH service (TSM-SSH) and lockdown mode.
	VgpuManager string        `yaml:"vgpu_manager" json:"vgpu_manager"`
	SSH         SSHAccessSpec `yaml:"ssh" json:"ssh"`
	// RDMADevices is how many RDMA devices (RoCE v2 NICs, config.network.rdmaDevice) each host has.
	RDMADevices int `yaml:"rdma_devices" json:"rdma_devices"`
	// NICs are each host's ConnectX NICs (farm.NICSpec): SR-IOV with VFs, or passthrough.
	NICs []farm.NICSpec `yaml:"nics" json:"nics"`
}

// SSHAccessSpec is how a cluster's hosts are reached over SSH: the SSH service and lockdown mode.
type SSHAccessSpec struct {
	Stopped            bool     `yaml:"stopped" json:"stopped"`                         // the SSH service is not running
	Policy             string   `yaml:"policy" json:"policy"`                           // on | off | automatic ("" on, off when stopped)
	Lockdown           string   `yaml:"lockdown" json:"lockdown"`                       // lockdownDisabled | lockdownNormal | lockdownStrict
	LockdownExceptions []string `yaml:"lockdown_exceptions" json:"lockdown_exceptions"` // users that keep access in lockdown
}

// VMSpec describes a VM or template created at start.
type VMSpec struct {
	Name     string   `yaml:"name" json:"name"`
	Host     string   `yaml:"host" json:"host"` // default: round robin over all hosts
	CPUs     int      `yaml:"cpus" json:"cpus"`
	MemoryMB int      `yaml:"memory_mb" json:"memory_mb"`
	Firmware string   `yaml:"firmware" json:"firmware"` // efi | bios
	VGPUs    []string `yaml:"vgpus" json:"vgpus"`
	Locked   bool     `yaml:"memory_locked" json:"memory_locked"` // memoryReservationLockedToMax
	PowerOn  bool     `yaml:"power_on" json:"power_on"`
	// Network: port groups of its vmxnet3 adapters (default: one e1000 on "VM Network", as vcsim makes).
	Network []string `yaml:"network" json:"network"`
}

// DefaultSpec is the demo farm: DC0 / GPU-Cluster, 4 hosts x 4 A100-40GB in NVLink pairs, graphics
// type sharedDirect, one RoCE v2 RDMA device per host (what the example inventory's training VMs set up),
// template ubuntu-22.04-ml, no VMs.
func DefaultSpec() Spec {
	return Spec{
		Datacenter: "DC0", APIVersion: "8.0.3.0", Username: "user", Password: "pass", RebootSeconds: 2,
		HostDomain: "gpu.sim",
		Clusters: []ClusterSpec{{
			Name: "GPU-Cluster", Hosts: 4, GPUs: 4, Model: "A100-40GB", RDMADevices: 1,
			GraphicsType: farm.GraphicsSharedDirect, AssignmentPolicy: farm.PolicyPerformance, VgpuMode: farm.ModeSameSize,
		}},
		Templates: []VMSpec{{Name: "ubuntu-22.04-ml", CPUs: 8, MemoryMB: 65536, Firmware: "efi"}},
	}
}

// ParseSpec reads a farm file (YAML or JSON; unknown fields are errors) over the defaults and checks
// it against the catalogue (nil: farm.DefaultCatalog).
func ParseSpec(data []byte, cat *farm.Catalog) (Spec, error) {
	spec := DefaultSpec()
	spec.Clusters = nil
	spec.Templates = nil
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&spec); err != nil {
		return Spec{}, fmt.Errorf("farm file: %w", err)
	}
	if len(spec.Clusters) == 0 {
		spec.Clusters = DefaultSpec().Clusters
	}
	spec.Catalog = cat
	return spec, spec.Validate()
}

// catalog returns the spec's catalogue, loading the default one when none is set.
func (s *Spec) catalog() (*farm.Catalog, error) {
	if s.Catalog != nil {
		return s.Catalog, nil
	}
	cat, err := farm.DefaultCatalog()
	if err != nil {
		return nil, err
	}
	s.Catalog = cat
	return cat, nil
}

// Validate checks the spec against the vGPU type catalogue.
func (s *Spec) Validate() error {
	cat, err := s.catalog()
	if err != nil {
		return err
	}
	if s.Datacenter == "" {
		return fmt.Errorf("datacenter name is empty")
	}
	if !strings.HasPrefix(s.APIVersion, "6.") && !strings.HasPrefix(s.APIVersion, "7.") &&
		!strings.HasPrefix(s.APIVersion, "8.") && !strings.HasPrefix(s.APIVersion, "9.") {
		return fmt.Errorf("api_version %q: expected 6.x, 7.x, 8.x or 9.x", s.APIVersion)
	}
	if s.HostDomain == "" || strings.ContainsAny(s.HostDomain, " /:") {
		return fmt.Errorf("host_domain %q is not a DNS domain", s.HostDomain)
	}
	if s.Username == "" {
		return fmt.Errorf("username is empty")
	}
	if err := validateUsers(s.Username, s.Users); err != nil {
		return err
	}
	if s.RebootSeconds < 0 {
		return fmt.Errorf("reboot_seconds must be >= 0")
	}
	if s.VMCount < 0 || s.VMCount > 100000 {
		return fmt.Errorf("vm_count must be 0..100000")
	}
	names := map[string]bool{}
	for i, c := range s.Clusters {
		if c.Name == "" {
			return fmt.Errorf("clusters[%d]: name is empty", i)
		}
		if names[c.Name] {
			return fmt.Errorf("clusters[%d]: duplicate name %q", i, c.Name)
		}
		names[c.Name] = true
		if c.Hosts < 0 || c.Hosts > 1024 {
			return fmt.Errorf("cluster %s: hosts must be 0..1024", c.Name)
		}
		if c.RDMADevices < 0 || c.RDMADevices > 16 {
			return fmt.Errorf("cluster %s: rdma_devices must be 0..16", c.Name)
		}
		if c.GPUs < 0 || c.GPUs > 16 {
			return fmt.Errorf("cluster %s: gpus_per_host must be 0..16", c.Name)
		}
		if _, ok := cat.Model(c.Model); !ok {
			return fmt.Errorf("cluster %s: %w", c.Name, cat.UnknownModel(c.Model))
		}
		probe := farm.New(cat)
		if err := probe.AddHost(c.hostSpec("probe", "probe")); err != nil {
			return fmt.Errorf("cluster %s: %w", c.Name, err)
		}
	}
	if err := s.validateNetworks(s.hostNames()); err != nil {
		return err
	}
	if err := s.validateSoftware(); err != nil {
		return err
	}
	vmNames := map[string]bool{}
	for _, list := range [][]VMSpec{s.Templates, s.VMs} {
		for i, vm := range list {
			if vm.Name == "" {
				return fmt.Errorf("vm/template %d: name is empty", i)
			}
			if vmNames[vm.Name] {
				return fmt.Errorf("duplicate VM name %q", vm.Name)
			}
			vmNames[vm.Name] = true
			if vm.Firmware != "" && vm.Firmware != "efi" && vm.Firmware != "bios" {
				return fmt.Errorf("VM %s: firmware must be efi or bios", vm.Name)
			}
			if vm.CPUs < 0 || vm.MemoryMB < 0 {
				return fmt.Errorf("VM %s: cpus and memory_mb must be >= 0", vm.Name)
			}
			for _, p := range vm.VGPUs {
				if _, err := cat.Profile(p); err != nil && !s.offersExtra(p) {
					return fmt.Errorf("VM %s: %w", vm.Name, err)
				}
			}
		}
	}
	return nil
}

// offersExtra reports whether some cluster offers the profile beyond the catalogue.
func (s *Spec) offersExtra(profile string) bool {
	for _, c := range s.Clusters {
		if slices.Contains(c.ExtraProfiles, profile) {
			return true
		}
	}
	return false
}

func (c ClusterSpec) hostSpec(name, cluster string) farm.HostSpec {
	return farm.HostSpec{
		Name: name, Cluster: cluster, Model: c.Model, GPUs: c.GPUs, NVLink: c.NVLink,
		DefaultGraphicsType: c.GraphicsType, AssignmentPolicy: c.AssignmentPolicy, VgpuMode: c.VgpuMode,
		MIG: c.MIG, ModuleOptions: c.NvidiaOptions, ProfilePrefix: c.ProfilePrefix, UndeclaredParams: c.UndeclaredParams,
		ExtraProfiles: c.ExtraProfiles, SingleTypeDriver: c.SingleTypeDriver,
		Access: farm.AccessSpec{Manager: c.VgpuManager, SSHStopped: c.SSH.Stopped, SSHPolicy: c.SSH.Policy,
			Lockdown: c.SSH.Lockdown, LockdownExceptions: c.SSH.LockdownExceptions},
	}
}

// MaxVGPUsPerVM is the per-VM vGPU limit for an API version: 4 before 8.0, 8 from 8.0.
func MaxVGPUsPerVM(apiVersion string) int {
	major := strings.SplitN(apiVersion, ".", 2)[0]
	if major == "6" || major == "7" {
		return 4
	}
	return 8
}
