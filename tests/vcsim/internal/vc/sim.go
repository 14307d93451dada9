// Package vc plugs the GPU farm (internal/farm) into govmomi's vCenter simulator: GPUs on hosts,
// HostGraphicsManager, HostKernelModuleSystem, HostPciPassthruSystem, vGPU rules for VMs, admission at
// power-on, maintenance mode and reboot, EnvironmentBrowser.QueryConfigTarget, and the /gpusim/ control
// endpoint.
package vc

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/simulator/esx"
	"github.com/vmware/govmomi/simulator/vpx"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
	"gpusim/internal/fault"
)

// Sim is a running GPU farm simulator.
type Sim struct {
	Spec   Spec
	Farm   *farm.Farm
	Model  *simulator.Model
	Server *simulator.Server
	URL    *url.URL // https://user:pass@127.0.0.1:port/sdk

	ctx      *simulator.Context
	client   *vim25.Client
	hosts    map[string]*simulator.HostSystem // by name
	hostRefs map[types.ManagedObjectReference]string
	gm       map[string]*GraphicsManager
	kms      map[string]*KernelModuleSystem
	pci      map[string]*PciPassthruSystem
	access   map[string]accessObjects // the host's service system and access manager (hostaccess.go)
	users    map[string]User          // privilege-limited users (privileges.go)

	busyMu    sync.Mutex
	busy      map[string]int
	dirty     map[string]bool
	faults    *faultBook
	journal   *journal // calls that change something, tasks created (state.go)
	control   *http.ServeMux
	messages  fault.Book // the messages of the faults gpusim raises
	rebootDur time.Duration
	closeOnce sync.Once
	tmpDirs   []string
	poolMu    sync.Mutex
	pools     map[types.ManagedObjectReference]*object.ResourcePool
	guests    guestBook  // customizations pending a first boot, armed customization faults (customize.go)
	perf      *perfState // PerformanceManager's GPU counters and series (performance_manager.go)
}

// New builds the farm and the vSphere inventory (not yet listening).
func New(spec Spec) (*Sim, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	m := simulator.VPX()
	m.ServiceContent = vpx.ServiceContent
	m.ServiceContent.About.ApiVersion = spec.APIVersion
	m.ServiceContent.About.Version = versionOf(spec.APIVersion)
	m.ServiceContent.About.FullName = "VMware vCenter Server " + versionOf(spec.APIVersion) + " build-24022515 (gpusim)"
	m.Datacenter, m.Cluster, m.Host, m.ClusterHost, m.Machine, m.Datastore, m.Portgroup = 1, 0, 0, 0, 0, 0, 0
	m.Autostart = false
	if err := m.Create(); err != nil {
		return nil, err
	}
	s := &Sim{
		Spec: spec, Farm: farm.New(spec.Catalog), Model: m, ctx: m.Service.Context,
		hosts: map[string]*simulator.HostSystem{}, hostRefs: map[types.ManagedObjectReference]string{},
		gm: map[string]*GraphicsManager{}, kms: map[string]*KernelModuleSystem{}, pci: map[string]*PciPassthruSystem{},
		access: map[string]accessObjects{}, users: usersByName(spec.Users),
		faults: newFaultBook(), journal: newJournal(), control: http.NewServeMux(), busy: map[string]int{}, dirty: map[string]bool{},
		rebootDur: time.Duration(spec.RebootSeconds * float64(time.Second)),
	}
	s.Farm.SetAPIVersion(spec.APIVersion) // before the farm file's running VMs are admitted
	var err error
	s.client, err = vim25.NewClient(context.Background(), m.Service)
	if err != nil {
		return nil, err
	}
	s.ctx.Map.AddHandler(&taskMessages{sim: s})
	if err := s.build(context.Background()); err != nil {
		s.Close()
		return nil, err
	}
	s.setupPerf()
	s.ctx.Map.Handler = s.route
	s.Farm.Subscribe(s.onFarmEvent)
	s.registerControl()
	s.limitUsers()
	return s, nil
}

func versionOf(api string) string {
	if len(api) >= 5 {
		return api[:5]
	}
	return api
}

