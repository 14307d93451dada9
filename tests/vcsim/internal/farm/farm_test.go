package farm

import (
	"errors"
	"slices"
	"testing"
)

func newFarm(t *testing.T, specs ...HostSpec) *Farm {
	t.Helper()
	f := New(nil)
	for _, s := range specs {
		if err := f.AddHost(s); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func a100Host(name string) HostSpec {
	return HostSpec{Name: name, Cluster: "c", Model: "A100-40GB", GPUs: 4, NVLink: "pairs", DefaultGraphicsType: GraphicsSharedDirect}
}

func TestAddHostRejectsBadSpecs(t *testing.T) {
	tests := []struct {
		name string
		spec HostSpec
	}{
		{"unknown model", HostSpec{Name: "h", Model: "V100"}},
		{"bad nvlink", HostSpec{Name: "h", Model: "A100-40GB", NVLink: "ring"}},
		{"nvlink on L40S", HostSpec{Name: "h", Model: "L40S", NVLink: "pairs", GPUs: 2}},
		{"mig on L40S", HostSpec{Name: "h", Model: "L40S", MIG: true}},
		{"bad graphics type", HostSpec{Name: "h", Model: "A100-40GB", DefaultGraphicsType: "direct3d"}},
		{"bad policy", HostSpec{Name: "h", Model: "A100-40GB", AssignmentPolicy: "random"}},
		{"negative gpus", HostSpec{Name: "h", Model: "A100-40GB", GPUs: -1}},
	}
	for _, tc := range tests {
		if err := New(nil).AddHost(tc.spec); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	f := newFarm(t, a100Host("h"))
	if err := f.AddHost(a100Host("h")); err == nil {
		t.Error("duplicate host accepted")
	}
}

func TestGPUsAndNVLinkTopology(t *testing.T) {
	f := newFarm(t, a100Host("h"))
	gpus, err := f.GPUs("h")
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 4 || gpus[0].PCIID != "0000:3b:00.0" || gpus[3].PCIID != "0000:5f:00.0" {
		t.Fatalf("unexpected GPUs %+v", gpus)
	}
	if gpus[0].NVLinkSet != 0 || gpus[2].NVLinkSet != 1 || len(gpus[0].NVLinkPeers) != 1 || gpus[0].NVLinkPeers[0] != gpus[1].PCIID {
		t.Fatalf("unexpected NVLink pairs %+v", gpus)
	}
	if !gpus[0].NVLinkUp || gpus[0].VgpuMode != ModeSameSize || gpus[0].GraphicsType != GraphicsSharedDirect {
		t.Fatalf("unexpected GPU state %+v", gpus[0])
	}
	if _, err := f.GPUs("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown host: %v", err)
	}
}

func TestMIGModeA100PendingUntilReboot(t *testing.T) {
	f := newFarm(t, a100Host("h"))
	r, err := f.SetMIGMode("h", "0000:3b:00.0", true)
	if err != nil {
		t.Fatal(err)
	}
	if r.Applied || !r.Pending {
		t.Fatalf("A100 MIG change applied at once: %+v", r)
	}
	g, _ := f.GPU("h", "0000:3b:00.0")
	if g.MIGCurrent || !g.MIGPending || g.VgpuMode != ModeSameSize {
		t.Fatalf("unexpected GPU before reboot %+v", g)
	}
	if err := f.BeginReboot("h"); err == nil {
		t.Fatal("reboot outside maintenance mode accepted")
	}
	must(t, f.SetMaintenance("h", true))
	must(t, f.BeginReboot("h"))
	if f.Reachable("h") {
		t.Fatal("rebooting host reachable")
	}
	must(t, f.EndReboot("h"))
	g, _ = f.GPU("h", "0000:3b:00.0")
	if !g.MIGCurrent || g.VgpuMode != ModeMIG || !slices.Contains(g.Profiles, "grid_a100-1-5c") || slices.Contains(g.Profiles, "grid_a100-40c") {
		t.Fatalf("MIG not applied after reboot %+v", g)
	}
	if _, err := f.SetMIGMode("h", "0000:99:00.0", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown GPU: %v", err)
	}
}

func TestMIGModeH100ImmediateUnlessBusy(t *testing.T) {
	f := newFarm(t, HostSpec{Name: "h", Model: "H100-80GB", GPUs: 2, DefaultGraphicsType: GraphicsSharedDirect})
	r, err := f.SetMIGMode("h", "0000:3b:00.0", true)
	if err != nil || !r.Applied || r.Pending {
		t.Fatalf("H100 MIG change on an idle GPU: %+v %v", r, err)
	}
	if _, err := f.Admit("h", "vm-1", "one", Request{Profiles: []string{"grid_h100-80c"}}); err != nil {
		t.Fatal(err)
	}
	g, _ := f.GPU("h", "0000:3c:00.0")
	if len(g.VGPUs) != 1 {
		t.Fatalf("expected the vGPU on the time-sliced GPU: %+v", g)
	}
	r, err = f.SetMIGMode("h", "0000:3c:00.0", true)
	if err != nil || r.Applied || !r.Pending {
		t.Fatalf("H100 MIG change on a busy GPU: %+v %v", r, err)
	}
	f.Release("vm-1")
	g, _ = f.GPU("h", "0000:3c:00.0")
	if !g.MIGCurrent {
		t.Fatalf("pending H100 MIG change not applied once idle: %+v", g)
	}
	l40 := newFarm(t, HostSpec{Name: "l", Model: "L40S", GPUs: 1})
	if _, err := l40.SetMIGMode("l", "0000:3b:00.0", true); !errors.Is(err, ErrNotCapable) {
		t.Fatalf("L40S MIG: %v", err)
	}
}

func TestModuleOptionsTakeEffectAfterReboot(t *testing.T) {
	f := newFarm(t, a100Host("h"))
	opts := "NVreg_NvLinkDisable=1 NVreg_RegistryDwords=RmPVMRL=0x00180013"
	must(t, f.SetModuleOptions("h", "nvidia", opts))
	mo, _ := f.ModuleOptions("h", "nvidia")
	if mo.Configured != opts || mo.Effective != "" {
		t.Fatalf("unexpected options %+v", mo)
	}
	g, _ := f.GPU("h", "0000:3b:00.0")
	if !g.NVLinkUp || g.Scheduler.Policy != "best-effort" {
		t.Fatalf("options in effect before reboot: %+v", g)
	}
	must(t, f.SetMaintenance("h", true))
	must(t, f.BeginReboot("h"))
	must(t, f.EndReboot("h"))
	g, _ = f.GPU("h", "0000:3b:00.0")
	if g.NVLinkUp || g.Scheduler.Policy != "fixed-share" || g.Scheduler.TimesliceMs != 24 {
		t.Fatalf("options not in effect after reboot: %+v", g)
	}
	if err := f.SetModuleOptions("h", "nvidia", "novalue"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("malformed options: %v", err)
	}
	if err := f.SetModuleOptions("h", "nope", ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown module: %v", err)
	}
}

func TestSchedulerPerDevice(t *testing.T) {
	opts := ParseOptions("NVreg_RegistryDwords=RmPVMRL=0x01 NVreg_RegistryDwordsPerDevice=pci=0000:3c:00.0;RmPVMRL=0x11")
	if s := schedulerFor(opts, "0000:3b:00.0"); s.Policy != "equal-share" {
		t.Errorf("3b: %+v", s)
	}
	if s := schedulerFor(opts, "0000:3c:00.0"); s.Policy != "fixed-share" {
		t.Errorf("3c: %+v", s)
	}
}

func TestAdmitAllOrNothingAndRelease(t *testing.T) {
	f := newFarm(t, a100Host("h"))
	var events []Event
	f.Subscribe(func(e Event) { events = append(events, e) })
	if _, err := f.Admit("h", "vm-1", "a", Request{Profiles: []string{"grid_a100-40c", "grid_a100-40c", "grid_a100-40c"}}); err != nil {
		t.Fatal(err)
	}
	_, err := f.Admit("h", "vm-2", "b", Request{Profiles: []string{"grid_a100-40c", "grid_a100-40c"}})
	if !errors.Is(err, ErrInsufficient) || err.Error() != InsufficientGraphics {
		t.Fatalf("expected insufficient graphics, got %v", err)
	}
	if n := len(f.Assignments()); n != 3 {
		t.Fatalf("a failed admission left assignments: %d", n)
	}
	if got := f.Release("vm-1"); got != "h" {
		t.Fatalf("release returned %q", got)
	}
	if n := len(f.Assignments()); n != 0 {
		t.Fatalf("release kept %d assignments", n)
	}
	if len(events) != 2 {
		t.Fatalf("expected 2 events, got %+v", events)
	}
}

func TestUpdateGraphicsRefusedWhileBusy(t *testing.T) {
	f := newFarm(t, a100Host("h"))
	if _, err := f.Admit("h", "vm-1", "a", Request{Profiles: []string{"grid_a100-20c"}}); err != nil {
		t.Fatal(err)
	}
	err := f.UpdateGraphics("h", GraphicsConfig{DefaultGraphicsType: GraphicsShared})
	if !errors.Is(err, ErrGPUBusy) {
		t.Fatalf("expected busy, got %v", err)
	}
	must(t, f.UpdateGraphics("h", GraphicsConfig{Devices: []DeviceGraphics{{PCIID: "0000:5f:00.0", VgpuMode: ModeMixedSize}}}))
	g, _ := f.GPU("h", "0000:5f:00.0")
	if g.VgpuMode != ModeMixedSize {
		t.Fatalf("vgpu mode not changed: %+v", g)
	}
	if err := f.UpdateGraphics("h", GraphicsConfig{AssignmentPolicy: "random"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad policy: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRebootFaultValidationAndCount(t *testing.T) {
	f := newFarm(t, a100Host("h"))
	for _, tc := range []struct {
		host  string
		fault RebootFault
		want  error
	}{
		{"nope", RebootFault{Ignore: []string{RebootIgnoreMIG}, Count: 1}, ErrNotFound},
		{"h", RebootFault{Ignore: []string{"nvlink"}, Count: 1}, ErrInvalid},
		{"h", RebootFault{Count: 1}, ErrInvalid},
		{"h", RebootFault{Ignore: []string{RebootIgnoreMIG}}, ErrInvalid},
	} {
		if err := f.SetRebootFault(tc.host, tc.fault); !errors.Is(err, tc.want) {
			t.Errorf("%s %+v: %v, want %v", tc.host, tc.fault, err, tc.want)
		}
	}
	must(t, f.SetRebootFault("h", RebootFault{Ignore: []string{RebootIgnoreMIG}, Count: 1}))
	must(t, f.SetMaintenance("h", true))
	for i, want := range []bool{false, true} { // the first reboot refuses MIG, the second applies it
		_, err := f.SetMIGMode("h", "0000:3b:00.0", true)
		must(t, err)
		must(t, f.BeginReboot("h"))
		must(t, f.EndReboot("h"))
		g, _ := f.GPU("h", "0000:3b:00.0")
		if g.MIGCurrent != want || g.MIGPending != want {
			t.Fatalf("reboot %d: MIG current %v pending %v, want %v", i+1, g.MIGCurrent, g.MIGPending, want)
		}
	}
	if info, _ := f.Host("h"); info.RebootFault != nil {
		t.Fatalf("fault not consumed: %+v", info.RebootFault)
	}
	if err := f.ClearRebootFault("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("clear on an unknown host: %v", err)
	}
}
