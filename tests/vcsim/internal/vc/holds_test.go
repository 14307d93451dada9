package vc

import (
	"strconv"
	"testing"
	"time"

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
