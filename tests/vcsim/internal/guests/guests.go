// Package guests gives each VM gpusim powers on a guest, as a hypervisor boots a VM's disk: a hook program
// starts the VM's guest when the VM powers on, stops it when the VM powers off or suspends (its disk stays),
// and removes it when the VM is destroyed. Once the guest's SSH server answers, gpusim reports the guest's
// address and state the way VMware Tools does (vc.Sim.ReportGuest); at power-off it reports the guest not
// running and without an address. The hook vgpuctl uses is scripts/guests/guestctl.sh (Debian chroots with
// sshd, each in its own network namespace); see Script.
package guests

import (
	"context"
	"regexp"
	"sort"
	"strconv"
	"sync"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"

	"gpusim/internal/vc"
)

// MaxGuests is how many guests can run at once: guest i has the address .(10+i) of a /24.
const MaxGuests = 244

// Hook starts, stops and removes the guest of one index; Down removes every guest (gpusim stops).
type Hook interface {
	Start(ctx context.Context, index int, hostname string) (address string, err error)
	Stop(ctx context.Context, index int) error
	Remove(ctx context.Context, index int) error
	Down(ctx context.Context) error
}

// Reporter sets a VM's guest properties (vc.Sim.ReportGuest).
type Reporter func(ref types.ManagedObjectReference, r vc.GuestReport) error

// Info is one VM's guest, as GET /gpusim/guests shows it.
type Info struct {
	VM      string `json:"vm"`
	Ref     string `json:"ref"`
	Index   int    `json:"index"`
	State   string `json:"state"` // starting | running | stopping | stopped | removing | failed
	Address string `json:"address,omitempty"`
	Error   string `json:"error,omitempty"`
}

type kind int

const (
	powerOn kind = iota
	powerOff
	destroyed
)

type event struct {
	kind kind
	gen  int
}

type vmGuest struct {
	info    Info
	ref     types.ManagedObjectReference
	gen     int // bumped by every event: a start reports its guest only when no event came after it
	queue   []event
	working bool
}

// Manager runs each VM's power events through the hook, one at a time per VM, VMs side by side.
type Manager struct {
	hook   Hook
	report Reporter
	logf   func(string, ...any)
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	idle   *sync.Cond // signalled when a VM's queue runs empty
	vms    map[string]*vmGuest
	used   [MaxGuests + 1]bool
	busy   int
	closed bool
	wg     sync.WaitGroup
}

// New returns a Manager; Watch connects it to a simulator's power events.
func New(hook Hook, report Reporter, logf func(string, ...any)) *Manager {
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{hook: hook, report: report, logf: logf, ctx: ctx, cancel: cancel, vms: map[string]*vmGuest{}}
	m.idle = sync.NewCond(&m.mu)
	return m
}

// PoweredOn starts the VM's guest (its disk from an earlier start, if any).
func (m *Manager) PoweredOn(ref types.ManagedObjectReference, name string) {
	m.enqueue(ref, name, powerOn)
}

// PoweredOff stops the VM's guest and reports it not running.
func (m *Manager) PoweredOff(ref types.ManagedObjectReference) { m.enqueue(ref, "", powerOff) }

// Destroyed removes the VM's guest and its disk.
func (m *Manager) Destroyed(ref types.ManagedObjectReference) { m.enqueue(ref, "", destroyed) }

func (m *Manager) enqueue(ref types.ManagedObjectReference, name string, k kind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	g := m.vms[ref.Value]
	if g == nil {
		if k != powerOn {
			return // a VM that never ran a guest
		}
		index := m.freeIndex()
		if index == 0 {
			m.logf("%s: no guest: %d guests already run", name, MaxGuests)
			return
		}
		m.used[index] = true
		g = &vmGuest{ref: ref, info: Info{VM: name, Ref: ref.Value, Index: index, State: "stopped"}}
		m.vms[ref.Value] = g
	}
	g.gen++
	g.queue = append(g.queue, event{kind: k, gen: g.gen})
	if !g.working {
		g.working = true
		m.busy++
		m.wg.Add(1)
		go m.work(g)
	}
}

func (m *Manager) freeIndex() int {
	for i := 1; i <= MaxGuests; i++ {
		if !m.used[i] {
			return i
		}
	}
	return 0
}

func (m *Manager) work(g *vmGuest) {
	defer m.wg.Done()
	for {
		m.mu.Lock()
		if len(g.queue) == 0 || m.ctx.Err() != nil {
			g.working = false
			m.busy--
			m.idle.Broadcast()
			m.mu.Unlock()
			return
		}
		ev := g.queue[0]
		g.queue = g.queue[1:]
		m.mu.Unlock()
		switch ev.kind {
		case powerOn:
			m.start(g, ev)
		case powerOff:
			m.stop(g)
		case destroyed:
			m.remove(g, ev)
		}
	}
}

