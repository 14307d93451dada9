package vc

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

func hgxSpec(vms int) Spec {
	s := DefaultSpec()
	s.Clusters = []ClusterSpec{{Name: "HGX", Hosts: 1, GPUs: 8, Model: "H100-SXM5-80GB",
		GraphicsType: farm.GraphicsSharedDirect, AssignmentPolicy: farm.PolicyConsolidation, VgpuMode: farm.ModeSameSize}}
	for i := 1; i <= vms; i++ {
		s.VMs = append(s.VMs, VMSpec{Name: fmt.Sprintf("vm-%d", i), Host: host1, MemoryMB: 8192, Locked: true})
	}
	return s
}

// nvlinkReconfig attaches n vGPUs of a profile as one NVLink device group.
func nvlinkReconfig(profile string, n int) types.VirtualMachineConfigSpec {
	spec := vgpuSpec(types.VirtualDeviceConfigSpecOperationAdd, repeat(profile, n)...)
	for i, c := range spec.DeviceChange {
		c.GetVirtualDeviceConfigSpec().Device.GetVirtualDevice().DeviceGroupInfo = &types.VirtualDeviceDeviceGroupInfo{
			GroupInstanceKey: -1, SequenceId: int32(i)}
	}
	spec.DeviceGroups = &types.VirtualMachineVirtualDeviceGroups{DeviceGroup: []types.BaseVirtualMachineVirtualDeviceGroupsDeviceGroup{
		&types.VirtualMachineVirtualDeviceGroupsVendorDeviceGroup{
			VirtualMachineVirtualDeviceGroupsDeviceGroup: types.VirtualMachineVirtualDeviceGroupsDeviceGroup{GroupInstanceKey: -1},
			DeviceGroupName: DeviceGroupName(n, profile),
		}}}
	return spec
}

// An HGX board gets NVSwitch without -nvlink: device groups of 2, 4 and 8 GPUs, and NVLink VMs of 2,
// 4 and 2 vGPUs fill the 8 GPUs.
func TestNVSwitchHostOffersGroupsOf2_4_8(t *testing.T) {
	e := start(t, hgxSpec(4))
	info, _ := e.sim.Farm.Host(host1)
	if info.NVLinkTopology != farm.NVLinkNVSwitch {
		t.Fatalf("topology %q", info.NVLinkTopology)
	}
	const profile = "grid_h100xm-80c"
	ct := e.configTarget(host1)
	var names []string
	for _, g := range ct.VendorDeviceGroupInfo {
		names = append(names, g.DeviceGroupName)
	}
	want := []string{DeviceGroupName(2, profile), DeviceGroupName(4, profile), DeviceGroupName(8, profile)}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("device groups %v, want %v", names, want)
	}
	if got := groupGPUs(ct.VendorDeviceGroupInfo)[2]; len(got) != 8 || got[7] != farm.PCIBus(7) {
		t.Fatalf("8-GPU group components %v", got)
	}
	for i, n := range []int{2, 4, 2} {
		vm := e.vm(fmt.Sprintf("vm-%d", i+1))
		e.must(e.wait(vm.Reconfigure(e.ctx, nvlinkReconfig(profile, n))))
		e.must(e.wait(vm.PowerOn(e.ctx)))
		if got := len(e.sim.Farm.VMGPUs(vm.Reference().Value)); got != n {
			t.Fatalf("vm-%d holds %d GPUs, want %d", i+1, got, n)
		}
	}
	last := e.vm("vm-4")
	e.must(e.wait(last.Reconfigure(e.ctx, nvlinkReconfig(profile, 2))))
	if f, _ := faultOf(e.wait(last.PowerOn(e.ctx))); f == nil {
		t.Fatal("a fourth NVLink VM was admitted on a full NVSwitch host")
	}
}

