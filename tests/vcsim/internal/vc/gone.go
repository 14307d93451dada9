package vc

import (
	"reflect"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/fault"
)

// Calls that act on an object that no longer exists. vcsim answers a call on a destroyed object (its `this`)
// with ManagedObjectNotFound, as vCenter does; but a method that acts on an entity passed as an argument
// (CustomFieldsManager.SetField on a destroyed VM) reaches its handler, which dereferences it: a panic,
// answered as an internal error. vCenter answers ManagedObjectNotFound naming the entity; so does gpusim,
// before the handler runs. (Other arguments keep their handlers' answers: QueryConfigTarget's host is
// InvalidArgument.)

// entityArguments are the methods whose object arguments are the entities they act on.
var entityArguments = map[string]bool{"SetField": true}

var moRefType = reflect.TypeOf(types.ManagedObjectReference{})

// goneArgument returns ManagedObjectNotFound for the first entity a call of entityArguments acts on (a
// reference among its request's fields other than `this`) that neither the inventory nor the caller's
// session holds; nil when every one exists.
func (s *Sim) goneArgument(ctx *simulator.Context, m *simulator.Method) types.BaseMethodFault {
	if !entityArguments[m.Name] {
		return nil
	}
	body := reflect.ValueOf(m.Body)
	if body.Kind() == reflect.Pointer {
		body = body.Elem()
	}
	if body.Kind() != reflect.Struct {
		return nil
	}
	for i := 0; i < body.NumField(); i++ {
		if body.Type().Field(i).Name == "This" {
			continue
		}
		ref, ok := refOf(body.Field(i))
		if ok && !s.exists(ctx, ref) {
			return s.messages.With(fault.ManagedObjectNotFound(ref), gone(ref))
		}
	}
	return nil
}

// refOf is a request field's object reference (a value or a non-nil pointer).
func refOf(v reflect.Value) (types.ManagedObjectReference, bool) {
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Type() != moRefType {
		return types.ManagedObjectReference{}, false
	}
	ref := v.Interface().(types.ManagedObjectReference)
	return ref, ref.Value != ""
}

func (s *Sim) exists(ctx *simulator.Context, ref types.ManagedObjectReference) bool {
	if ctx.Map.Get(ref) != nil {
		return true
	}
	return ctx.Session != nil && ctx.Session.Get(ref) != nil
}

// gone is vCenter's message for an object that is not (or no longer) there.
func gone(ref types.ManagedObjectReference) string {
	return "The object 'vim." + ref.Type + ":" + ref.Value + "' has already been deleted or has not been completely created"
}
