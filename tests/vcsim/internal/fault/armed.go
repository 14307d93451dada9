package fault

import (
	"sort"

	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// The faults the control endpoint arms by name (POST /gpusim/faults): a call of the armed method on the armed
// object gets the fault instead of its answer.

// Target is what an armed fault needs to fill its required fields: the object called, its
// name, the method, and (for VMs) the power state.
type Target struct {
	Ref        types.ManagedObjectReference
	Name       string
	Method     string
	PowerState types.VirtualMachinePowerState
	Task       *types.ManagedObjectReference // the object's most recent task, if any
	Msg        string
}

// reason is the armed message, or a default naming the fault.
func (t Target) reason(fault string) string {
	if t.Msg != "" {
		return t.Msg
	}
	return fault + " armed through the gpusim control endpoint"
}

// requestedState is the power state a method asks for ("" when it asks for none).
func (t Target) requestedState() types.VirtualMachinePowerState {
	switch t.Method {
	case "PowerOnVM_Task", "ResetVM_Task":
		return types.VirtualMachinePowerStatePoweredOn
	case "PowerOffVM_Task", "ShutdownGuest", "Destroy_Task":
		return types.VirtualMachinePowerStatePoweredOff
	case "SuspendVM_Task":
		return types.VirtualMachinePowerStateSuspended
	}
	return ""
}

// privilege is the privilege NoPermission names for the armed call (MethodPrivilege; System.View for a method
// that needs no other).
func (t Target) privilege() string {
	if p := MethodPrivilege(t.Method, t.Ref.Type); p != "" {
		return p
	}
	return "System.View"
}

// knownFaults are the vim faults the control endpoint can arm. Each fills the fields the vim
// schema requires (DuplicateName.object, TaskInProgress.task, InvalidPowerState.existingState,
// ...), so that every client can decode it.
var knownFaults = map[string]func(t Target) types.BaseMethodFault{
	"SystemError": func(t Target) types.BaseMethodFault {
		return &types.SystemError{Reason: t.reason("SystemError")}
	},
	"InvalidState": func(Target) types.BaseMethodFault { return &types.InvalidState{} },
	"InvalidLogin": func(Target) types.BaseMethodFault { return &types.InvalidLogin{} },
	"InvalidPowerState": func(t Target) types.BaseMethodFault {
		existing := t.PowerState
		if existing == "" {
			existing = types.VirtualMachinePowerStatePoweredOff
		}
		return &types.InvalidPowerState{RequestedState: t.requestedState(), ExistingState: existing}
	},
	"TaskInProgress": func(t Target) types.BaseMethodFault {
		task := types.ManagedObjectReference{Type: "Task", Value: "task-" + t.Ref.Value + "-busy"}
		if t.Task != nil {
			task = *t.Task
		}
		return &types.TaskInProgress{Task: task}
	},
	"HostNotConnected":  func(Target) types.BaseMethodFault { return &types.HostNotConnected{} },
	"HostCommunication": func(Target) types.BaseMethodFault { return &types.HostCommunication{} },
	"NotAuthenticated": func(t Target) types.BaseMethodFault {
		ref := t.Ref
		return &types.NotAuthenticated{NoPermission: types.NoPermission{Object: &ref, PrivilegeId: "System.View"}}
	},
	"NoPermission": func(t Target) types.BaseMethodFault {
		ref := t.Ref
		return &types.NoPermission{Object: &ref, PrivilegeId: t.privilege()}
	},
	"InvalidArgument": func(Target) types.BaseMethodFault { return &types.InvalidArgument{} },
	"NotSupported":    func(Target) types.BaseMethodFault { return &types.NotSupported{} },
	"NotFound":        func(Target) types.BaseMethodFault { return &types.NotFound{} },
	"ResourceInUse": func(t Target) types.BaseMethodFault {
		return &types.ResourceInUse{Type: t.Ref.Type, Name: t.Name}
	},
	"Timedout":                   func(Target) types.BaseMethodFault { return &types.Timedout{} },
	"RequestCanceled":            func(Target) types.BaseMethodFault { return &types.RequestCanceled{} },
	"InsufficientResourcesFault": func(Target) types.BaseMethodFault { return &types.InsufficientResourcesFault{} },
	"InsufficientGraphicsResourcesFault": func(Target) types.BaseMethodFault {
		return &types.InsufficientGraphicsResourcesFault{}
	},
	"GenericVmConfigFault": func(t Target) types.BaseMethodFault {
		return &types.GenericVmConfigFault{Reason: t.reason("GenericVmConfigFault")}
	},
	"ConcurrentAccess": func(Target) types.BaseMethodFault { return &types.ConcurrentAccess{} },
	"DuplicateName": func(t Target) types.BaseMethodFault {
		return &types.DuplicateName{Name: t.Name, Object: t.Ref}
	},
	"FileFault": func(t Target) types.BaseMethodFault {
		file := "[datastore1] " + t.Name
		if t.Ref.Type == "VirtualMachine" {
			file = "[datastore1] " + t.Name + "/" + t.Name + ".vmx"
		}
		return &types.FileFault{File: file}
	},
	"RuntimeFault": func(Target) types.BaseMethodFault { return &types.RuntimeFault{} },
}

// defaultMessages are the messages vSphere gives a fault when the control request names none.
var defaultMessages = map[string]string{
	"InsufficientGraphicsResourcesFault": farm.InsufficientGraphics,
}

// Names lists the faults the control endpoint accepts, sorted.
func Names() []string {
	var out []string
	for k := range knownFaults {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Known reports whether name is a fault the control endpoint accepts.
func Known(name string) bool {
	_, ok := knownFaults[name]
	return ok
}

// Armed builds the armed fault name for a call described by t, and the message it carries: t.Msg, else the
// one vSphere gives that fault, else none. An unknown name is a SystemError naming it.
func Armed(name string, t Target) (types.BaseMethodFault, string) {
	build, ok := knownFaults[name]
	if !ok {
		return SystemError(name), ""
	}
	msg := t.Msg
	if msg == "" {
		msg = defaultMessages[name]
	}
	return build(t), msg
}
