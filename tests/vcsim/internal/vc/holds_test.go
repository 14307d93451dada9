package vc

import (
	"strconv"
	"testing"
	"time"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

func holdsOf(e *env) []any {
	_, out := e.control("GET", "/gpusim/holds", nil)
	list, _ := out["holds"].([]any)
	return list
}

func TestHoldCatchesTaskUntilReleased(t *testing.T) {
	e := start(t, smallSpec())
	code, out := e.control("POST", "/gpusim/holds", map[string]any{"object": "vm-a", "method": "PowerOnVM_Task"})
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	id := int(out["id"].(float64))
	vm := e.vm("vm-a")
	done := make(chan error, 1)
	go func() { done <- e.wait(vm.PowerOn(e.ctx)) }()
	for i := 0; ; i++ { // the task's body reports its start, then waits
		h := holdsOf(e)[0].(map[string]any)
		if len(h["started"].([]any)) == 1 && h["waiting"].(float64) == 1 {
			break
		}
		if i > 2000 {
			t.Fatalf("the held task never started: %v", h)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if e.vmMO(vm, "runtime.powerState").Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
		t.Fatal("a held power-on ran") // and the VM can be read while its call is held
	}
	if code, _ := e.control("POST", "/gpusim/holds/"+strconv.Itoa(id)+"/release", nil); code != 200 {
		t.Fatalf("release: %d", code)
	}
	e.must(<-done)
	if e.vmMO(vm, "runtime.powerState").Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
		t.Fatal("the released power-on did not run")
	}
	e.must(e.wait(vm.PowerOff(e.ctx)))
	e.must(e.wait(vm.PowerOn(e.ctx))) // a released hold catches nothing more
}

func TestHoldRequests(t *testing.T) {
	e := start(t, smallSpec())
	cases := []struct {
		name string
		body map[string]any
		code int
	}{
		{"any object", map[string]any{"method": "CloneVM_Task"}, 200},
		{"named object", map[string]any{"object": "vm-a", "method": "ReconfigVM_Task", "count": 2}, 200},
		{"no method", map[string]any{"object": "vm-a"}, 400},
		{"unknown object", map[string]any{"object": "nope", "method": "PowerOnVM_Task"}, 400},
		{"negative count", map[string]any{"method": "PowerOnVM_Task", "count": -1}, 400},
		{"unknown field", map[string]any{"method": "PowerOnVM_Task", "seconds": 1}, 400},
	}
	for _, c := range cases {
		if code, out := e.control("POST", "/gpusim/holds", c.body); code != c.code {
			t.Errorf("%s: %d %v", c.name, code, out)
		}
	}
	if n := len(holdsOf(e)); n != 2 {
		t.Fatalf("holds: %d", n)
	}
	if code, _ := e.control("POST", "/gpusim/holds/99/release", nil); code != 400 {
		t.Fatalf("unknown hold released: %d", code)
	}
	e.control("DELETE", "/gpusim/holds", nil)
	for _, h := range holdsOf(e) {
		if !h.(map[string]any)["released"].(bool) {
			t.Fatalf("not released: %v", h)
		}
	}
}

// waitHeld polls until the hold has caught n calls that still wait.
func (e *env) waitHeld(id int, n int) map[string]any {
	e.t.Helper()
	for i := 0; ; i++ {
		for _, h := range holdsOf(e) {
			h := h.(map[string]any)
			if int(h["id"].(float64)) == id && h["waiting"].(float64) == float64(n) {
				return h
			}
		}
		if i > 2000 {
			e.t.Fatalf("hold %d never caught %d calls: %v", id, n, holdsOf(e))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestHostQueueHoldCatchesPowerOnsOfItsVMsOnly(t *testing.T) {
	spec := smallSpec()
	spec.VMs = append(spec.VMs, VMSpec{Name: "vm-c", Host: "esx-02.gpu.sim", MemoryMB: 8192, Locked: true})
	e := start(t, spec)
	t.Cleanup(func() { e.control("DELETE", "/gpusim/holds", nil) }) // before the simulator closes
	code, out := e.control("POST", "/gpusim/holds", map[string]any{"host": "esx-01.gpu.sim", "method": "PowerOnVM_Task"})
	if code != 200 || out["host"] != "esx-01.gpu.sim" {
		t.Fatalf("%d %v", code, out)
	}
	id := int(out["id"].(float64))
	host := e.host("esx-01.gpu.sim").Reference()
	task, err := e.vm("vm-b").Clone(e.ctx, e.folders().VmFolder, "made-later", types.VirtualMachineCloneSpec{
		Location: types.VirtualMachineRelocateSpec{Host: &host}})
	e.must(e.wait(task, err)) // a VM of the host made after the hold: caught too
	later := e.vm("made-later")
	done := make(chan error, 1)
	go func() { done <- e.wait(later.PowerOn(e.ctx)) }()
	h := e.waitHeld(id, 1)
	if started := h["started"].([]any); len(started) != 1 || started[0] != later.Reference().Value {
		t.Fatalf("caught: %v", h)
	}
	other := limitedClient(t, e, User{Name: e.sim.Spec.Username, Password: e.sim.Spec.Password})
	var m mo.VirtualMachine // another session reads and changes the held VM meanwhile
	e.must(other.RetrieveOne(e.ctx, later.Reference(), []string{"runtime.powerState", "config.changeVersion"}, &m))
	if m.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
		t.Fatal("the held power-on ran")
	}
	vm := object.NewVirtualMachine(other.Client, later.Reference())
	e.must(e.wait(vm.Reconfigure(e.ctx, types.VirtualMachineConfigSpec{NumCPUs: 2})))
	e.must(e.wait(e.vm("vm-c").PowerOn(e.ctx))) // another host's queue flows
	if code, _ := e.control("POST", "/gpusim/holds/"+strconv.Itoa(id)+"/release", nil); code != 200 {
		t.Fatalf("release: %d", code)
	}
	e.must(<-done)
	if e.vmMO(later, "runtime.powerState").Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
		t.Fatal("the released power-on did not run")
	}
}

func TestHostQueueHoldRequests(t *testing.T) {
	e := start(t, smallSpec())
	for _, c := range []struct {
		body map[string]any
		code int
	}{
		{map[string]any{"host": "esx-02.gpu.sim", "method": "PowerOnVM_Task"}, 200},
		{map[string]any{"host": "nope", "method": "PowerOnVM_Task"}, 400},
		{map[string]any{"host": "vm-a", "method": "PowerOnVM_Task"}, 400},
		{map[string]any{"host": "esx-02.gpu.sim", "object": "vm-a", "method": "PowerOnVM_Task"}, 400},
	} {
		if code, out := e.control("POST", "/gpusim/holds", c.body); code != c.code {
			t.Errorf("%v: %d %v", c.body, code, out)
		}
	}
}