func (m *Manager) setState(g *vmGuest, state, address, errText string) Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	g.info.State, g.info.Address, g.info.Error = state, address, errText
	return g.info
}

func (m *Manager) start(g *vmGuest, ev event) {
	info := m.setState(g, "starting", "", "")
	// booting: VMware Tools not running yet, no address (none left from an earlier boot either)
	_ = m.report(g.ref, vc.GuestReport{State: "notRunning"})
	name := Hostname(info.VM, info.Index)
	address, err := m.hook.Start(m.ctx, info.Index, name)
	if err != nil {
		m.setState(g, "failed", "", err.Error())
		m.logf("%s: guest %d did not start: %v", info.VM, info.Index, err)
		return
	}
	m.mu.Lock()
	current := g.gen == ev.gen
	m.mu.Unlock()
	m.setState(g, "running", address, "")
	if !current {
		return // the VM powered off (or on again) meanwhile: the next event reports
	}
	if err := m.report(g.ref, vc.GuestReport{IP: address, State: "running", Hostname: name}); err != nil {
		m.logf("%s: guest %d: %v", info.VM, info.Index, err)
		return
	}
	m.logf("%s: guest %d running at %s", info.VM, info.Index, address)
}

func (m *Manager) stop(g *vmGuest) {
	info := m.setState(g, "stopping", "", "")
	_ = m.report(g.ref, vc.GuestReport{State: "notRunning"}) // first: the VM is off whatever the hook takes
	if err := m.hook.Stop(m.ctx, info.Index); err != nil {
		m.setState(g, "failed", "", err.Error())
		m.logf("%s: guest %d did not stop: %v", info.VM, info.Index, err)
		return
	}
	m.setState(g, "stopped", "", "")
}

func (m *Manager) remove(g *vmGuest, ev event) {
	info := m.setState(g, "removing", "", "")
	if err := m.hook.Remove(m.ctx, info.Index); err != nil {
		m.setState(g, "failed", "", err.Error())
		m.logf("%s: guest %d was not removed: %v", info.VM, info.Index, err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if g.gen == ev.gen {
		delete(m.vms, info.Ref)
		m.used[info.Index] = false
	}
}

// Guests lists the VMs' guests by index.
func (m *Manager) Guests() []Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Info, 0, len(m.vms))
	for _, g := range m.vms {
		out = append(out, g.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

// WaitIdle returns once every event so far has been handled.
func (m *Manager) WaitIdle() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.busy > 0 {
		m.idle.Wait()
	}
}

// Close takes no more events, ends the hooks running, and removes every guest (Hook.Down).
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.cancel()
	m.wg.Wait()
	return m.hook.Down(ctx)
}

var dnsLabel = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// Hostname is the guest's host name: the VM's name where it is a DNS label, else guest<index>.
func Hostname(vm string, index int) string {
	if dnsLabel.MatchString(vm) {
		return vm
	}
	return "guest" + strconv.Itoa(index)
}

// Watch feeds the manager the power events of the simulator's VMs (a registry handler sees every change of
// runtime.powerState and every VM removed) and starts the guests of the VMs already powered on.
func (m *Manager) Watch(reg *simulator.Registry) {
	reg.AddHandler(&watcher{m: m})
	for _, obj := range reg.All("VirtualMachine") {
		if vm, ok := obj.(*simulator.VirtualMachine); ok && vm.Runtime.PowerState == types.VirtualMachinePowerStatePoweredOn {
			m.PoweredOn(vm.Self, vm.Name)
		}
	}
}

type watcher struct{ m *Manager }

func (w *watcher) Reference() types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: "GpusimGuests", Value: "gpusim-guests"}
}

func (w *watcher) PutObject(*simulator.Context, mo.Reference) {}

// UpdateObject runs while the VM's change is applied: it only queues the event.
func (w *watcher) UpdateObject(_ *simulator.Context, obj mo.Reference, changes []types.PropertyChange) {
	vm, ok := obj.(*mo.VirtualMachine)
	if !ok {
		return
	}
	for _, c := range changes {
		if c.Name != "runtime.powerState" {
			continue
		}
		switch state, _ := c.Val.(types.VirtualMachinePowerState); state {
		case types.VirtualMachinePowerStatePoweredOn:
			w.m.PoweredOn(vm.Self, vm.Name)
		case types.VirtualMachinePowerStatePoweredOff, types.VirtualMachinePowerStateSuspended:
			w.m.PoweredOff(vm.Self)
		}
	}
}

func (w *watcher) RemoveObject(_ *simulator.Context, ref types.ManagedObjectReference) {
	if ref.Type == "VirtualMachine" {
		w.m.Destroyed(ref)
	}
}
