package vc

import (
	"bytes"
	"net/http"
	"regexp"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/farm"
)

// faultTarget is what an armed fault needs to fill its required fields: the object called, its
// name, the method, and (for VMs) the power state.
type faultTarget struct {
	Ref        types.ManagedObjectReference
	Name       string
	Method     string
	PowerState types.VirtualMachinePowerState
	Task       *types.ManagedObjectReference // the object's most recent task, if any
	Msg        string
}

// reason is the armed message, or a default naming the fault.
func (t faultTarget) reason(fault string) string {
	if t.Msg != "" {
		return t.Msg
	}
	return fault + " armed through the gpusim control endpoint"
}

// requestedState is the power state a method asks for ("" when it asks for none).
func (t faultTarget) requestedState() types.VirtualMachinePowerState {
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

// privileges vSphere checks for common methods (NoPermission.privilegeId).
var privileges = map[string]string{
	"PowerOnVM_Task": "VirtualMachine.Interact.PowerOn", "PowerOffVM_Task": "VirtualMachine.Interact.PowerOff",
	"SuspendVM_Task": "VirtualMachine.Interact.Suspend", "ResetVM_Task": "VirtualMachine.Interact.Reset",
	"ReconfigVM_Task": "VirtualMachine.Config.Settings", "CloneVM_Task": "VirtualMachine.Provisioning.Clone",
	"Destroy_Task": "VirtualMachine.Inventory.Delete", "CreateVM_Task": "VirtualMachine.Inventory.Create",
	"EnterMaintenanceMode_Task": "Host.Config.Maintenance", "ExitMaintenanceMode_Task": "Host.Config.Maintenance",
	"RebootHost_Task": "Host.Config.Maintenance", "UpdateGraphicsConfig": "Host.Config.Settings",
	"UpdateModuleOptionString": "Host.Config.Settings", "CreateFolder": "Folder.Create",
	"AddCustomFieldDef": "Global.ManageCustomFields", "SetField": "Global.SetCustomField",
}

func (t faultTarget) privilege() string {
	if t.Method == "Destroy_Task" && t.Ref.Type == "Folder" {
		return "Folder.Delete"
	}
	if p, ok := privileges[t.Method]; ok {
		return p
	}
	return "System.View"
}

// knownFaults are the vim faults the control endpoint can arm. Each fills the fields the vim
// schema requires (DuplicateName.object, TaskInProgress.task, InvalidPowerState.existingState,
// ...), so that every client can decode it.
var knownFaults = map[string]func(t faultTarget) types.BaseMethodFault{
	"SystemError": func(t faultTarget) types.BaseMethodFault {
		return &types.SystemError{Reason: t.reason("SystemError")}
	},
	"InvalidState": func(faultTarget) types.BaseMethodFault { return &types.InvalidState{} },
	"InvalidPowerState": func(t faultTarget) types.BaseMethodFault {
		existing := t.PowerState
		if existing == "" {
			existing = types.VirtualMachinePowerStatePoweredOff
		}
		return &types.InvalidPowerState{RequestedState: t.requestedState(), ExistingState: existing}
	},
	"TaskInProgress": func(t faultTarget) types.BaseMethodFault {
		task := types.ManagedObjectReference{Type: "Task", Value: "task-" + t.Ref.Value + "-busy"}
		if t.Task != nil {
			task = *t.Task
		}
		return &types.TaskInProgress{Task: task}
	},
	"HostNotConnected":  func(faultTarget) types.BaseMethodFault { return &types.HostNotConnected{} },
	"HostCommunication": func(faultTarget) types.BaseMethodFault { return &types.HostCommunication{} },
	"NotAuthenticated": func(t faultTarget) types.BaseMethodFault {
		ref := t.Ref
		return &types.NotAuthenticated{NoPermission: types.NoPermission{Object: &ref, PrivilegeId: "System.View"}}
	},
	"NoPermission": func(t faultTarget) types.BaseMethodFault {
		ref := t.Ref
		return &types.NoPermission{Object: &ref, PrivilegeId: t.privilege()}
	},
	"InvalidArgument": func(faultTarget) types.BaseMethodFault { return &types.InvalidArgument{} },
	"NotSupported":    func(faultTarget) types.BaseMethodFault { return &types.NotSupported{} },
	"NotFound":        func(faultTarget) types.BaseMethodFault { return &types.NotFound{} },
	"ResourceInUse": func(t faultTarget) types.BaseMethodFault {
		return &types.ResourceInUse{Type: t.Ref.Type, Name: t.Name}
	},
	"Timedout":                   func(faultTarget) types.BaseMethodFault { return &types.Timedout{} },
	"RequestCanceled":            func(faultTarget) types.BaseMethodFault { return &types.RequestCanceled{} },
	"InsufficientResourcesFault": func(faultTarget) types.BaseMethodFault { return &types.InsufficientResourcesFault{} },
	"InsufficientGraphicsResourcesFault": func(faultTarget) types.BaseMethodFault {
		return &types.InsufficientGraphicsResourcesFault{}
	},
	"GenericVmConfigFault": func(t faultTarget) types.BaseMethodFault {
		return &types.GenericVmConfigFault{Reason: t.reason("GenericVmConfigFault")}
	},
	"ConcurrentAccess": func(faultTarget) types.BaseMethodFault { return &types.ConcurrentAccess{} },
	"DuplicateName": func(t faultTarget) types.BaseMethodFault {
		return &types.DuplicateName{Name: t.Name, Object: t.Ref}
	},
	"FileFault": func(t faultTarget) types.BaseMethodFault {
		file := "[datastore1] " + t.Name
		if t.Ref.Type == "VirtualMachine" {
			file = "[datastore1] " + t.Name + "/" + t.Name + ".vmx"
		}
		return &types.FileFault{File: file}
	},
	"RuntimeFault": func(faultTarget) types.BaseMethodFault { return &types.RuntimeFault{} },
}

// defaultMessages are the messages vSphere gives a fault when the control request names none.
var defaultMessages = map[string]string{
	"InsufficientGraphicsResourcesFault": farm.InsufficientGraphics,
}

// FaultNames lists the faults the control endpoint accepts.
func FaultNames() []string {
	var out []string
	for k := range knownFaults {
		out = append(out, k)
	}
	return out
}

// armedFault builds the armed fault `a` for a call of method on obj; the message (if any) is
// registered for task errors and carried in faultMessage for SOAP faults (see withFaultString).
func (s *Sim) armedFault(a *armed, obj mo.Reference, method string) types.BaseMethodFault {
	t := faultTarget{Ref: obj.Reference(), Name: s.objectName(obj), Method: method, Msg: a.Msg}
	if vm, ok := obj.(*simulator.VirtualMachine); ok {
		t.PowerState = vm.Runtime.PowerState
	}
	if e, ok := obj.(mo.Entity); ok {
		if tasks := e.Entity().RecentTask; len(tasks) > 0 {
			last := tasks[len(tasks)-1]
			t.Task = &last
		}
	}
	build, ok := knownFaults[a.Fault]
	if !ok {
		return &types.SystemError{Reason: a.Fault}
	}
	fault := build(t)
	msg := a.Msg
	if msg == "" {
		msg = defaultMessages[a.Fault]
	}
	if msg != "" {
		s.withMessage(fault, msg)
	}
	return fault
}

// objectName is an object's inventory name, or for a host's managers the host's name.
func (s *Sim) objectName(obj mo.Reference) string {
	if e, ok := obj.(mo.Entity); ok && e.Entity().Name != "" {
		return e.Entity().Name
	}
	if host, ok := managerHost(obj); ok {
		return host
	}
	return obj.Reference().Value
}

// faultMessageKey marks the faultMessage withFaultString copies into an empty faultstring.
const faultMessageKey = "com.vmware.gpusim.message"

// withMessage gives a fault its message: the task error's localizedMessage, and a faultMessage
// entry that becomes the SOAP faultstring (vcsim leaves it empty for faults raised by its handler).
func (s *Sim) withMessage(f types.BaseMethodFault, msg string) types.BaseMethodFault {
	s.messages.Store(f, msg)
	mf := f.GetMethodFault()
	mf.FaultMessage = append(mf.FaultMessage, types.LocalizableMessage{Key: faultMessageKey, Message: msg})
	return f
}

var (
	emptyFaultString = []byte("<faultstring></faultstring>")
	markedMessage    = regexp.MustCompile(`<faultMessage><key>` + regexp.QuoteMeta(faultMessageKey) + `</key><message>([^<]*)</message>`)
)

// withFaultString fills the empty faultstring of a SOAP fault response from its gpusim faultMessage,
// so that clients which read the message from faultstring (pyVmomi's msg) see it.
func withFaultString(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw := &faultWriter{ResponseWriter: w}
		next.ServeHTTP(fw, r)
		fw.finish()
	})
}

// faultWriter buffers HTTP 500 responses (SOAP faults) and passes everything else through.
type faultWriter struct {
	http.ResponseWriter
	buf *bytes.Buffer
}

func (fw *faultWriter) WriteHeader(code int) {
	if code == http.StatusInternalServerError && fw.buf == nil {
		fw.buf = new(bytes.Buffer)
		return
	}
	fw.ResponseWriter.WriteHeader(code)
}

func (fw *faultWriter) Write(b []byte) (int, error) {
	if fw.buf != nil {
		return fw.buf.Write(b)
	}
	return fw.ResponseWriter.Write(b)
}

func (fw *faultWriter) finish() {
	if fw.buf == nil {
		return
	}
	body := fw.buf.Bytes()
	if bytes.Contains(body, emptyFaultString) {
		if m := markedMessage.FindSubmatch(body); m != nil {
			filled := append(append([]byte("<faultstring>"), m[1]...), "</faultstring>"...)
			body = bytes.Replace(body, emptyFaultString, filled, 1)
		}
	}
	fw.ResponseWriter.Header().Del("Content-Length")
	fw.ResponseWriter.WriteHeader(http.StatusInternalServerError)
	_, _ = fw.ResponseWriter.Write(body)
}
