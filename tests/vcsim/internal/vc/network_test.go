package vc

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vmware/govmomi/event"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

func networkSpec() Spec {
	s := smallSpec()
	s.VMs = nil
	s.Clusters[0].NICs = []farm.NICSpec{{Model: "ConnectX-7", VFs: 1}, {Model: "ConnectX-7", Passthrough: true}}
	s.Networks = []NetworkSpec{{Name: "mgmt"}, {Name: "roce", Kind: NetworkDistributed, Switch: "dvs-roce"}}
	s.Templates = []VMSpec{{Name: "tmpl", CPUs: 4, MemoryMB: 8192, Locked: true, Network: []string{"mgmt"}}}
	return s
}

// portgroup finds a port group's backing for an ethernet card.
func (e *env) backing(name string) types.BaseVirtualDeviceBackingInfo {
	e.t.Helper()
	net, err := e.finder.Network(e.ctx, name)
	e.must(err)
	b, err := net.EthernetCardBackingInfo(e.ctx)
	e.must(err)
	return b
}

func (e *env) clone(name string, cfg *types.VirtualMachineConfigSpec, custom *types.CustomizationSpec) (*object.VirtualMachine, error) {
	pool := e.pool()
	ref := e.host(host1).Reference()
	task, err := e.vm("tmpl").Clone(e.ctx, e.folders().VmFolder, name, types.VirtualMachineCloneSpec{
		Location: types.VirtualMachineRelocateSpec{Pool: &pool, Host: &ref}, Config: cfg, Customization: custom})
	if err != nil {
		return nil, err
	}
	info, err := task.WaitForResult(e.ctx, nil)
	if err != nil {
		return nil, err
	}
	return object.NewVirtualMachine(e.c.Client, info.Result.(types.ManagedObjectReference)), nil
}

func addDevice(d types.BaseVirtualDevice) *types.VirtualMachineConfigSpec {
	return &types.VirtualMachineConfigSpec{DeviceChange: []types.BaseVirtualDeviceConfigSpec{
		&types.VirtualDeviceConfigSpec{Operation: types.VirtualDeviceConfigSpecOperationAdd, Device: d}}}
}

func sriovCard(e *env, pf string) *types.VirtualSriovEthernetCard {
	return &types.VirtualSriovEthernetCard{
		VirtualEthernetCard: types.VirtualEthernetCard{VirtualDevice: types.VirtualDevice{Key: -1, Backing: e.backing("roce")}},
		SriovBacking: &types.VirtualSriovEthernetCardSriovBackingInfo{PhysicalFunctionBacking: &types.VirtualPCIPassthroughDeviceBackingInfo{
			Id: pf, DeviceId: "1021", VendorId: int16(farm.NICVendorID), SystemId: systemID(host1)}},
	}
}

func TestPortGroupsAndNICsAreObserved(t *testing.T) {
	e := start(t, networkSpec())
	h := e.hostMO(host1, "hardware.pciDevice", "config.network.pnic", "config.pciPassthruInfo", "hardware.numaInfo", "network")
	var cx7 []string
	for _, d := range h.Hardware.PciDevice {
		if d.VendorId == farm.NICVendorID && d.ClassId == 0x0200 {
			cx7 = append(cx7, d.Id+" "+d.DeviceName)
		}
	}
	if strings.Join(cx7, ",") != "0000:18:00.0 MT2910 Family [ConnectX-7],0000:d8:00.0 MT2910 Family [ConnectX-7]" {
		t.Errorf("NIC PCI devices: %v", cx7)
	}
	info := map[string]*types.HostSriovInfo{}
	for _, p := range h.Config.PciPassthruInfo {
		if s, ok := p.(*types.HostSriovInfo); ok {
			info[s.Id] = s
		}
	}
	if s := info["0000:18:00.0"]; s == nil || !s.SriovActive || s.NumVirtualFunction != 1 {
		t.Errorf("SR-IOV info: %+v", s)
	}
	if p := info["0000:d8:00.0"]; p == nil || !p.PassthruActive {
		t.Errorf("passthrough info: %+v", p)
	}
	if h.Hardware.NumaInfo == nil || !contains(strings.Join(h.Hardware.NumaInfo.NumaNode[1].PciId, ","), "0000:d8:00.0") {
		t.Errorf("NUMA: %+v", h.Hardware.NumaInfo)
	}
	var pg mo.DistributedVirtualPortgroup
	net, err := e.finder.Network(e.ctx, "roce")
	e.must(err)
	e.must(e.c.RetrieveOne(e.ctx, net.Reference(), []string{"host", "config.distributedVirtualSwitch"}, &pg))
	if len(pg.Host) != 2 || pg.Config.DistributedVirtualSwitch == nil {
		t.Errorf("distributed port group: %+v", pg)
	}
	target := e.configTarget(host1)
	if len(target.Sriov) != 1 || target.Sriov[0].SystemId != systemID(host1) || len(target.PciPassthrough) != 1 {
		t.Errorf("config target: %d sriov, %d passthrough", len(target.Sriov), len(target.PciPassthrough))
	}
}