// Start listens on addr ("127.0.0.1:0" for a free port) with TLS.
func (s *Sim) Start(addr string) (err error) {
	defer func() {
		if r := recover(); r != nil { // vcsim panics when it cannot listen
			err = fmt.Errorf("listen on %s: %v", addr, r)
		}
	}()
	svc := s.Model.Service
	svc.TLS = new(tls.Config)
	svc.Listen = &url.URL{Host: addr, User: url.UserPassword(s.Spec.Username, s.Spec.Password)}
	svc.HandleFunc("/gpusim/", s.serveControl)
	s.Server = svc.NewServer()
	s.Server.Server.Config.Handler = fault.WithFaultString(fault.Recover(s.Server.Server.Config.Handler))
	s.URL = s.Server.URL
	return nil
}

// Close stops the server and removes temporary files.
func (s *Sim) Close() {
	s.closeOnce.Do(func() {
		if s.Server != nil {
			s.Server.Close()
		}
		s.Model.Remove()
		for _, d := range s.tmpDirs {
			_ = os.RemoveAll(d)
		}
	})
}

// Env returns the environment a client uses to reach the simulator. Its TLS certificate is pinned by its
// SHA-256 thumbprint (vgpuctl's --thumbprint), not trusted blindly: the certificate is self-signed.
func (s *Sim) Env() [][2]string {
	u := *s.URL
	u.User = nil
	ctl := url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/gpusim"}
	return [][2]string{
		{"VGPUCTL_URL", u.String()},
		{"VGPUCTL_USERNAME", s.Spec.Username},
		{"VGPUCTL_PASSWORD", s.Spec.Password},
		{"VGPUCTL_THUMBPRINT", s.Thumbprint()},
		{"GPUSIM_CONTROL", ctl.String()},
	}
}

// Thumbprint is the SHA-256 digest of the server's certificate, colon-separated upper-case hex (as vSphere
// shows thumbprints).
func (s *Sim) Thumbprint() string {
	sum := sha256.Sum256(s.Server.Certificate().Raw)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

// Client returns an in-process vim25 client (no session needed for simulator-internal use).
func (s *Sim) Client() *vim25.Client { return s.client }

// Context returns the simulator's context (its Map is the inventory).
func (s *Sim) Context() *simulator.Context { return s.ctx }

// HostNames lists the hosts in creation order.
func (s *Sim) HostNames() []string {
	var names []string
	for _, h := range s.Farm.Hosts() {
		names = append(names, h.Name)
	}
	return names
}

func (s *Sim) build(ctx context.Context) error {
	root := object.NewRootFolder(s.client)
	dcs, err := root.Children(ctx)
	if err != nil || len(dcs) == 0 {
		return fmt.Errorf("no datacenter: %v", err)
	}
	dc := object.NewDatacenter(s.client, dcs[0].Reference())
	if s.Spec.Datacenter != "DC0" {
		task, err := dc.Rename(ctx, s.Spec.Datacenter)
		if err != nil {
			return err
		}
		if err := task.Wait(ctx); err != nil {
			return err
		}
	}
	folders, err := dc.Folders(ctx)
	if err != nil {
		return err
	}
	dsDir, err := s.datastoreDir()
	if err != nil {
		return err
	}
	n := 0
	var hostObjs []*object.HostSystem
	for _, c := range s.Spec.Clusters {
		cluster, err := folders.HostFolder.CreateCluster(ctx, c.Name, types.ClusterConfigSpecEx{})
		if err != nil {
			return err
		}
		for i := 0; i < c.Hosts; i++ {
			n++
			name := fmt.Sprintf("esx-%02d.%s", n, s.Spec.HostDomain)
			if err := s.Farm.AddHost(c.hostSpec(name, c.Name)); err != nil {
				return err
			}
			if err := s.Farm.AddNICs(name, c.NICs); err != nil {
				return err
			}
			task, err := cluster.AddHost(ctx, types.HostConnectSpec{HostName: name}, true, nil, nil)
			if err != nil {
				return err
			}
			info, err := task.WaitForResult(ctx, nil)
			if err != nil {
				return fmt.Errorf("add host %s: %w", name, err)
			}
			ref := info.Result.(types.ManagedObjectReference)
			hostObj := object.NewHostSystem(s.client, ref)
			dss, err := hostObj.ConfigManager().DatastoreSystem(ctx)
			if err != nil {
				return err
			}
			if _, err := dss.CreateLocalDatastore(ctx, "datastore1", dsDir); err != nil {
				return err
			}
			hostObjs = append(hostObjs, hostObj)
			s.setupHost(name, ref)
			s.addRDMADevices(name, c.RDMADevices)
		}
	}
	if err := s.createNetworks(ctx, folders, hostObjs); err != nil {
		return err
	}
	if err := s.setupSoftware(); err != nil { // software.go: before the farm file's running VMs start
		return err
	}
	return s.createVMs(ctx, folders, hostObjs)
}

// datastoreDir holds the VMs' files: on tmpfs (/dev/shm) when there is one, as creating a thousand
// VM directories is most of the start-up time on a disk.
func (s *Sim) datastoreDir() (string, error) {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if dir, err := os.MkdirTemp("/dev/shm", "gpusim-ds-"); err == nil {
			s.tmpDirs = append(s.tmpDirs, dir)
			return dir, nil
		}
	}
	home := os.TempDir()
	for _, o := range s.ctx.Map.OptionManager().Setting {
		if v := o.GetOptionValue(); v.Key == "vcsim.home" {
			home = v.Value.(string)
		}
	}
	dir := filepath.Join(home, "datastore1")
	return dir, os.MkdirAll(dir, 0o700)
}

