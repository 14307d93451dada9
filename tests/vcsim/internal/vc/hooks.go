package vc

import (
	"fmt"
	"log"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/fault"
)

// armed is a fault or delay armed through the control endpoint.
type armed struct {
	Object string        `json:"object"` // managed object id (vm-42, host-21)
	Name   string        `json:"name"`   // object name as given
	Method string        `json:"method"` // SOAP method name, e.g. PowerOnVM_Task
	Fault  string        `json:"fault,omitempty"`
	Count  int           `json:"count"`
	Delay  time.Duration `json:"-"`
	DelayS float64       `json:"delaySeconds,omitempty"`
	Msg    string        `json:"message,omitempty"`
	CPUs   int32         `json:"numCPUs,omitempty"` // a followup's change
}

type faultBook struct {
	mu     sync.Mutex
	faults []*armed
	delays []*armed
	// changes made right after a task's own work, before it reports: another client's change landing between
	// the caller's task and its next read (the VM's vCPUs after a ReconfigVM_Task or PowerOffVM_Task, the new
	// VM's after a CloneVM_Task)
	followups []*armed
	holds     *holdBook // tasks caught when their body starts (holds.go)
}

func newFaultBook() *faultBook { return &faultBook{holds: newHoldBook()} }

// take consumes one armed fault for (object, method), if any.
func (b *faultBook) take(object, method string) *armed {
	return b.consume(&b.faults, object, method)
}

// delay consumes one armed delay for (object, method) and returns it (0 if none).
func (b *faultBook) delay(object, method string) time.Duration {
	if a := b.consume(&b.delays, object, method); a != nil {
		return a.Delay
	}
	return 0
}

// followup consumes one armed followup for (object, method), if any.
func (b *faultBook) followup(object, method string) *armed {
	return b.consume(&b.followups, object, method)
}

// consume counts down the first entry of list armed for (object, method), dropping it at zero.
func (b *faultBook) consume(list *[]*armed, object, method string) *armed {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, a := range *list {
		if a.Object == object && a.Method == method {
			a.Count--
			if a.Count <= 0 {
				*list = append((*list)[:i], (*list)[i+1:]...)
			}
			return a
		}
	}
	return nil
}

// armed reports whether any fault is armed.
func (b *faultBook) armed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.faults) > 0
}

func (b *faultBook) list() (faults, delays, followups []armed) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.faults {
		faults = append(faults, *a)
	}
	for _, a := range b.delays {
		delays = append(delays, *a)
	}
	for _, a := range b.followups {
		followups = append(followups, *a)
	}
	return faults, delays, followups
}

func (b *faultBook) clear() {
	b.mu.Lock()
	b.faults, b.delays, b.followups = nil, nil, nil
	b.mu.Unlock()
}

// route is the simulator's Map.Handler: armed faults, unreachable hosts, and the GPU-aware wrappers.
func (s *Sim) route(ctx *simulator.Context, m *simulator.Method) (mo.Reference, types.BaseMethodFault) {
	obj := ctx.Map.Get(m.This)
	s.faults.holds.wait(m.This.Value, s.queueOf(obj), m.Name) // before any lock: others read the object meanwhile
	s.journal.call(m.Name)
	if fault := s.denied(ctx, m, obj); fault != nil { // privilege-limited users (privileges.go)
		return nil, fault
	}
	if obj == nil {
		return nil, nil // vcsim answers ManagedObjectNotFound
	}
	if fault := s.goneArgument(ctx, m); fault != nil {
		return nil, fault
	}
	if fault := s.unreachable(ctx, m, obj); fault != nil {
		return nil, fault
	}
	var fault types.BaseMethodFault
	a := s.faults.take(m.This.Value, m.Name)
	if a == nil && s.faults.armed() {
		if owner := s.managerOwner(obj); owner != "" {
			a = s.faults.take(owner, m.Name) // a host's faults cover its GPU managers, a cluster's its browser
		}
	}
	if a != nil {
		fault = s.armedFault(a, obj, m.Name)
		if f, ok := s.failerFor(obj, m.Name, fault); ok {
			register(ctx, f)
			return f, nil
		}
		return nil, fault
	}
	var w mo.Reference
	switch o := obj.(type) {
	case *simulator.VirtualMachine:
		if vmMethods[m.Name] {
			w = &gpuVM{VirtualMachine: o, sim: s}
		}
	case *simulator.HostSystem:
		if hostMethods[m.Name] {
			w = &gpuHost{HostSystem: o, sim: s, name: s.hostRefs[o.Self]}
		}
	case *simulator.EnvironmentBrowser:
		if m.Name == "QueryConfigTarget" {
			w = &gpuEnvBrowser{EnvironmentBrowser: o, sim: s}
		}
	case *simulator.Folder:
		if m.Name == "CreateVM_Task" {
			w = &gpuFolder{Folder: o, sim: s}
		}
	case *simulator.PerformanceManager:
		if perfMethods[m.Name] {
			w = &gpuPerf{PerformanceManager: o, sim: s} // performance_manager.go
		}
	case *simulator.AuthorizationManager:
		if authMethods[m.Name] {
			w = s.authFor(ctx, m, o)
		}
	}
	if w == nil {
		return nil, nil
	}
	register(ctx, w)
	return w, nil
}

// queueOf is the host whose queue a call on obj waits in (holds.go): a VM's host, else "".
func (s *Sim) queueOf(obj mo.Reference) string {
	if vm, ok := obj.(*simulator.VirtualMachine); ok {
		return s.hostOf(vm.Runtime.Host)
	}
	return ""
}

