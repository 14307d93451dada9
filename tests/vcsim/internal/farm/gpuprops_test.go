package farm

import (
	"errors"
	"testing"
)

// Every table entry has its modes, the start value and a reboot that applies it: a property missing one of
// them would be unsettable or never take effect.
func TestGPUPropertiesTableIsComplete(t *testing.T) {
	for _, p := range gpuProperties {
		if p.name == "" || p.modes == nil || p.start == nil {
			t.Fatalf("incomplete entry %+v", p)
		}
		var s GPUState
		cur, pend := p.modes(&s)
		if cur == pend {
			t.Errorf("%s: current and pending are one field", p.name)
		}
		*pend = true
		s.Reboot(nil)
		if !*cur {
			t.Errorf("%s: a reboot does not apply the pending mode", p.name)
		}
	}
	if len(GPUProperties()) != len(gpuProperties) {
		t.Error("GPUProperties does not list the table")
	}
}

// GPUState.Set follows each property's rule, without a farm (the shell's test backend relies on that).
func TestGPUStateSetRules(t *testing.T) {
	cat := MustDefaultCatalog()
	model := func(name string) *Model {
		m, ok := cat.Model(name)
		if !ok {
			t.Fatalf("no model %s", name)
		}
		return m
	}
	cases := []struct {
		name    string
		model   string
		busy    bool
		set     GPUSetting
		want    Outcome
		current bool // the property's mode in effect afterwards
		err     error
	}{
		{"A100 MIG needs a reset", "A100-40GB", false, GPUSetting{GPUPropMIG, true}, PendingReboot, false, nil},
		{"H100 MIG at once when idle", "H100-80GB", false, GPUSetting{GPUPropMIG, true}, Applied, true, nil},
		{"H100 MIG waits while busy", "H100-80GB", true, GPUSetting{GPUPropMIG, true}, PendingBusy, false, nil},
		{"MIG already off", "A100-40GB", false, GPUSetting{GPUPropMIG, false}, Applied, false, nil},
		{"L40S has no MIG", "L40S", false, GPUSetting{GPUPropMIG, true}, 0, false, ErrNotCapable},
		{"ECC off until reboot", "H100-80GB", false, GPUSetting{GPUPropECC, false}, PendingReboot, true, nil},
		{"ECC on L40S", "L40S", false, GPUSetting{GPUPropECC, false}, PendingReboot, true, nil},
		{"unknown property", "A100-40GB", false, GPUSetting{"power", true}, 0, false, ErrInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newGPUState(HostSpec{})
			got, err := s.Set(model(c.model), c.busy, c.set)
			if !errors.Is(err, c.err) || got != c.want {
				t.Fatalf("Set = %v, %v; want %v, %v", got, err, c.want, c.err)
			}
			if p, ok := lookupGPUProperty(c.set.Property); ok && err == nil {
				if cur, pend := p.modes(&s); *cur != c.current || *pend != c.set.On {
					t.Errorf("current %v pending %v; want %v %v", *cur, *pend, c.current, c.set.On)
				}
			}
		})
	}
}

// ECC memory: on at start, a change pending until the host reboots, then in effect; a reboot fault naming
// "ecc" drops it; the change is announced as an "ecc" event.
func TestECCModePendingUntilReboot(t *testing.T) {
	f := newFarm(t, a100Host("h"))
	var events []string
	f.Subscribe(func(e Event) { events = append(events, e.What) })
	g, _ := f.GPU("h", "0000:3c:00.0")
	if !g.ECCCurrent || !g.ECCPending {
		t.Fatalf("ECC at start: %+v", g.GPUState)
	}
	reboot := func() {
		t.Helper()
		must(t, f.SetMaintenance("h", true))
		must(t, f.BeginReboot("h"))
		must(t, f.EndReboot("h"))
	}
	for i, fault := range []bool{true, false} {
		if fault {
			must(t, f.SetRebootFault("h", RebootFault{Ignore: []string{string(GPUPropECC)}, Count: 1}))
		}
		o, err := f.SetGPU("h", "0000:3c:00.0", GPUSetting{Property: GPUPropECC, On: false})
		if err != nil || o != PendingReboot {
			t.Fatalf("SetGPU = %v, %v", o, err)
		}
		g, _ = f.GPU("h", "0000:3c:00.0")
		if !g.ECCCurrent || g.ECCPending {
			t.Fatalf("before reboot %d: %+v", i+1, g.GPUState)
		}
		reboot()
		g, _ = f.GPU("h", "0000:3c:00.0")
		if g.ECCCurrent != fault || g.ECCPending != fault {
			t.Fatalf("after reboot %d (fault %v): %+v", i+1, fault, g.GPUState)
		}
	}
	if other, _ := f.GPU("h", "0000:3b:00.0"); !other.ECCCurrent {
		t.Error("another GPU's ECC changed")
	}
	if events[0] != "rebootfault" || events[1] != string(GPUPropECC) {
		t.Errorf("events %v", events)
	}
	if _, err := f.SetGPU("h", "0000:99:00.0", GPUSetting{Property: GPUPropECC}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown GPU: %v", err)
	}
	if _, err := f.SetGPU("nope", "0000:3b:00.0", GPUSetting{Property: GPUPropECC}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown host: %v", err)
	}
}

// Every GPU gets a stable UUID of nvidia-smi's form, different per GPU and host.
func TestGPUUUIDs(t *testing.T) {
	f := newFarm(t, a100Host("a"), a100Host("b"))
	seen := map[string]bool{}
	for _, h := range f.Hosts() {
		for _, g := range h.GPUs {
			if len(g.UUID) != len("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx") || g.UUID[:4] != "GPU-" || seen[g.UUID] {
				t.Errorf("%s %s: UUID %q", h.Name, g.PCIID, g.UUID)
			}
			seen[g.UUID] = true
		}
	}
	if again, _ := f.GPU("a", "0000:3b:00.0"); again.UUID != gpuUUID("a", "0000:3b:00.0") {
		t.Errorf("UUID not stable: %s", again.UUID)
	}
}