// setupHost adds the GPU managers and PCI devices to a simulator host.
func (s *Sim) setupHost(name string, ref types.ManagedObjectReference) {
	h := s.ctx.Map.Get(ref).(*simulator.HostSystem)
	s.hosts[name] = h
	s.hostRefs[ref] = name
	info, _ := s.Farm.Host(name)
	gm := &GraphicsManager{sim: s, host: name}
	gm.Self = types.ManagedObjectReference{Type: "HostGraphicsManager", Value: "graphicsManager-" + ref.Value}
	km := &KernelModuleSystem{sim: s, host: name}
	km.Self = types.ManagedObjectReference{Type: "HostKernelModuleSystem", Value: "kernelModuleSystem-" + ref.Value}
	ps := &PciPassthruSystem{sim: s, host: name}
	ps.Self = types.ManagedObjectReference{Type: "HostPciPassthruSystem", Value: "pciPassthruSystem-" + ref.Value}
	s.ctx.Map.Put(gm)
	s.ctx.Map.Put(km)
	s.ctx.Map.Put(ps)
	s.gm[name], s.kms[name], s.pci[name] = gm, km, ps
	h.ConfigManager.GraphicsManager = &gm.Self
	h.ConfigManager.KernelModuleSystem = &km.Self
	h.ConfigManager.PciPassthruSystem = &ps.Self
	s.setupAccess(name, h)

	hw := *h.Hardware
	hw.PciDevice = append([]types.HostPciDevice(nil), hw.PciDevice...)
	for _, g := range info.GPUs {
		hw.PciDevice = append(hw.PciDevice, pciDevice(g))
	}
	hw.MemorySize = 2 << 40 // 2 TiB, enough to reserve all VM memory
	h.Hardware = &hw
	s.setupNICs(h, name)
	s.setupPVRDMA(h)
	summaryHW := *h.Summary.Hardware
	summaryHW.MemorySize = hw.MemorySize
	summaryHW.NumCpuCores, summaryHW.NumCpuThreads, summaryHW.NumCpuPkgs = 64, 128, 2
	h.Summary.Hardware = &summaryHW
	if h.Config != nil {
		h.Config.Product.Version = "8.0.2" // the newest ESXi version vcsim's EnvironmentBrowser knows
		if _, err := types.ParseESXiVersion(versionOf(s.Spec.APIVersion)); err == nil {
			h.Config.Product.Version = versionOf(s.Spec.APIVersion)
		}
		h.Config.Product.ApiVersion = s.Spec.APIVersion
		h.Config.Product.FullName = "VMware ESXi " + versionOf(s.Spec.APIVersion) + " build-24022510"
	}
	for _, p := range ps.info() {
		ps.PciPassthruInfo = append(ps.PciPassthruInfo, p)
	}
	s.refreshHost(nil, name)
}

