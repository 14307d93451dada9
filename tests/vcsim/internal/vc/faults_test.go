package vc

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/fault"
)

// missingRequired lists the fields of a decoded fault that the vim schema requires (xml tag without
// omitempty) but that are empty: strings, enums and managed object references (both type and value).
func missingRequired(v reflect.Value, path string) []string {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil
	}
	if ref, ok := v.Interface().(types.ManagedObjectReference); ok {
		if ref.Type == "" || ref.Value == "" {
			return []string{path}
		}
		return nil
	}
	var out []string
	for i := 0; i < v.NumField(); i++ {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Anonymous {
			out = append(out, missingRequired(v.Field(i), path)...)
			continue
		}
		tag := f.Tag.Get("xml")
		if tag == "" || tag == "-" {
			continue
		}
		name := path + "." + strings.Split(tag, ",")[0]
		required := !strings.Contains(tag, "omitempty")
		fv := v.Field(i)
		switch {
		case fv.Kind() == reflect.String && required && fv.Len() == 0:
			out = append(out, name)
		case fv.Kind() == reflect.Struct && required:
			out = append(out, missingRequired(fv, name)...)
		case fv.Kind() == reflect.Pointer || fv.Kind() == reflect.Interface:
			out = append(out, missingRequired(fv, name)...)
		}
	}
	return out
}

func TestMissingRequiredFindsEmptyFields(t *testing.T) {
	got := missingRequired(reflect.ValueOf(&types.DuplicateName{}), "DuplicateName")
	sort.Strings(got)
	if strings.Join(got, " ") != "DuplicateName.name DuplicateName.object" {
		t.Fatalf("checker missed the empty required fields: %v", got)
	}
	ok := &types.DuplicateName{Name: "x", Object: types.ManagedObjectReference{Type: "VirtualMachine", Value: "vm-1"}}
	if got := missingRequired(reflect.ValueOf(ok), "DuplicateName"); len(got) != 0 {
		t.Fatalf("complete fault reported as missing %v", got)
	}
}

// Every fault the control endpoint accepts decodes in govmomi's client with its required fields set
// and the armed message, both as a task error and as a SOAP fault.
func TestEveryArmableFaultDecodes(t *testing.T) {
	e := start(t, smallSpec())
	names := fault.Names()
	sort.Strings(names)
	vm := e.vm("vm-a")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			msg := "armed " + name + " <&> test"
			code, out := e.control("POST", "/gpusim/faults", map[string]any{
				"object": "vm-a", "method": "PowerOnVM_Task", "fault": name, "message": msg})
			if code != 200 {
				t.Fatalf("arm: %d %v", code, out)
			}
			fault, got := faultOf(e.wait(vm.PowerOn(e.ctx)))
			if fault == nil {
				t.Fatal("armed task fault did not fire")
			}
			checkFault(t, "task", name, fault, got, msg)
			if name == "InvalidPowerState" {
				ips := fault.(*types.InvalidPowerState)
				if ips.ExistingState != types.VirtualMachinePowerStatePoweredOff || ips.RequestedState != types.VirtualMachinePowerStatePoweredOn {
					t.Fatalf("power states %+v", ips)
				}
			}
			if name == "DuplicateName" {
				dn := fault.(*types.DuplicateName)
				if dn.Name != "vm-a" || dn.Object != vm.Reference() {
					t.Fatalf("DuplicateName names %q %v, not vm-a %v", dn.Name, dn.Object, vm.Reference())
				}
			}

			code, out = e.control("POST", "/gpusim/faults", map[string]any{
				"object": host1, "method": "QueryModules", "fault": name, "message": msg})
			if code != 200 {
				t.Fatalf("arm: %d %v", code, out)
			}
			_, err := e.kernel(host1).modules()
			if err == nil || !soap.IsSoapFault(err) {
				t.Fatalf("armed SOAP fault did not fire: %v", err)
			}
			sf := soap.ToSoapFault(err)
			vf, ok := sf.VimFault().(types.AnyType)
			if !ok || vf == nil {
				t.Fatalf("no fault detail: %+v", sf)
			}
			ptr := reflect.New(reflect.TypeOf(vf))
			ptr.Elem().Set(reflect.ValueOf(vf))
			bf, ok := ptr.Interface().(types.BaseMethodFault)
			if !ok {
				t.Fatalf("detail %T is not a method fault", vf)
			}
			checkFault(t, "SOAP", name, bf, sf.String, msg)
		})
	}
	// no message: the fault still decodes, and gets a readable message where vSphere has one
	code, _ := e.control("POST", "/gpusim/faults", map[string]any{
		"object": "vm-a", "method": "PowerOnVM_Task", "fault": "InsufficientGraphicsResourcesFault"})
	if code != 200 {
		t.Fatal(code)
	}
	if _, got := faultOf(e.wait(vm.PowerOn(e.ctx))); !strings.Contains(got, "graphics resource") {
		t.Fatalf("default message %q", got)
	}
}