func TestPVRDMANeedsADistributedPortGroup(t *testing.T) {
	e := start(t, networkSpec())
	card := func(pg string) *types.VirtualVmxnet3Vrdma {
		return &types.VirtualVmxnet3Vrdma{VirtualVmxnet3: types.VirtualVmxnet3{VirtualVmxnet: types.VirtualVmxnet{
			VirtualEthernetCard: types.VirtualEthernetCard{VirtualDevice: types.VirtualDevice{Key: -1, Backing: e.backing(pg)}}}},
			DeviceProtocol: "rocev2"}
	}
	if _, err := e.clone("bad", addDevice(card("mgmt")), nil); err == nil || !contains(err.Error(), "distributed port group") {
		t.Fatalf("PVRDMA on a standard port group: %v", err)
	}
	vm, err := e.clone("good", addDevice(card("roce")), nil)
	e.must(err)
	e.must(e.wait(vm.PowerOn(e.ctx)))
}

func TestVFsAreAdmittedAtPowerOnAndNotHotPlugged(t *testing.T) {
	e := start(t, networkSpec())
	one, err := e.clone("one", addDevice(sriovCard(e, "0000:18:00.0")), nil)
	e.must(err)
	two, err := e.clone("two", addDevice(sriovCard(e, "0000:18:00.0")), nil)
	e.must(err)
	e.must(e.wait(one.PowerOn(e.ctx)))
	err = e.wait(two.PowerOn(e.ctx))
	f, msg := faultOf(err)
	if f == nil || !contains(msg, "no free SR-IOV virtual function on 0000:18:00.0") {
		t.Fatalf("second VF of a one-VF NIC: %v", err)
	}
	if _, ok := f.(*types.InsufficientResourcesFault); !ok {
		t.Errorf("fault type %T", f)
	}
	err = e.wait(one.Reconfigure(e.ctx, *addDevice(sriovCard(e, "0000:18:00.0"))))
	if f, _ := faultOf(err); f == nil {
		t.Fatal("SR-IOV hot-add accepted")
	} else if _, ok := f.(*types.DeviceHotPlugNotSupported); !ok {
		t.Errorf("hot-add fault %T", f)
	}
	e.must(e.wait(one.PowerOff(e.ctx)))
	e.must(e.wait(two.PowerOn(e.ctx)))
}

func TestSRIOVIsConfiguredThroughPciPassthruSystemAndAReboot(t *testing.T) {
	e := start(t, networkSpec())
	h := e.hostMO(host1, "configManager")
	cfg := &types.HostSriovConfig{HostPciPassthruConfig: types.HostPciPassthruConfig{Id: "0000:d8:00.0"}, SriovEnabled: true, NumVirtualFunction: 4}
	_, err := methods.UpdatePassthruConfig(e.ctx, e.c.Client, &types.UpdatePassthruConfig{This: *h.ConfigManager.PciPassthruSystem,
		Config: []types.BaseHostPciPassthruConfig{cfg}})
	e.must(err)
	nics, _ := e.sim.Farm.NICs(host1)
	if !nics[1].RebootNeeded || nics[1].NumVFRequested != 4 || nics[1].NumVF != 0 {
		t.Fatalf("before the reboot: %+v", nics[1])
	}
	e.must(e.wait(e.host(host1).EnterMaintenanceMode(e.ctx, 0, false, nil)))
	e.must(e.reboot(host1))
	e.waitConnected(host1)
	nics, _ = e.sim.Farm.NICs(host1)
	if !nics[1].SRIOVActive || nics[1].NumVF != 4 {
		t.Fatalf("after the reboot: %+v", nics[1])
	}
}

func customization(ips ...string) *types.CustomizationSpec {
	spec := &types.CustomizationSpec{
		Identity:         &types.CustomizationLinuxPrep{HostName: &types.CustomizationFixedName{Name: "train-01"}, Domain: "example.com"},
		GlobalIPSettings: types.CustomizationGlobalIPSettings{},
	}
	for _, ip := range ips {
		var gen types.BaseCustomizationIpGenerator = &types.CustomizationDhcpIpGenerator{}
		if ip != "" {
			gen = &types.CustomizationFixedIp{IpAddress: ip}
		}
		spec.NicSettingMap = append(spec.NicSettingMap, types.CustomizationAdapterMapping{Adapter: types.CustomizationIPSettings{Ip: gen}})
	}
	return spec
}

func (e *env) customizationEvents(vm *object.VirtualMachine) []string {
	e.t.Helper()
	events, err := event.NewManager(e.c.Client).QueryEvents(e.ctx, types.EventFilterSpec{
		Entity: &types.EventFilterSpecByEntity{Entity: vm.Reference(), Recursion: types.EventFilterSpecRecursionOptionSelf}})
	e.must(err)
	var out []string
	slices.SortFunc(events, func(a, b types.BaseEvent) int { return int(a.GetEvent().Key - b.GetEvent().Key) })
	for _, ev := range events {
		name := reflect.TypeOf(ev).Elem().Name()
		if strings.HasPrefix(name, "Customization") {
			if f, ok := ev.(*types.CustomizationLinuxIdentityFailed); ok {
				name += ":" + f.Reason
			}
			out = append(out, name)
		}
	}
	return out
}

