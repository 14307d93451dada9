package vc

import (
	"strings"
	"testing"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// answering is a wrapper that says which wrapper answered a call.
type answering struct {
	*simulator.VirtualMachine

	answered *string
	name     string
}

func (a *answering) ResetVMTask(ctx *simulator.Context, req *types.ResetVM_Task) soap.HasFault {
	if res, ok := redirected(ctx, a, "ResetVMTask", req); ok {
		return res
	}
	*a.answered = a.name
	return &methods.ResetVM_TaskBody{}
}

func sessionCalls(e *env) (*simulator.Session, *simulator.Context, *simulator.Context) {
	session := &simulator.Session{UserSession: types.UserSession{Key: "calls-test"}, Registry: simulator.NewRegistry(),
		Map: e.sim.ctx.Map}
	return session, &simulator.Context{Session: session, Map: e.sim.ctx.Map},
		&simulator.Context{Session: session, Map: e.sim.ctx.Map}
}

// Two calls of one session on one VM, routed one after the other before either reaches its method (vgpuctl's
// two clones of one template): the second finds a wrapper in the session's slot after the first took its call
// back, so vcsim never answers it with the VM itself; the slot empties with the last call.
func TestTwoCallsOnOneObjectKeepTheSlotUntilBothArrive(t *testing.T) {
	e := start(t, smallSpec())
	vm, ok := e.sim.vmObject(e.vm("vm-a").Reference())
	if !ok {
		t.Fatal("vm-a not found")
	}
	session, first, second := sessionCalls(e)
	var answered string
	a := &answering{VirtualMachine: vm, answered: &answered, name: "first's"}
	b := &answering{VirtualMachine: vm, answered: &answered, name: "second's"}
	register(first, a)
	register(second, b)

	slotted := session.Get(vm.Self) // what vcsim dispatches the first call to
	if _, ok := slotted.(*answering); !ok {
		t.Fatalf("the slot holds %T, not a wrapper", slotted)
	}
	slotted.(*answering).ResetVMTask(first, &types.ResetVM_Task{This: vm.Self})
	if answered != "first's" {
		t.Fatalf("the first call was answered by the %s wrapper", answered)
	}

	slotted = session.Get(vm.Self) // the second call, after the first took its call back
	if _, ok := slotted.(*answering); !ok {
		t.Fatalf("after the first call the slot holds %T: vcsim would answer the second with the VM itself", slotted)
	}
	slotted.(*answering).ResetVMTask(second, &types.ResetVM_Task{This: vm.Self})
	if answered != "second's" {
		t.Fatalf("the second call was answered by the %s wrapper", answered)
	}
	if got := session.Get(vm.Self); got != mo.Reference(vm) {
		t.Fatalf("after both calls the slot still holds %T", got)
	}
}

// A wrapper's method called by gpusim's own code, with the context of a call already taken back, answers itself.
func TestAWrappersMethodCalledByGpusimAnswersItself(t *testing.T) {
	e := start(t, smallSpec())
	vm, _ := e.sim.vmObject(e.vm("vm-a").Reference())
	_, first, _ := sessionCalls(e)
	var answered string
	a := &answering{VirtualMachine: vm, answered: &answered, name: "routed"}
	inner := &answering{VirtualMachine: vm, answered: &answered, name: "inner"}
	register(first, a)
	a.ResetVMTask(first, &types.ResetVM_Task{This: vm.Self})
	inner.ResetVMTask(first, &types.ResetVM_Task{This: vm.Self})
	if answered != "inner" {
		t.Fatalf("gpusim's own call was answered by the %s wrapper", answered)
	}
}

// A fault armed on a method no failer of the object's type answers (a host's Destroy_Task) reaches the call as
// its SOAP fault: the call neither runs vcsim's own method nor leaves a wrapper in the session.
func TestAFaultNoFailerAnswersIsTheCallsFault(t *testing.T) {
	e := start(t, smallSpec())
	code, out := e.control("POST", "/gpusim/faults", map[string]any{
		"object": host1, "method": "Destroy_Task", "fault": "SystemError", "count": 1, "message": "injected"})
	if code != 200 {
		t.Fatalf("%d %v", code, out)
	}
	host := e.host(host1)
	err := e.wait(host.Destroy(e.ctx))
	if !soap.IsSoapFault(err) || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("armed Destroy_Task fault: %v", err)
	}
	e.host(host1) // still there
	e.must(e.wait(host.EnterMaintenanceMode(e.ctx, 0, false, nil)))
}