// -nvlink (the farm's nvlink) overrides the board's topology.
func TestNVLinkTopologyOverride(t *testing.T) {
	s := hgxSpec(0)
	s.Clusters[0].NVLink = farm.NVLinkPairs
	e := start(t, s)
	ct := e.configTarget(host1)
	if len(ct.VendorDeviceGroupInfo) != 4 || ct.VendorDeviceGroupInfo[0].DeviceGroupName != DeviceGroupName(2, "grid_h100xm-80c") {
		t.Fatalf("pairs on an HGX board: %d groups", len(ct.VendorDeviceGroupInfo))
	}
	s = hgxSpec(0)
	s.Clusters[0].Model = "L40S"
	s.Clusters[0].NVLink = farm.NVLinkNVSwitch
	if _, err := New(s); err == nil || !strings.Contains(err.Error(), "no NVLink") {
		t.Fatalf("nvswitch on L40S: %v", err)
	}
}

// A host with profile_prefix nvidia_ reports nvidia_ names everywhere and admits them.
func TestNvidiaPrefixHost(t *testing.T) {
	s := smallSpec()
	s.Clusters[0].ProfilePrefix = farm.PrefixNvidia
	e := start(t, s)
	h := e.hostMO(host1, "config.sharedPassthruGpuTypes")
	for _, p := range h.Config.SharedPassthruGpuTypes {
		if !strings.HasPrefix(p, "nvidia_a100-") {
			t.Fatalf("profile %q on an nvidia_ host", p)
		}
	}
	res, err := methods.RetrieveVgpuProfileInfo(e.ctx, e.c.Client, &types.RetrieveVgpuProfileInfo{This: e.graphics(host1).ref})
	e.must(err)
	var found bool
	for _, p := range res.Returnval {
		if p.ProfileName == "nvidia_a100-40c" {
			found = p.FbSizeInGib == 40 && p.ProfileClass == "compute" && p.ProfileSharing == "timeSliced"
		}
	}
	if !found {
		t.Fatalf("vgpuProfileInfo %+v", res.Returnval)
	}
	vm := e.vm("vm-a")
	if f, _ := faultOf(e.addVGPUs(vm, "grid_a100-40c")); f == nil {
		t.Fatal("a grid_ name was accepted on an nvidia_ host")
	}
	e.must(e.addVGPUs(vm, "nvidia_a100-40c"))
	e.must(e.wait(vm.PowerOn(e.ctx)))
}

// Before the catalogue's API version (8.0.2) an equal-size GPU takes one type only; from it any type of the
// same framebuffer, unless the host's driver runs one type per GPU.
func TestEqualSizeTypesByAPIVersion(t *testing.T) {
	for _, tc := range []struct {
		api        string
		singleType bool
		fits       bool
		label      string
	}{{"8.0.0.1", false, false, "8.0"}, {"8.0.1.0", false, false, "8.0 U1"}, {"8.0.2.0", false, true, "8.0 U2"},
		{"8.0.3.0", true, false, "8.0 U3, a single-type driver"}} {
		t.Run(tc.label, func(t *testing.T) {
			s := DefaultSpec()
			s.APIVersion = tc.api
			s.Clusters = []ClusterSpec{{Name: "C", Hosts: 1, GPUs: 1, Model: "L40S",
				GraphicsType: farm.GraphicsSharedDirect, VgpuMode: farm.ModeSameSize, SingleTypeDriver: tc.singleType}}
			s.VMs = []VMSpec{
				{Name: "vm-q", Host: host1, MemoryMB: 1024, Locked: true, VGPUs: []string{"grid_l40s-24q"}, PowerOn: true},
				{Name: "vm-c", Host: host1, MemoryMB: 1024, Locked: true, VGPUs: []string{"grid_l40s-24c"}},
			}
			e := start(t, s)
			f, msg := faultOf(e.wait(e.vm("vm-c").PowerOn(e.ctx)))
			if tc.fits && f != nil {
				t.Fatalf("API %s: L40S-24C beside L40S-24Q refused: %s", tc.api, msg)
			}
			if _, ok := f.(*types.InsufficientGraphicsResourcesFault); !tc.fits && !ok {
				t.Fatalf("API %s: L40S-24C beside L40S-24Q: %#v %q, want InsufficientGraphicsResourcesFault", tc.api, f, msg)
			}
		})
	}
}