func pciDevice(g farm.GPUInfo) types.HostPciDevice {
	var bus, slot, fn int
	_, _ = fmt.Sscanf(g.PCIID, "0000:%x:%x.%x", &bus, &slot, &fn)
	return types.HostPciDevice{
		Id: g.PCIID, ClassId: 0x0302, Bus: byte(bus), Slot: byte(slot), Function: byte(fn),
		VendorId: int16(farm.VendorID), SubVendorId: int16(farm.VendorID), VendorName: farm.VendorName,
		DeviceId: int16(g.Model.DeviceID), DeviceName: g.Model.DeviceName,
		ParentBridge: fmt.Sprintf("0000:%02x:00.0", bus-1),
	}
}

// createVMs creates templates, listed VMs and VMCount numbered VMs, round robin over the hosts.
func (s *Sim) createVMs(ctx context.Context, folders *object.DatacenterFolders, hosts []*object.HostSystem) error {
	if len(hosts) == 0 {
		if len(s.Spec.Templates)+len(s.Spec.VMs)+s.Spec.VMCount > 0 {
			return fmt.Errorf("VMs need at least one host")
		}
		return nil
	}
	byName := map[string]*object.HostSystem{}
	for i, name := range s.HostNames() {
		byName[name] = hosts[i]
	}
	next := 0
	pick := func(vm VMSpec) (*object.HostSystem, error) {
		if vm.Host != "" {
			h, ok := byName[vm.Host]
			if !ok {
				return nil, fmt.Errorf("VM %s: unknown host %q", vm.Name, vm.Host)
			}
			return h, nil
		}
		h := hosts[next%len(hosts)]
		next++
		return h, nil
	}
	for _, t := range s.Spec.Templates {
		h, err := pick(t)
		if err != nil {
			return err
		}
		ref, err := s.createVM(ctx, folders, h, t)
		if err != nil {
			return err
		}
		if err := object.NewVirtualMachine(s.client, ref).MarkAsTemplate(ctx); err != nil {
			return err
		}
	}
	all := append([]VMSpec{}, s.Spec.VMs...)
	for i := 1; i <= s.Spec.VMCount; i++ {
		all = append(all, VMSpec{Name: fmt.Sprintf("vm-%04d", i)})
	}
	type job struct {
		vm   VMSpec
		host *object.HostSystem
	}
	jobs := make([]job, 0, len(all))
	for _, vm := range all {
		h, err := pick(vm)
		if err != nil {
			return err
		}
		jobs = append(jobs, job{vm, h})
	}
	// Creation is dominated by task round trips, so a few workers overlap the waiting; power-on then
	// follows in farm file order, so that vGPU placement does not depend on the workers' timing.
	refs := make([]types.ManagedObjectReference, len(jobs))
	work := make(chan int)
	errs := make(chan error, len(jobs))
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				ref, err := s.createVM(ctx, folders, jobs[i].host, jobs[i].vm)
				refs[i] = ref
				errs <- err
			}
		}()
	}
	for i := range jobs {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	for i, j := range jobs {
		if j.vm.PowerOn {
			if err := s.startVM(ctx, refs[i], j.vm); err != nil {
				return err
			}
		}
	}
	return nil
}

// startVM powers on a farm file VM, admitting its vGPUs with the power-on rules first (the vGPU
// rules are not hooked in while the farm is built).
func (s *Sim) startVM(ctx context.Context, ref types.ManagedObjectReference, spec VMSpec) error {
	vm, ok := s.vmObject(ref)
	if !ok {
		return fmt.Errorf("power on %s: VM not found", spec.Name)
	}
	host := s.hostOf(vm.Runtime.Host)
	if f := s.admit(vm); f != nil {
		return fmt.Errorf("VM %s (power_on: true) cannot start on %s: %s", spec.Name, host, s.messages.Message(f))
	}
	task, err := object.NewVirtualMachine(s.client, ref).PowerOn(ctx)
	if err == nil {
		_, err = s.waitTask(task.Reference(), "power on "+spec.Name)
	}
	if err != nil {
		s.Farm.Release(vm.Self.Value)
		return fmt.Errorf("power on %s: %w", spec.Name, err)
	}
	s.refreshHost(nil, host)
	return nil
}