func checkFault(t *testing.T, how, name string, fault types.BaseMethodFault, got, msg string) {
	t.Helper()
	if typ := reflect.TypeOf(fault).Elem().Name(); typ != name {
		t.Fatalf("%s: decoded %s, armed %s", how, typ, name)
	}
	if missing := missingRequired(reflect.ValueOf(fault), name); len(missing) > 0 {
		t.Fatalf("%s: required fields empty after decoding: %v (%+v)", how, missing, fault)
	}
	if got != msg {
		t.Fatalf("%s: message %q, armed %q", how, got, msg)
	}
}

// A fault armed on a cluster also covers its environment browser (QueryConfigTarget).
func TestClusterFaultCoversItsEnvironmentBrowser(t *testing.T) {
	e := start(t, smallSpec())
	code, out := e.control("POST", "/gpusim/faults", map[string]any{
		"object": "GPU-Cluster", "method": "QueryConfigTarget", "fault": "HostCommunication", "message": "link lost"})
	if code != 200 {
		t.Fatalf("arm: %d %v", code, out)
	}
	host := e.host(host1).Reference()
	_, err := methods.QueryConfigTarget(e.ctx, e.c.Client, &types.QueryConfigTarget{This: *e.browser(), Host: &host})
	if _, ok := soapFault(err).(types.HostCommunication); !ok || soap.ToSoapFault(err).String != "link lost" {
		t.Fatalf("armed QueryConfigTarget fault: %v", err)
	}
	if len(e.configTarget(host1).VendorDeviceGroupInfo) != 2 {
		t.Fatal("the fault fired twice")
	}
}

// vgpuctl's bookkeeping calls refused for want of a privilege name the privilege vSphere checks: a lock folder
// under the root folder, its removal, and the custom attribute definitions and values.
func TestNoPermissionNamesTheBookkeepingPrivilege(t *testing.T) {
	e := start(t, smallSpec())
	root := e.c.ServiceContent.RootFolder
	cfm := *e.c.ServiceContent.CustomFieldsManager
	arm := func(object, method string) {
		if code, out := e.control("POST", "/gpusim/faults", map[string]any{
			"object": object, "method": method, "fault": "NoPermission"}); code != 200 {
			t.Fatalf("arm %s %s: %d %v", object, method, code, out)
		}
	}
	privilegeOf := func(err error) string {
		f, ok := soapFault(err).(types.NoPermission)
		if !ok {
			t.Fatalf("not NoPermission: %v", err)
		}
		return f.PrivilegeId
	}
	arm(root.Value, "CreateFolder")
	_, err := methods.CreateFolder(e.ctx, e.c.Client, &types.CreateFolder{This: root, Name: "vgpuctl-lease-host-1"})
	if got := privilegeOf(err); got != "Folder.Create" {
		t.Fatalf("CreateFolder: %q", got)
	}
	arm("CustomFieldsManager", "AddCustomFieldDef")
	_, err = methods.AddCustomFieldDef(e.ctx, e.c.Client, &types.AddCustomFieldDef{This: cfm, Name: "vgpuctl.work"})
	if got := privilegeOf(err); got != "Global.ManageCustomFields" {
		t.Fatalf("AddCustomFieldDef: %q", got)
	}
	arm("CustomFieldsManager", "SetField")
	_, err = methods.SetField(e.ctx, e.c.Client, &types.SetField{This: cfm, Entity: e.vm("vm-a").Reference(), Key: 1})
	if got := privilegeOf(err); got != "Global.SetCustomField" {
		t.Fatalf("SetField: %q", got)
	}
	folder, err := methods.CreateFolder(e.ctx, e.c.Client, &types.CreateFolder{This: root, Name: "vgpuctl-lease-host-2"})
	e.must(err)
	arm(folder.Returnval.Value, "Destroy_Task")
	f, _ := faultOf(e.wait(object.NewFolder(e.c.Client, folder.Returnval).Destroy(e.ctx)))
	if np, ok := f.(*types.NoPermission); !ok || np.PrivilegeId != "Folder.Delete" {
		t.Fatalf("Destroy_Task of a folder: %#v", f)
	}
}
