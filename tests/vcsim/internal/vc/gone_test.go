package vc

import (
	"testing"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/property"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// notFound reports whether err is vCenter's ManagedObjectNotFound for ref.
func notFound(err error, ref types.ManagedObjectReference) bool {
	if err == nil || !soap.IsSoapFault(err) {
		return false
	}
	f, ok := soap.ToSoapFault(err).VimFault().(types.ManagedObjectNotFound)
	return ok && f.Obj == ref
}

func TestCallsOnADestroyedVMAnswerManagedObjectNotFound(t *testing.T) {
	e := start(t, smallSpec())
	vm := e.vm("vm-a")
	ref := vm.Reference()
	cfm := object.NewCustomFieldsManager(e.c.Client)
	key, err := cfm.Add(e.ctx, "probe", "VirtualMachine", nil, nil)
	e.must(err)
	e.must(e.wait(vm.Destroy(e.ctx)))

	_, err = methods.SetField(e.ctx, e.c.Client, &types.SetField{This: cfm.Reference(), Entity: ref, Key: key.Key, Value: "x"})
	if !notFound(err, ref) {
		t.Errorf("SetField: %v", err)
	}
	_, err = vm.PowerOn(e.ctx)
	if !notFound(err, ref) {
		t.Errorf("PowerOnVM_Task: %v", err)
	}
	_, err = vm.Destroy(e.ctx)
	if !notFound(err, ref) {
		t.Errorf("Destroy_Task: %v", err)
	}
	var m mo.VirtualMachine
	err = property.DefaultCollector(e.c.Client).RetrieveOne(e.ctx, ref, []string{"name"}, &m)
	if !notFound(err, ref) {
		t.Errorf("RetrieveProperties: %v", err)
	}
}