// The control endpoint names the catalogue file gpusim read and its sha256 (the planner's digest of the
// same file), so a test can prove both sides read one file.
func TestControlShowsCatalogue(t *testing.T) {
	e := start(t, smallSpec())
	code, body := e.control("GET", "/gpusim/", nil)
	cat, _ := body["catalogue"].(map[string]any)
	if code != 200 || cat == nil {
		t.Fatalf("GET /gpusim/: %d %v", code, body)
	}
	data, err := os.ReadFile(cat["path"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); cat["sha256"] != hex.EncodeToString(sum[:]) {
		t.Fatalf("sha256 %v, file %x", cat["sha256"], sum)
	}
}

// A host may offer a profile the catalogue does not explain (extra_profiles): it is listed and admitted
// on a GPU of its own, and that GPU takes no other vGPU.
func TestExtraProfileTakesAGPUOfItsOwn(t *testing.T) {
	const unknown = "grid_a100-1-5cme2"
	s := DefaultSpec()
	s.Clusters = []ClusterSpec{{Name: "C", Hosts: 1, GPUs: 2, Model: "A100-40GB", GraphicsType: farm.GraphicsSharedDirect,
		VgpuMode: farm.ModeSameSize, ExtraProfiles: []string{unknown}}}
	s.VMs = []VMSpec{
		{Name: "odd", Host: host1, MemoryMB: 1024, Locked: true, VGPUs: []string{unknown}, PowerOn: true},
		{Name: "vm-1", Host: host1, MemoryMB: 1024, Locked: true, VGPUs: []string{"grid_a100-10c"}},
		{Name: "vm-2", Host: host1, MemoryMB: 1024, Locked: true, VGPUs: []string{"grid_a100-10c"}},
	}
	e := start(t, s)
	h := e.hostMO(host1, "config.sharedPassthruGpuTypes")
	if !slices.Contains(h.Config.SharedPassthruGpuTypes, unknown) {
		t.Fatalf("extra profile not offered: %v", h.Config.SharedPassthruGpuTypes)
	}
	odd := e.sim.Farm.VMGPUs(e.vm("odd").Reference().Value)
	if len(odd) != 1 || odd[0].GPU != farm.PCIBus(0) {
		t.Fatalf("extra-profile VM placed %+v", odd)
	}
	e.must(e.wait(e.vm("vm-1").PowerOn(e.ctx)))
	if got := e.sim.Farm.VMGPUs(e.vm("vm-1").Reference().Value); len(got) != 1 || got[0].GPU != farm.PCIBus(1) {
		t.Fatalf("vm-1 placed %+v, want the other GPU", got)
	}
	// sameSize capacity of the second GPU allows 4 x 10C; the first GPU holds the unknown vGPU
	e.must(e.wait(e.vm("vm-2").PowerOn(e.ctx)))
	info, _ := e.sim.Farm.Host(host1)
	if len(info.GPUs[0].VGPUs) != 1 || len(info.GPUs[1].VGPUs) != 2 {
		t.Fatalf("vGPUs per GPU: %d, %d", len(info.GPUs[0].VGPUs), len(info.GPUs[1].VGPUs))
	}
	cands, _, _ := e.sim.Farm.Candidates(host1)
	if why := cands[0].Unavailable(e.sim.Farm.Catalog()); !strings.Contains(why, unknown) {
		t.Fatalf("GPU with the unknown vGPU: %q", why)
	}
}

// The farm file's running VMs are admitted under the farm's API version too.
func TestFarmVMsAdmittedUnderTheAPIVersion(t *testing.T) {
	s := DefaultSpec()
	s.APIVersion = "7.0.3.0"
	s.Clusters = []ClusterSpec{{Name: "C", Hosts: 1, GPUs: 1, Model: "L40S", GraphicsType: farm.GraphicsSharedDirect}}
	s.VMs = []VMSpec{
		{Name: "vm-q", Host: host1, MemoryMB: 1024, Locked: true, VGPUs: []string{"grid_l40s-24q"}, PowerOn: true},
		{Name: "vm-c", Host: host1, MemoryMB: 1024, Locked: true, VGPUs: []string{"grid_l40s-24c"}, PowerOn: true},
	}
	if sim, err := New(s); err == nil || !strings.Contains(err.Error(), "vm-c") {
		if sim != nil {
			sim.Close()
		}
		t.Fatalf("two types of one size on one GPU under API 7.0.3: %v", err)
	}
}