func (s *Sim) createVM(ctx context.Context, folders *object.DatacenterFolders, h *object.HostSystem, vm VMSpec) (types.ManagedObjectReference, error) {
	if vm.CPUs == 0 {
		vm.CPUs = 4
	}
	if vm.MemoryMB == 0 {
		vm.MemoryMB = 16384
	}
	if vm.Firmware == "" {
		vm.Firmware = "efi"
	}
	spec := types.VirtualMachineConfigSpec{
		Name: vm.Name, GuestId: "ubuntu64Guest", NumCPUs: int32(vm.CPUs), MemoryMB: int64(vm.MemoryMB),
		Firmware: vm.Firmware, Version: "vmx-21",
		Files: &types.VirtualMachineFileInfo{VmPathName: "[datastore1]"},
	}
	if vm.Locked {
		spec.MemoryReservationLockedToMax = types.NewBool(true)
	}
	nic := esx.EthernetCard
	devices := []types.BaseVirtualDevice{&nic}
	if len(vm.Network) > 0 {
		cards, err := s.vmxnet3Cards(vm.Network)
		if err != nil {
			return types.ManagedObjectReference{}, fmt.Errorf("VM %s: %w", vm.Name, err)
		}
		devices = cards
	}
	for i, p := range vm.VGPUs {
		devices = append(devices, newVGPU(int32(-100-i), p))
	}
	for _, d := range devices {
		spec.DeviceChange = append(spec.DeviceChange, &types.VirtualDeviceConfigSpec{
			Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: d,
		})
	}
	pool, err := s.poolOf(ctx, h)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	task, err := folders.VmFolder.CreateVM(ctx, spec, pool, h)
	if err != nil {
		return types.ManagedObjectReference{}, err
	}
	return s.waitTask(task.Reference(), "create VM "+vm.Name)
}

// waitTask waits for a simulator task in process (cheaper than a PropertyCollector wait per task).
func (s *Sim) waitTask(ref types.ManagedObjectReference, what string) (types.ManagedObjectReference, error) {
	t, ok := s.ctx.Map.Get(ref).(*simulator.Task)
	if !ok {
		return types.ManagedObjectReference{}, fmt.Errorf("%s: task %s not found", what, ref)
	}
	t.Wait()
	if t.Info.Error != nil {
		return types.ManagedObjectReference{}, fmt.Errorf("%s: %s", what, s.messages.Message(t.Info.Error.Fault))
	}
	res, _ := t.Info.Result.(types.ManagedObjectReference)
	return res, nil
}

// newVGPU returns a vGPU device (PCI passthrough with a VMIOP backing).
func newVGPU(key int32, profile string) *types.VirtualPCIPassthrough {
	return &types.VirtualPCIPassthrough{VirtualDevice: types.VirtualDevice{
		Key:     key,
		Backing: &types.VirtualPCIPassthroughVmiopBackingInfo{Vgpu: profile},
	}}
}

// hostOf returns the name of the farm host a simulator host reference is, or "".
func (s *Sim) hostOf(ref *types.ManagedObjectReference) string {
	if ref == nil {
		return ""
	}
	return s.hostRefs[*ref]
}

// vmObject returns the simulator VM for a reference.
func (s *Sim) vmObject(ref types.ManagedObjectReference) (*simulator.VirtualMachine, bool) {
	vm, ok := s.ctx.Map.Get(ref).(*simulator.VirtualMachine)
	return vm, ok
}

// vmsOnHost lists the simulator VMs registered on a host.
func (s *Sim) vmsOnHost(name string) []*simulator.VirtualMachine {
	h := s.hosts[name]
	var out []*simulator.VirtualMachine
	for _, ref := range h.Vm {
		if vm, ok := s.vmObject(ref); ok {
			out = append(out, vm)
		}
	}
	return out
}

// poolOf returns (and caches) a host's root resource pool: a property read per VM is most of the
// start-up time of a large farm.
func (s *Sim) poolOf(ctx context.Context, h *object.HostSystem) (*object.ResourcePool, error) {
	s.poolMu.Lock()
	defer s.poolMu.Unlock()
	if p, ok := s.pools[h.Reference()]; ok {
		return p, nil
	}
	p, err := h.ResourcePool(ctx)
	if err != nil {
		return nil, err
	}
	if s.pools == nil {
		s.pools = map[types.ManagedObjectReference]*object.ResourcePool{}
	}
	s.pools[h.Reference()] = p
	return p, nil
}