func TestCustomizationAtFirstBootAndItsFailure(t *testing.T) {
	e := start(t, networkSpec())
	if _, err := e.clone("mismatch", addDevice(sriovCard(e, "0000:18:00.0")), customization("")); err == nil ||
		!contains(err.Error(), "does not match the number of network adapters") {
		t.Fatalf("one mapping for two adapters: %v", err)
	}
	vm, err := e.clone("train-01", addDevice(sriovCard(e, "0000:18:00.0")), customization("", "10.0.40.10"))
	e.must(err)
	e.must(e.wait(vm.PowerOn(e.ctx)))
	m := e.vmMO(vm, "guest")
	if m.Guest.HostName != "train-01" || m.Guest.IpAddress != "10.0.40.10" {
		t.Fatalf("guest after customization: %s %s", m.Guest.HostName, m.Guest.IpAddress)
	}
	if got := strings.Join(e.customizationEvents(vm), ","); got != "CustomizationStartedEvent,CustomizationSucceeded" {
		t.Errorf("events %s", got)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/gpusim/vms/failing/customization-fault",
		strings.NewReader(`{"reason": "hostname could not be written"}`))
	e.sim.control.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatal(rec.Body.String())
	}
	bad, err := e.clone("failing", nil, customization(""))
	e.must(err)
	e.must(e.wait(bad.PowerOn(e.ctx)))
	if got := strings.Join(e.customizationEvents(bad), ","); got != "CustomizationStartedEvent,CustomizationLinuxIdentityFailed:hostname could not be written" {
		t.Errorf("events %s", got)
	}
}

// Every port group lists the hosts that list it, "VM Network" too (govmomi's simulator lists it on the hosts'
// side only), as vCenter keeps Network.host and HostSystem.network in step.
func TestPortGroupsListTheirHosts(t *testing.T) {
	e := start(t, networkSpec())
	for _, name := range []string{"VM Network", "mgmt", "roce"} {
		net, err := e.finder.Network(e.ctx, name)
		e.must(err)
		var m mo.Network
		e.must(e.c.RetrieveOne(e.ctx, net.Reference(), []string{"host"}, &m))
		for _, h := range []string{host1} {
			host := e.hostMO(h, "network")
			if !slices.Contains(host.Network, net.Reference()) || !slices.Contains(m.Host, e.host(h).Reference()) {
				t.Errorf("%s: host %s lists %v, the port group lists %v", name, h, host.Network, m.Host)
			}
		}
	}
}

// vCenter does not move a running VM with an SR-IOV adapter or a DirectPath I/O device to another host (vSphere
// Networking, "SR-IOV Support: Availability of Features" and "DirectPath I/O"); gpusim refuses it the same way and
// leaves the VM where it was. Powered off, it moves; a VM without such devices moves while it runs.
func TestRunningVMsWithSRIOVOrDirectPathDoNotMove(t *testing.T) {
	e := start(t, networkSpec())
	dest := e.host("esx-02.gpu.sim").Reference()
	relocate := func(vm *object.VirtualMachine) error {
		return e.wait(vm.Relocate(e.ctx, types.VirtualMachineRelocateSpec{Host: &dest}, types.VirtualMachineMovePriorityDefaultPriority))
	}
	sriov, err := e.clone("vf-01", addDevice(sriovCard(e, "0000:18:00.0")), nil)
	e.must(err)
	e.must(e.wait(sriov.PowerOn(e.ctx)))
	f, msg := faultOf(relocate(sriov))
	if _, ok := f.(*types.DisallowedMigrationDeviceAttached); !ok || !contains(msg, "an SR-IOV network adapter") {
		t.Fatalf("SR-IOV VM moved or refused otherwise: %T %s", f, msg)
	}
	if where := e.vmMO(sriov, "runtime.host").Runtime.Host; *where == dest {
		t.Fatal("a refused move left the VM on the destination")
	}
	e.must(e.wait(sriov.PowerOff(e.ctx)))
	e.must(relocate(sriov))
	direct, err := e.clone("dp-01", addDevice(&types.VirtualPCIPassthrough{VirtualDevice: types.VirtualDevice{Key: -1,
		Backing: &types.VirtualPCIPassthroughDeviceBackingInfo{Id: "0000:d8:00.0", DeviceId: "1021",
			VendorId: int16(farm.NICVendorID), SystemId: systemID(host1)}}}), nil)
	e.must(err)
	e.must(e.wait(direct.PowerOn(e.ctx)))
	if f, msg := faultOf(relocate(direct)); !contains(msg, "a DirectPath I/O device") {
		t.Fatalf("DirectPath VM moved or refused otherwise: %T %s", f, msg)
	}
	plain, err := e.clone("plain-01", nil, nil)
	e.must(err)
	e.must(e.wait(plain.PowerOn(e.ctx)))
	e.must(relocate(plain))
}