// unreachable refuses calls on a host that is down or rebooting, and on its VMs.
func (s *Sim) unreachable(ctx *simulator.Context, m *simulator.Method, obj mo.Reference) types.BaseMethodFault {
	var host string
	switch o := obj.(type) {
	case *simulator.HostSystem:
		host = s.hostRefs[o.Self]
	case *simulator.VirtualMachine:
		host = s.hostOf(o.Runtime.Host)
	default:
		host, _ = managerHost(obj)
	}
	if host == "" || s.Farm.Reachable(host) {
		return nil
	}
	return s.messages.With(fault.HostNotConnected(), "Host "+host+" is not responding.")
}

// taskMessages gives task errors a readable localizedMessage (the simulator writes the Go type name):
// messages given in Sim.messages, else the fault's first fault message, else the vim type name.
type taskMessages struct {
	sim *Sim
}

func (t *taskMessages) Reference() types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: "GpusimTaskMessages", Value: "gpusim-task-messages"}
}

// PutObject fills VM enums vcsim leaves empty and gives vcsim's tasks their WSDL method names
// ("ReconfigVm" -> "ReconfigVM_Task"), which pyVmomi resolves while a task runs.
func (t *taskMessages) PutObject(_ *simulator.Context, obj mo.Reference) {
	if vm, ok := obj.(*simulator.VirtualMachine); ok {
		fixVMEnums(vm)
		return
	}
	task, ok := obj.(*simulator.Task)
	if !ok {
		return
	}
	if !strings.HasSuffix(task.Info.Name, "_Task") && task.Info.Name != "" {
		task.Info.Name = wsdlTaskName(task.Info.Name)
	}
	t.sim.journal.task(task.Self.Value, task.Info.Name)
}

var taskNames = map[string]string{
	"PowerOn": "PowerOnVM_Task", "PowerOff": "PowerOffVM_Task", "Suspend": "SuspendVM_Task", "Reset": "ResetVM_Task",
	"ShutdownGuest": "ShutdownGuest", "RebootGuest": "RebootGuest",
}

func wsdlTaskName(name string) string {
	if n, ok := taskNames[name]; ok {
		return n
	}
	if strings.HasSuffix(name, "Vm") {
		return strings.TrimSuffix(name, "Vm") + "VM_Task"
	}
	return name + "_Task"
}
func (t *taskMessages) RemoveObject(*simulator.Context, types.ManagedObjectReference) {}

func (t *taskMessages) UpdateObject(_ *simulator.Context, obj mo.Reference, changes []types.PropertyChange) {
	task, ok := obj.(*mo.Task)
	if !ok || task.Info.Error == nil {
		return
	}
	for i := range changes {
		if changes[i].Name != "info.error" {
			continue
		}
		lmf := task.Info.Error
		if !strings.HasPrefix(lmf.LocalizedMessage, "*types.") {
			continue
		}
		lmf.LocalizedMessage = t.sim.messages.Message(lmf.Fault)
		changes[i].Val = *lmf
	}
}

// safely runs a task body and turns a panic into a SystemError.
func safely(fn func(*simulator.Task) (types.AnyType, types.BaseMethodFault)) func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
	return func(t *simulator.Task) (res types.AnyType, f types.BaseMethodFault) {
		defer func() {
			if r := recover(); r != nil {
				log.Printf("gpusim: task panic: %v\n%s", r, debug.Stack())
				res, f = nil, fault.SystemError(fmt.Sprint(r))
			}
		}()
		return fn(t)
	}
}

// fixVMEnums fills enum fields vcsim leaves empty, which pyVmomi cannot deserialize.
func fixVMEnums(vm *simulator.VirtualMachine) {
	if vm.Runtime.FaultToleranceState == "" {
		vm.Runtime.FaultToleranceState = types.VirtualMachineFaultToleranceStateNotConfigured
	}
	if vm.Runtime.RecordReplayState == "" {
		vm.Runtime.RecordReplayState = types.VirtualMachineRecordReplayStateInactive
	}
	vm.Summary.Runtime.FaultToleranceState = vm.Runtime.FaultToleranceState
	vm.Summary.Runtime.RecordReplayState = vm.Runtime.RecordReplayState
	if vm.Guest != nil && vm.Guest.GuestState == "" {
		vm.Guest.GuestState = "notRunning"
	}
}

// managerOwner returns the moref value of the object whose armed faults also cover obj: the host of
// a host's GPU manager, the cluster (or compute resource) of an environment browser; else "".
func (s *Sim) managerOwner(obj mo.Reference) string {
	if b, ok := obj.(*simulator.EnvironmentBrowser); ok {
		return s.browserOwner(b.Self)
	}
	name, _ := managerHost(obj)
	if h, ok := s.hosts[name]; ok {
		return h.Self.Value
	}
	return ""
}

// browserOwner returns the moref value of the compute resource owning an environment browser, or "".
func (s *Sim) browserOwner(ref types.ManagedObjectReference) string {
	if cr := browserComputeResource(s.ctx.Map, ref); cr != nil {
		return cr.Self.Value
	}
	return ""
}

// browserComputeResource finds the cluster or standalone compute resource owning an environment browser.
func browserComputeResource(reg *simulator.Registry, ref types.ManagedObjectReference) *mo.ComputeResource {
	for _, kind := range []string{"ClusterComputeResource", "ComputeResource"} {
		for _, obj := range reg.All(kind) {
			var cr *mo.ComputeResource
			switch c := obj.(type) {
			case *simulator.ClusterComputeResource:
				cr = &c.ComputeResource
			case *mo.ComputeResource:
				cr = c
			}
			if cr != nil && cr.EnvironmentBrowser != nil && *cr.EnvironmentBrowser == ref {
				return cr
			}
		}
	}
	return nil
}
