package vc

import (
	"reflect"
	"sync"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// Call-scoped wrappers. vcsim answers a call with the object the caller's session registry holds for its
// moref, and with the inventory object itself when the registry holds none; so route() puts the call's
// wrapper there (register) and the wrapper's method takes the call back first thing (redirected).
//
// One session can have several calls on one object in flight (vgpuctl clones two VMs from one template at
// once), and the registry has one slot per moref. The slot stays filled while any routed call on it has not
// reached its method: emptied by the first call, it would let the second reach vcsim's own method (a clone
// without gpusim's settings: BIOS firmware). And each call finds the wrapper route chose for it by its
// context, whichever call's wrapper the slot answered with (a failer's fault reaches the call it was armed
// for, another call's clone is no failure).

type slot struct {
	session string
	ref     types.ManagedObjectReference
}

var calls = struct {
	sync.Mutex
	chosen map[*simulator.Context]mo.Reference // the wrapper route chose for a call not yet at its method
	open   map[slot]int                        // such calls per session and moref
}{chosen: map[*simulator.Context]mo.Reference{}, open: map[slot]int{}}

// register fills the session's slot for w's moref (unless a call on it is open) and notes w as the wrapper of
// ctx's call.
func register(ctx *simulator.Context, w mo.Reference) {
	if ctx.Session == nil {
		return // vcsim answers a call without a session with route's object itself
	}
	k := slot{ctx.Session.Key, w.Reference()}
	calls.Lock()
	defer calls.Unlock()
	calls.chosen[ctx] = w
	if calls.open[k] == 0 {
		ctx.Session.Put(w)
	}
	calls.open[k]++
}

// taken ends ctx's routed call: the wrapper route chose for it, or w when route chose none (gpusim calling a
// wrapper's method from its own code, with the context of a call already taken); the last open call on a slot
// empties it.
func taken(ctx *simulator.Context, w mo.Reference) mo.Reference {
	if ctx.Session == nil {
		return w
	}
	calls.Lock()
	defer calls.Unlock()
	chosen, ok := calls.chosen[ctx]
	if !ok {
		return w
	}
	delete(calls.chosen, ctx)
	k := slot{ctx.Session.Key, chosen.Reference()}
	if calls.open[k]--; calls.open[k] > 0 {
		return chosen
	}
	delete(calls.open, k)
	ctx.Session.Remove(ctx, k.ref)
	return chosen
}

// redirected takes ctx's call back at the start of w's method; when route chose another wrapper for it, that
// wrapper's method answers (ok). A wrapper type answers every method the other wrapper types of its object
// answer, so that whichever the slot holds, the call arrives here.
func redirected(ctx *simulator.Context, w mo.Reference, method string, req any) (soap.HasFault, bool) {
	chosen := taken(ctx, w)
	if chosen == w {
		return nil, false
	}
	m := reflect.ValueOf(chosen).MethodByName(method)
	args := []reflect.Value{reflect.ValueOf(req)}
	if m.Type().NumIn() == 2 {
		args = []reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(req)}
	}
	return m.Call(args)[0].Interface().(soap.HasFault), true
}
