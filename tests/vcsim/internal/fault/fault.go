// Package fault builds the vim faults gpusim's managed objects raise, in one place: each fault with the fields
// the vim schema requires filled (so that every client decodes it), the message a fault carries (a task error's
// localizedMessage and the SOAP faultstring, through a Book), the faults the control endpoint arms by name
// (armed.go), and the SOAP faults of synchronous methods, farm errors included (soap.go).
package fault

import (
	"fmt"
	"strings"
	"sync"

	"github.com/vmware/govmomi/vim25/types"
)

// Book keeps the message gpusim gives each fault it raises, for task errors (vcsim writes the Go type name
// there) and SOAP faultstrings (vcsim leaves them empty for faults raised by its handler).
type Book struct {
	messages sync.Map // types.BaseMethodFault -> message
}

// messageKey marks the faultMessage WithFaultString copies into an empty faultstring.
const messageKey = "com.vmware.gpusim.message"

// With gives a fault its message: the task error's localizedMessage, and a faultMessage entry that becomes
// the SOAP faultstring (WithFaultString).
func (b *Book) With(f types.BaseMethodFault, msg string) types.BaseMethodFault {
	b.messages.Store(f, msg)
	mf := f.GetMethodFault()
	mf.FaultMessage = append(mf.FaultMessage, types.LocalizableMessage{Key: messageKey, Message: msg})
	return f
}

// Message is a fault's message: the one it was given, else its first fault message, else the vim type name.
func (b *Book) Message(f types.BaseMethodFault) string {
	if msg, ok := b.messages.Load(f); ok {
		return msg.(string)
	}
	if f == nil {
		return "unknown error"
	}
	if fm := f.GetMethodFault().FaultMessage; len(fm) > 0 && fm[0].Message != "" {
		return fm[0].Message
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", f), "*types.")
}

// The faults gpusim's own rules raise (the vGPU, NIC, maintenance and migration rules; routing).

// InvalidState: an operation the object's state does not allow.
func InvalidState() types.BaseMethodFault { return &types.InvalidState{} }

// InsufficientGraphics: no GPU on the host can take the vGPUs (the message: farm.InsufficientGraphics).
func InsufficientGraphics() types.BaseMethodFault { return &types.InsufficientGraphicsResourcesFault{} }

// InsufficientResources: the host's NICs cannot give the VM its virtual functions or passthrough devices.
func InsufficientResources() types.BaseMethodFault { return &types.InsufficientResourcesFault{} }

// ConcurrentAccess: another operation changed the object (a stale changeVersion).
func ConcurrentAccess() types.BaseMethodFault { return &types.ConcurrentAccess{} }

// GenericVMConfig: a VM configuration the host refuses, with its reason.
func GenericVMConfig(reason string) types.BaseMethodFault {
	return &types.GenericVmConfigFault{Reason: reason}
}

// TooManyDevices: more vGPUs than a VM may have.
func TooManyDevices() types.BaseMethodFault { return &types.TooManyDevices{} }

// InvalidDeviceSpec: the device change at index is invalid.
func InvalidDeviceSpec(index int) types.BaseMethodFault {
	return &types.InvalidDeviceSpec{DeviceIndex: int32(index)}
}

// DeviceHotPlugNotSupported: the device change at index needs the VM powered off.
func DeviceHotPlugNotSupported(index int) types.BaseMethodFault {
	return &types.DeviceHotPlugNotSupported{InvalidDeviceSpec: types.InvalidDeviceSpec{DeviceIndex: int32(index)}}
}

// DisallowedMigrationDeviceAttached: a running VM has a device (what) that cannot move to another host.
func DisallowedMigrationDeviceAttached(what string) types.BaseMethodFault {
	return &types.DisallowedMigrationDeviceAttached{Fault: types.LocalizedMethodFault{LocalizedMessage: what}}
}

// MigrationDisabled: vCenter does not allow moving running vGPU VMs.
func MigrationDisabled() types.BaseMethodFault {
	return &types.MigrationDisabled{MigrationFault: types.MigrationFault{}}
}

// NicSettingMismatch: a customization names another number of adapters than the VM has.
func NicSettingMismatch(inSpec, inVM int) types.BaseMethodFault {
	return &types.NicSettingMismatch{NumberOfNicsInSpec: int32(inSpec), NumberOfNicsInVM: int32(inVM)}
}

// HostNotConnected: the host is down or rebooting.
func HostNotConnected() types.BaseMethodFault { return &types.HostNotConnected{} }

// ManagedObjectNotFound: a call names an object that no longer exists.
func ManagedObjectNotFound(ref types.ManagedObjectReference) types.BaseMethodFault {
	return &types.ManagedObjectNotFound{Obj: ref}
}

// NoPermission: the user lacks priv on ref, named as vCenter names it (also in missingPrivileges).
func NoPermission(ref types.ManagedObjectReference, priv string) types.BaseMethodFault {
	return &types.NoPermission{Object: &ref, PrivilegeId: priv,
		MissingPrivileges: []types.NoPermissionEntityPrivileges{{Entity: ref, PrivilegeIds: []string{priv}}}}
}

// InvalidPowerState: the VM is in existing where the method needs requested.
func InvalidPowerState(requested, existing types.VirtualMachinePowerState) types.BaseMethodFault {
	return &types.InvalidPowerState{RequestedState: requested, ExistingState: existing}
}

// SystemError: gpusim itself failed (a panic, a task that left nothing behind), with the reason.
func SystemError(reason string) types.BaseMethodFault { return &types.SystemError{Reason: reason} }
